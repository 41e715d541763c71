"""``mate demo``: one QSA prefill step on synthetic data, timed and checked.

Stages: indexer scores (:func:`mate.qsa_indexer_mqa_score`) -> top-k blocks
(:func:`mate.topk_blocks`) -> token expansion with the causal tail
(:func:`mate.expand_blocks`) -> sparse core attention over paged K/V
(:func:`mate.qsa_sparse_attention`, gate and LSE on).

On a supported GPU the stages run natively and are compared with the FP32
reference on the same inputs; elsewhere the reference runs on the CPU and is
compared with an independent dense PyTorch computation (float64 einsum +
masked softmax).

Backend choice: ``--backend tilelang`` asks for the native kernels, and a device or an
installation that cannot run them is an option error (exit 2, nothing runs). Without
``--backend`` the demo picks the native backend where it can run and the reference
elsewhere, saying why in one note line; a stage whose native kernel is then unavailable
falls back to the reference, also in one line.
"""

from __future__ import annotations

import importlib.util
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from mate_core.arch import NATIVE_TARGETS, describe_device, native_target_for
from mate_core.errors import BackendUnavailableError, UnsupportedTargetError
from mate_reference.selection import expand_blocks, topk_blocks

from . import _env
from ._table import Printer
from .mqa import qsa_indexer_mqa_score
from .sparse import qsa_sparse_attention

__all__ = ["DemoConfig", "run_demo"]

PAGE_SIZE = 64
INDEX_HEADS, INDEX_DIM = 4, 128
Q_HEADS, KV_HEADS, HEAD_DIM = 24, 2, 256
# Relative L2 tolerances: bf16 operands or outputs vs FP32/FP64 (section 5 of QSA-DESIGN.md,
# the project's design document, kept outside this repository), and the FP32 oracle's FP32
# outputs vs a float64 dense computation.
LOW_PRECISION_TOL = 1e-2
FP32_TOL = 1e-4
# Default problem sizes: a native run is big enough to be worth timing; the CPU reference
# stays small (seconds). Also in the ``mate demo --help`` text and the README.
NATIVE_SEQ_LEN, NATIVE_TOPK = 2048, 64
REFERENCE_SEQ_LEN, REFERENCE_TOPK = 256, 16
MAX_TOPK = 512  # the block-hint width rule: 512 blocks -> 4 * 512 + 3 = 2051 token slots


@dataclass(frozen=True)
class DemoConfig:
    device: str
    backend: str
    requests: int
    seq_len: int
    topk: int
    seed: int
    dtype: torch.dtype = torch.bfloat16
    automatic: bool = False  # the backend was chosen by the demo (no --backend given)

    @property
    def slots(self) -> int:
        return 4 * self.topk + 3


@dataclass
class Stage:
    name: str
    backend: str
    inputs: str
    output: str
    first_ms: float
    warm_ms: float


@dataclass
class Agreement:
    name: str
    against: str
    max_abs: float
    rel_l2: float
    inf_pattern_equal: bool
    tol: float

    @property
    def ok(self) -> bool:
        return self.inf_pattern_equal and self.rel_l2 <= self.tol


@dataclass
class DemoResult:
    config: DemoConfig
    stages: list[Stage] = field(default_factory=list)
    agreements: list[Agreement] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)  # stages that ran the reference instead
    fallback_reason: str = ""

    @property
    def ok(self) -> bool:
        return bool(self.agreements) and all(a.ok for a in self.agreements)


def _shape(t: torch.Tensor) -> str:
    return f"{list(t.shape)} {str(t.dtype).replace('torch.', '')}"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn: Callable[[], Any], device: torch.device) -> tuple[Any, float, float]:
    """Result, first-call ms (includes any kernel compile) and warm-call ms."""
    times = []
    for _ in range(2):
        _sync(device)
        start = time.perf_counter()
        result = fn()
        _sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    return result, times[0], times[1]


def _synthetic(cfg: DemoConfig, device: torch.device) -> dict[str, torch.Tensor]:
    """Random inputs of one prefill step; K/V live in shuffled 64-token pages."""
    gen = torch.Generator().manual_seed(cfg.seed)
    r, s = cfg.requests, cfg.seq_len

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(device=device, dtype=cfg.dtype)

    pages_per_req = s // PAGE_SIZE
    block_table = torch.randperm(r * pages_per_req, generator=gen).view(r, pages_per_req).to(torch.int32)
    k_logical, v_logical = randn(r, s, KV_HEADS, HEAD_DIM), randn(r, s, KV_HEADS, HEAD_DIM)
    return {
        "q_idx": randn(r, s, INDEX_HEADS, INDEX_DIM),
        "block_keys": randn(r, s // 4, INDEX_DIM),
        "positions": torch.arange(s, dtype=torch.int32, device=device).expand(r, s),
        "query": randn(r, s, Q_HEADS, HEAD_DIM),
        "gate": randn(r, s, Q_HEADS),
        "k_logical": k_logical,
        "v_logical": v_logical,
        "key": _to_pages(k_logical, block_table),
        "value": _to_pages(v_logical, block_table),
        "block_table": block_table.to(device),
    }


def _to_pages(logical: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
    """[R, S, H, D] -> [pages, PAGE_SIZE, H, D] with page block_table[r, p] holding tokens p*64.."""
    r, s, h, d = logical.shape
    pages = torch.empty(r * (s // PAGE_SIZE), PAGE_SIZE, h, d, dtype=logical.dtype, device=logical.device)
    pages[block_table.flatten().long().to(logical.device)] = logical.reshape(-1, PAGE_SIZE, h, d)
    return pages


@dataclass
class Outputs:
    """What the pipeline produced, and which backend produced each native-capable stage."""

    scores: torch.Tensor
    blocks: torch.Tensor
    tokens: torch.Tensor
    out: torch.Tensor
    lse: torch.Tensor
    score_backend: str
    attention_backend: str


def _one_line(exc: BaseException) -> str:
    """The first clause of an error message: what went wrong, without the advice that follows."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text.split("; ")[0]


def _with_fallback(
    result: DemoResult, stage: str, backend: str, call: Callable[[str], Any], device: torch.device
) -> tuple[Any, str, float, float]:
    """Run ``call(backend)``; if an automatically chosen native backend cannot run, use the reference.

    A backend the user asked for is never replaced: its error propagates.
    """
    try:
        out, first, warm = _timed(lambda: call(backend), device)
        return out, backend, first, warm
    except (BackendUnavailableError, UnsupportedTargetError) as exc:
        if backend == "reference" or not result.config.automatic:
            raise
        result.fallbacks.append(stage)
        result.fallback_reason = result.fallback_reason or _one_line(exc)
    out, first, warm = _timed(lambda: call("reference"), device)
    return out, "reference", first, warm


def _score(x: dict[str, torch.Tensor], backend: str) -> torch.Tensor:
    return qsa_indexer_mqa_score(x["q_idx"], x["block_keys"], backend=backend)


def _attend(
    x: dict[str, torch.Tensor], tokens: torch.Tensor, blocks: torch.Tensor, backend: str
) -> tuple[torch.Tensor, torch.Tensor]:
    return qsa_sparse_attention(
        x["query"],
        x["key"],
        x["value"],
        tokens,
        block_indices=blocks,
        block_table=x["block_table"],
        gate=x["gate"],
        return_lse=True,
        backend=backend,
    )


def _pipeline(cfg: DemoConfig, x: dict[str, torch.Tensor], result: DemoResult) -> Outputs:
    device = torch.device(cfg.device)
    scores, score_backend, first, warm = _with_fallback(
        result, "indexer score", cfg.backend, lambda b: _score(x, b), device
    )
    inputs = f"q_idx {_shape(x['q_idx'])}, block_keys {_shape(x['block_keys'])}"
    result.stages.append(Stage("indexer score", score_backend, inputs, f"scores {_shape(scores)}", first, warm))

    blocks, first, warm = _timed(lambda: topk_blocks(scores, cfg.topk), device)
    result.stages.append(
        Stage("top-k blocks", "torch", f"scores, k={cfg.topk}", f"blocks {_shape(blocks)}", first, warm)
    )

    tokens, first, warm = _timed(lambda: expand_blocks(blocks, x["positions"]), device)
    result.stages.append(Stage("expand blocks", "torch", "blocks, positions", f"tokens {_shape(tokens)}", first, warm))

    (out, lse), attention_backend, first, warm = _with_fallback(
        result, "sparse attention", cfg.backend, lambda b: _attend(x, tokens, blocks, b), device
    )
    inputs = f"query {_shape(x['query'])}, K/V pages {_shape(x['key'])}, tokens, block hint, gate"
    output = f"out {_shape(out)}, lse {_shape(lse)}"
    result.stages.append(Stage("sparse attention", attention_backend, inputs, output, first, warm))
    return Outputs(scores, blocks, tokens, out, lse, score_backend, attention_backend)


def _compare(name: str, against: str, got: torch.Tensor, want: torch.Tensor, tol: float) -> Agreement:
    got, want = got.double().cpu(), want.double().cpu()
    same_inf = torch.equal(torch.isneginf(got), torch.isneginf(want))
    finite = torch.isfinite(got) & torch.isfinite(want)
    diff = (got[finite] - want[finite]).abs()
    max_abs = diff.max().item() if diff.numel() else 0.0
    norm = want[finite].norm().item()
    rel = diff.norm().item() / norm if norm > 0 else diff.norm().item()
    return Agreement(name, against, max_abs, rel, same_inf, tol)


def _dense_scores(x: dict[str, torch.Tensor]) -> torch.Tensor:
    """Indexer scores by einsum in float64, with the causal block mask."""
    q, k = x["q_idx"].double(), x["block_keys"].double()
    s = torch.einsum("bqhd,bnd->bqhn", q, k).relu().sum(2) / math.sqrt(q.shape[-1])
    pos = torch.arange(q.shape[1], device=q.device)[:, None]
    last_token = 4 * torch.arange(k.shape[1], device=q.device)[None, :] + 3
    return s.masked_fill(last_token > pos, float("-inf"))


def _dense_attention(x: dict[str, torch.Tensor], tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gated attention over the selected tokens as a dense masked softmax in float64."""
    q, k, v = x["query"].double(), x["k_logical"].double(), x["v_logical"].double()
    r, s, hq, d = q.shape
    group = hq // k.shape[2]
    k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    selected = torch.zeros(r, s, s + 1, dtype=torch.bool, device=q.device)
    selected.scatter_(2, torch.where(tokens >= 0, tokens, s).long(), True)  # -1 -> spare column s
    logits = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d)
    logits = logits.masked_fill(~selected[:, None, :, :s], float("-inf"))
    lse = torch.logsumexp(logits, dim=-1)
    out = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(logits, dim=-1), v)
    return out * torch.sigmoid(x["gate"].double())[..., None], lse.transpose(1, 2)


_ORACLE = "backend='reference' (FP32 oracle)"
_DENSE = "dense float64 PyTorch"


def _check(x: dict[str, torch.Tensor], run: Outputs, result: DemoResult) -> None:
    """A native stage is compared with the reference on the same inputs; a reference stage with dense math."""
    if run.score_backend == "tilelang":
        want_scores, against = _score(x, "reference"), _ORACLE
    else:
        want_scores, against = _dense_scores(x), _DENSE
    result.agreements.append(_agreement("indexer scores", against, run.scores, want_scores))
    if run.attention_backend == "tilelang":
        (want_out, want_lse), against = _attend(x, run.tokens, run.blocks, "reference"), _ORACLE
    else:
        (want_out, want_lse), against = _dense_attention(x, run.tokens), _DENSE
    result.agreements.append(_agreement("attention out", against, run.out, want_out))
    result.agreements.append(_agreement("attention lse", against, run.lse, want_lse))


def _agreement(name: str, against: str, got: torch.Tensor, want: torch.Tensor) -> Agreement:
    return _compare(name, against, got, want, _tolerance(got, native=against == _ORACLE))


def _tolerance(got: torch.Tensor, native: bool) -> float:
    return LOW_PRECISION_TOL if native or got.dtype in (torch.bfloat16, torch.float16) else FP32_TOL


def _report(result: DemoResult, run: Outputs, printer: Printer) -> None:
    cfg = result.config
    printer.line("MATE-QSA demo: one QSA prefill step on synthetic data")
    printer.line(
        f"device {describe_device(cfg.device)}, backend '{cfg.backend}' "
        f"({'chosen automatically' if cfg.automatic else 'requested'}), "
        f"{str(cfg.dtype).replace('torch.', '')}; {cfg.requests} requests x {cfg.seq_len} tokens; indexer "
        f"{INDEX_HEADS} heads x {INDEX_DIM}; attention {Q_HEADS}/{KV_HEADS} heads x {HEAD_DIM}; top-{cfg.topk} "
        f"blocks -> {cfg.slots} token slots; K/V in shuffled pages of {PAGE_SIZE}"
    )
    notes = list(result.notes)
    if result.fallbacks:
        notes.append(
            f"native backend unavailable for {' and '.join(result.fallbacks)} ({result.fallback_reason}); "
            "ran backend='reference' there"
        )
    for note in notes:
        printer.line(f"note: {note}")
    printer.table(
        "Stages (first call includes any kernel compilation)",
        ("stage", "backend", "inputs", "output", "first ms", "warm ms"),
        [(s.name, s.backend, s.inputs, s.output, f"{s.first_ms:.2f}", f"{s.warm_ms:.2f}") for s in result.stages],
    )
    used = (run.tokens >= 0).sum(-1).double()
    mean, most = used.mean().item(), int(used.max().item())
    printer.line(f"selected tokens per query row: mean {mean:.1f}, max {most} of {cfg.slots} slots")
    printer.table(
        "Agreement",
        ("output", "compared with", "max abs err", "rel L2 err", "-inf pattern", "tolerance", "ok"),
        [_agreement_row(a) for a in result.agreements],
    )
    if result.ok:
        printer.line("PASS: every output agrees within tolerance")
    else:
        printer.line("FAIL: some outputs disagree (see the Agreement table)")


def _agreement_row(a: Agreement) -> tuple[str, ...]:
    pattern = "identical" if a.inf_pattern_equal else "DIFFERS"
    return (a.name, a.against, f"{a.max_abs:.3e}", f"{a.rel_l2:.3e}", pattern, f"{a.tol:g}", "yes" if a.ok else "NO")


def _default_device() -> str:
    device = _env.supported_device()
    return device if device is not None and _tilelang_installed() else "cpu"


def _given(value: int | None, default: int) -> int:
    return default if value is None else value


def _tilelang_installed() -> bool:
    """Whether TileLang can be imported (the native launchers' own test; imports nothing)."""
    return importlib.util.find_spec("tilelang") is not None


def _native_problem(device: str) -> str | None:
    """Why the native backend cannot run on ``device`` here, in one line; None when it can."""
    try:
        target = native_target_for(device)
    except UnsupportedTargetError:
        supported = ", ".join(t.name for t in NATIVE_TARGETS)
        name = device if torch.device(device).type == "cpu" else describe_device(device)
        return f"{name} is not a native target (supported: {supported})"
    if not _tilelang_installed():
        return f"TileLang is not installed (the {target.name} target needs {target.toolchain})"
    return None


_ACCELERATORS = ("cuda", "musa", "xpu", "mps")


_device_count = _env.device_count  # a module global, so that tests can stand in for the machine


def _expected_devices() -> str:
    choices = ["cpu"]
    for device_type in _ACCELERATORS:
        count = _device_count(device_type)
        if count:
            choices += [device_type, f"{device_type}:0" + (f"..{device_type}:{count - 1}" if count > 1 else "")]
    return choices[0] if len(choices) == 1 else ", ".join(choices[:-1]) + " or " + choices[-1]


def _device_error(device: str) -> str | None:
    """Why ``--device`` cannot run the demo here (one line), or None; checked before anything runs."""
    expected = f"expected {_expected_devices()}"
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        return f"--device: got {device!r} (not a torch device); {expected}"
    if parsed.type == "cpu":
        return None
    if parsed.type == "meta":
        return f"--device: got {device!r} (meta tensors hold no data to compute with); {expected}"
    count = _device_count(parsed.type)
    if count == 0:
        why = f"torch.{parsed.type}.is_available() is False"
        if parsed.type == "cuda" and torch.version.cuda is None and torch.version.hip is None:
            why += ": this torch is a CPU-only build"
        elif getattr(torch, parsed.type, None) is None:
            why = f"this torch has no {parsed.type} backend"
        return f"--device: got {device!r} ({why}); {expected}"
    if parsed.index is not None and parsed.index >= count:
        return f"--device: got {device!r} (this machine has {count} {parsed.type} device(s)); {expected}"
    return None


def _config(
    device: str | None, backend: str | None, requests: int | None, seq_len: int | None, topk: int | None, seed: int
) -> DemoConfig:
    """The run's settings: an explicit backend is kept; without one, native where it can run."""
    automatic = backend is None
    if device is None:
        # Asked for the native kernels: the supported device even without TileLang, so that the
        # error names the missing TileLang rather than the CPU.
        device = (_env.supported_device() or "cpu") if backend == "tilelang" else _default_device()
    if backend is None:
        backend = "reference" if _native_problem(device) else "tilelang"
    big = backend == "tilelang"  # the reference stays small: seconds on a CPU
    return DemoConfig(
        device=device,
        backend=backend,
        requests=_given(requests, 2),
        seq_len=_given(seq_len, NATIVE_SEQ_LEN if big else REFERENCE_SEQ_LEN),
        topk=_given(topk, NATIVE_TOPK if big else REFERENCE_TOPK),
        seed=seed,
        automatic=automatic,
    )


def _config_error(cfg: DemoConfig) -> str | None:
    if cfg.requests < 1:
        return f"--requests: got {cfg.requests}; expected >= 1"
    if cfg.seq_len < PAGE_SIZE or cfg.seq_len % PAGE_SIZE:
        return f"--seq-len: got {cfg.seq_len}; expected a positive multiple of {PAGE_SIZE}"
    if not 1 <= cfg.topk <= MAX_TOPK:
        return f"--topk: got {cfg.topk}; expected 1..{MAX_TOPK}: at most {MAX_TOPK} blocks ({4 * MAX_TOPK + 3} tokens)"
    if not cfg.automatic and cfg.backend == "tilelang":
        problem = _native_problem(cfg.device)
        if problem:
            return _backend_error(problem)
    return None


def _backend_error(problem: str) -> str:
    return f"--backend tilelang: {problem}; pass --backend reference, or omit --backend to choose automatically"


def _config_notes(cfg: DemoConfig) -> list[str]:
    """One line each: why an automatic choice is the reference, and padded top-k slots."""
    notes = []
    if cfg.automatic and cfg.backend == "reference":
        notes.append(f"running backend='reference': {_native_problem(cfg.device)}")
    blocks = cfg.seq_len // 4
    if cfg.topk > blocks:
        notes.append(
            f"--topk {cfg.topk} > {blocks} blocks of a {cfg.seq_len}-token sequence: the extra slots are -1 padding"
        )
    return notes


def run_demo(
    device: str | None = None,
    backend: str | None = None,
    requests: int | None = None,
    seq_len: int | None = None,
    topk: int | None = None,
    seed: int = 0,
    printer: Printer | None = None,
) -> int:
    """Run, check and print the demo; returns 0 when every output agrees, 1 if not, 2 on bad options.

    Options are checked before anything runs, ``device`` first (a string torch cannot parse,
    ``meta``, or an accelerator this torch cannot use), then the sizes, then whether an
    explicitly requested ``backend="tilelang"`` can run here.
    """
    printer = printer or Printer()
    error = _device_error(device) if device is not None else None
    if error is None:
        cfg = _config(device, backend, requests, seq_len, topk, seed)
        error = _config_error(cfg)
    if error:
        printer.line(f"mate demo: {error}")
        return 2
    result = DemoResult(cfg, notes=_config_notes(cfg))
    x = _synthetic(cfg, torch.device(cfg.device))
    try:
        run = _pipeline(cfg, x, result)
    except (BackendUnavailableError, UnsupportedTargetError) as exc:
        if cfg.automatic or cfg.backend != "tilelang":
            raise
        printer.line(f"mate demo: {_backend_error(_one_line(exc))}")  # a kernel missing from this build
        return 2
    _check(x, run, result)
    _report(result, run, printer)
    return 0 if result.ok else 1
