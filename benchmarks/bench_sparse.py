"""Sparse core attention benchmark (issue 4 shapes): native TileLang vs PyTorch vs FlexAttention.

Shapes (bf16, 24 Q heads / 2 KV heads / D 256, page size 64, shuffled physical pages,
gate [rows, Hq] and LSE on, flattened queries with ``cu_seqlens_q`` + ``seq_lens_k``):

* ``decode_64x1``: 64 requests x 1 row, context 131071 (capacity 131072), each row 512
  random visible 4-token blocks + the 3 tail tokens of its own block = 2051 tokens;
* ``decode_64x4``: 64 requests x 4 rows (positions 131067..131070), independent
  selections (512 blocks + 0..3 tail tokens, -1 padded to 2051);
* ``prefill_overlap``: one request, 4096 rows at positions 126976..131071, 512 blocks +
  tail per row, each row replacing ~10% of its predecessor's blocks (~90% neighbour
  overlap);
* ``prefill_uniform``: the same with independent uniform random blocks per row.
* ``prefill_mixed`` (not an issue shape; no target): what a chunked-prefill engine sends, one
  request's 2048-row prefill chunk (positions 129024..131071, ~90% neighbour overlap) followed
  by 512 one-row decode requests (independent selections), every request over a 131072-token
  context whose pages are drawn at random from a shared pool of 16384 pages (the issue shapes'
  one-owner-per-page layout would need 137 GB). FlexAttention is not run on it (its setup
  here builds a contiguous cache per request).

The prefill cases are one request of 4096 rows, so the native call takes the row-group union
path (``mate_kernels_musa.sparse_union``, the default for prefill chunks); their rows also
carry ``no_union_us``: the paged kernel alone on the ids as given (no union path, no region
sort), and ``no_union_sorted_us``: the paged kernel after the region sort of every row (what
``MATE_SPARSE_UNION=0`` runs).

With ``physical`` (default on), each case also runs the ``selected_kv_indices`` path on
the same selections translated to physical rows of the flattened cache ``[pages * 64,
Hkv, D]`` (what an engine that does its own page translation passes; no gate on that
path, so its output times ``sigmoid(gate)`` is checked against the gated PyTorch path):
row ``<case>_physical``, same floor (minus the gate bytes) and target, with its time
relative to the paged row.

Measured in one process: the native kernel (CUDA-graph replay of the backend call, L2
flushed before each replay by reading a 256 MB buffer; ``native_write_flush_us`` is the
same timing after a write flush, which adds the flusher's dirty-line write-back), the plain-PyTorch path (page translation + gather + bf16
matmuls + FP32 softmax, the same semantics), FlexAttention (``flex_attention`` compiled,
the selection as a ``mask_mod`` over a logically contiguous copy of the cache; skipped
with a note when it fails), and the ceilings (``benchmarks.timing.measure_ceilings``).
Floor: K+V bytes of the used tokens (+ Q, out) over the measured copy bandwidth, i.e. no
reuse between rows. Each case checks the native output against the PyTorch path once
before timing. A sweep over (tile, num_splits) backs the ``num_splits=None`` heuristic
in ``mate_kernels_musa.sparse_schedule``.

``python -m benchmarks.bench_sparse [--quick] [--no-flex] [--no-sweep] [--no-physical] [--cases ...] [--json PATH]``
prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import torch

from benchmarks.checks import check_agreement, missing_cuda
from benchmarks.timing import env_info, measure_ceilings, native_fields, time_cuda_graph

HQ, HKV, D = 24, 2, 256
PAGE = 64
CTX = 131072
BLOCKS = 512
WIDTH = 4 * BLOCKS + 3
SCALE = 1.0 / math.sqrt(D)
TARGETS = {"decode_64x1": 1.2, "decode_64x4": 1.1, "prefill_overlap": 0.45, "prefill_uniform": 0.6}
DESIGN_COPY_TBPS = 4.27  # QSA-DESIGN.md section 4 (also reported: the floor at the copy rate measured now)
PUBLIC_US = {"decode_64x1": 93.0, "decode_64x4": 322.0, "prefill_overlap": 2360.0, "prefill_uniform": 2840.0}
CASES = (*TARGETS, "prefill_mixed")  # the issue shapes, then a mixed batch (no target)
MIXED_CHUNK, MIXED_DECODE, MIXED_POOL = 2048, 512, 16384


def _selection(pos: torch.Tensor, gen: torch.Generator, overlap: bool) -> torch.Tensor:
    """int32 ``[rows, WIDTH]``: 512 visible 4-token blocks + the tail of the own block, -1 padded."""
    rows = pos.numel()
    nvis = (pos + 1) // 4
    if overlap:
        blocks = torch.empty(rows, BLOCKS, dtype=torch.long)
        cur = torch.randperm(int(nvis[0]), generator=gen)[:BLOCKS]
        for i in range(rows):
            if i:
                k = BLOCKS // 10
                cur = cur.clone()
                cur[torch.randperm(BLOCKS, generator=gen)[:k]] = torch.randint(0, int(nvis[i]), (k,), generator=gen)
            blocks[i] = cur
    else:
        keys = torch.rand(rows, int(nvis.max()), generator=gen)
        keys[torch.arange(keys.shape[1])[None, :] >= nvis[:, None]] = -1.0
        blocks = keys.topk(BLOCKS, dim=1).indices
    ids = (blocks[:, :, None] * 4 + torch.arange(4)).reshape(rows, -1)
    tail = nvis[:, None] * 4 + torch.arange(3)
    tail = torch.where(tail <= pos[:, None], tail, torch.full_like(tail, -1))
    return torch.cat([ids, tail], dim=1).to(torch.int32)


def _mixed_inputs(gen: torch.Generator) -> tuple[list[int], torch.Tensor, torch.Tensor, int]:
    """(rows per request, selections, block table, pages) of ``prefill_mixed``."""
    chunk = CTX - MIXED_CHUNK + torch.arange(MIXED_CHUNK)
    decode = torch.full((MIXED_DECODE,), CTX - 1)
    sel = torch.cat([_selection(chunk, gen, overlap=True), _selection(decode, gen, overlap=False)])
    table = torch.randint(0, MIXED_POOL, (1 + MIXED_DECODE, CTX // PAGE), generator=gen, dtype=torch.int32)
    return [MIXED_CHUNK] + [1] * MIXED_DECODE, sel, table, MIXED_POOL


def make_inputs(name: str, seed: int = 0) -> dict[str, Any]:
    """Keyword arguments of ``qsa_sparse_attention`` for one benchmark shape, on the GPU."""
    gen = torch.Generator().manual_seed(seed)
    if name == "prefill_mixed":
        per_req, sel, table, pages = _mixed_inputs(gen)
        seq_k = CTX
    else:
        if name.startswith("decode"):
            n_req, per = 64, (1 if name.endswith("x1") else 4)
            seq_k = CTX - 1
            pos = torch.cat([seq_k - per + torch.arange(per) for _ in range(n_req)])
            sel = _selection(pos, gen, overlap=False)
        else:
            n_req, per, seq_k = 1, 4096, CTX
            pos = seq_k - per + torch.arange(per)
            sel = _selection(pos, gen, overlap=name.endswith("overlap"))
        per_req = [per] * n_req
        pages = n_req * (CTX // PAGE)  # each request owns its pages, shuffled
        table = torch.randperm(pages, generator=gen).view(n_req, CTX // PAGE).to(torch.int32)
    dev = "cuda"
    n_req, rows = len(per_req), sum(per_req)
    cu = torch.zeros(n_req + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(per_req), 0)
    return {
        "query": torch.randn(rows, HQ, D, device=dev, dtype=torch.bfloat16),
        "key": torch.randn(pages, PAGE, HKV, D, device=dev, dtype=torch.bfloat16),
        "value": torch.randn(pages, PAGE, HKV, D, device=dev, dtype=torch.bfloat16),
        "token_indices": sel.to(dev),
        "cu_seqlens_q": cu.to(dev),
        "seq_lens_k": torch.full((n_req,), seq_k, dtype=torch.int32, device=dev),
        "block_table": table.to(dev),
        "gate": torch.randn(rows, HQ, device=dev, dtype=torch.bfloat16),
        "return_lse": True,
        "scale": SCALE,
    }


def _positions(kw: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """(request of each row, causal position of each row), int64."""
    cu = kw["cu_seqlens_q"].long()
    per = torch.diff(cu)
    req = torch.repeat_interleave(torch.arange(per.numel(), device=cu.device), per)
    local = torch.arange(req.numel(), device=cu.device) - cu[req]
    pos = kw["seq_lens_k"].long()[req] - per[req] + local
    return req, pos


def _physical_rows(kw: dict[str, Any], meta: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(row of ``key.view(-1, Hkv, D)`` of each slot, 0 where unused; used mask), ``[rows, T]``."""
    key, ids = kw["key"], kw["token_indices"].long()
    req, pos = meta
    table = kw["block_table"].long()
    used = (ids >= 0) & (ids <= pos[:, None]) & (ids < kw["seq_lens_k"].long()[req][:, None])
    t = ids.clamp(min=0)
    page = table[req[:, None], (t // PAGE).clamp(max=table.shape[1] - 1)]
    used &= (page >= 0) & (page < key.shape[0])
    return torch.where(used, page.clamp(0, key.shape[0] - 1) * PAGE + t % PAGE, torch.zeros_like(t)), used


def physical_inputs(kw: dict[str, Any], meta: tuple[torch.Tensor, torch.Tensor]) -> dict[str, Any]:
    """The same call on the physical path: translated ids (-1 where unused), flattened K/V, no gate."""
    phys, used = _physical_rows(kw, meta)
    return {
        "query": kw["query"],
        "key": kw["key"].view(-1, HKV, D),
        "value": kw["value"].view(-1, HKV, D),
        "selected_kv_indices": torch.where(used, phys, torch.full_like(phys, -1)).to(torch.int32),
        "return_lse": True,
        "scale": kw["scale"],
    }


def torch_path(kw: dict[str, Any], meta: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain PyTorch: page translation, gather, bf16 matmuls, FP32 softmax, gate. (out, lse).

    ``meta`` = ``_positions(kw)``, precomputed (repeat_interleave syncs, so it cannot be captured).
    """
    q, key, value = kw["query"], kw["key"], kw["value"]
    phys, used = _physical_rows(kw, meta)
    k = key.view(-1, HKV, D)[phys]  # [rows, T, Hkv, D]
    v = value.view(-1, HKV, D)[phys]
    rows = q.shape[0]
    qg = q.view(rows, HKV, HQ // HKV, D)
    s = torch.einsum("rhgd,rthd->rhgt", qg, k).float() * kw["scale"]
    s = s.masked_fill(~used[:, None, None, :], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.nan_to_num(neginf=0.0)[..., None]).to(q.dtype)
    out = torch.einsum("rhgt,rthd->rhgd", p, v).reshape(rows, HQ, D)
    out = out * torch.sigmoid(kw["gate"].float())[..., None]
    return out.to(q.dtype), lse.reshape(rows, HQ)


def _flex_setup(kw: dict[str, Any]):
    """FlexAttention over a logically contiguous copy of each request's cache; returns a callable."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    _, pos = _positions(kw)
    n_req = kw["block_table"].shape[0]
    per = kw["query"].shape[0] // n_req
    table = kw["block_table"].long()
    # Logical K/V [n_req, Hkv, CTX, D] (setup, not timed).
    k = kw["key"][table].reshape(n_req, CTX, HKV, D).transpose(1, 2).contiguous()
    v = kw["value"][table].reshape(n_req, CTX, HKV, D).transpose(1, 2).contiguous()
    ids = kw["token_indices"].long()
    sel = torch.zeros(ids.shape[0], CTX // 4, dtype=torch.bool, device=ids.device)
    sel.scatter_(1, (ids.clamp(min=0) // 4), ids >= 0)
    posr = pos.view(n_req, per)
    selr = sel.view(n_req, per, CTX // 4)

    def mask_mod(b, h, q_idx, kv_idx):
        return selr[b, q_idx, kv_idx // 4] & (kv_idx <= posr[b, q_idx])

    block_mask = create_block_mask(mask_mod, n_req, None, per, CTX, device="cuda", _compile=True)
    q = kw["query"].view(n_req, per, HQ, D).transpose(1, 2)
    gate = torch.sigmoid(kw["gate"].float()).view(n_req, per, HQ).transpose(1, 2)[..., None]
    flex = torch.compile(flex_attention, dynamic=False)

    def run():
        out, lse = flex(q, k, v, block_mask=block_mask, scale=kw["scale"], enable_gqa=True, return_lse=True)
        return (out.float() * gate).to(q.dtype), lse

    return run


def _floor_us(kw: dict[str, Any], copy_tbps: float) -> float:
    ids = kw["token_indices"] if "token_indices" in kw else kw["selected_kv_indices"]
    tokens = int((ids >= 0).sum())
    kv_bytes = 2 * tokens * HKV * D * 2
    gate = kw.get("gate")
    io_bytes = 2 * kw["query"].numel() * 2 + (0 if gate is None else gate.numel() * 2) + kw["query"].shape[0] * HQ * 4
    return (kv_bytes + io_bytes) / (copy_tbps * 1e12) * 1e6


def _native_plan(kw: dict[str, Any]):
    from mate_core import plan_sparse_attention

    return plan_sparse_attention(**kw, backend="tilelang")


def _sweep(plan, ref_out: torch.Tensor, reps: int, splits_list: tuple[int, ...]) -> list[dict[str, Any]]:
    """Time every (tile, splits); each result also carries its error against the PyTorch path."""
    from mate_kernels_musa.sparse_groups import GROUPS
    from mate_kernels_musa.sparse_launch import sparse_attention
    from mate_kernels_musa.sparse_schedule import CANDIDATES, TILES, Schedule

    out = []
    # Every tile, plus the production tile with one gather pipeline per chunk instead of per split.
    scheds = [Schedule(tile, splits) for tile in [*TILES.values(), *CANDIDATES.values()] for splits in splits_list]
    scheds += [Schedule(tile, splits, one_pipe=False) for tile in TILES.values() for splits in splits_list]
    # The four splits also as the thread groups of one CTA (sparse_groups; what num_splits=None picks there).
    scheds += [Schedule(tile, GROUPS, groups=GROUPS) for tile in TILES.values() if GROUPS in splits_list]
    for sched in scheds:
        plan.out.fill_(float("nan"))
        sparse_attention(plan, sched)
        err = check_agreement(f"sweep {sched.label}", plan.out, ref_out)
        t = time_cuda_graph(lambda s=sched: sparse_attention(plan, s), reps=reps)
        out.append({"tile": sched.tile.name, "splits": sched.splits, "schedule": sched.label, "us": t["median_us"],
                    "rel_l2_vs_torch": err})  # fmt: skip
    return out


def _no_union_timing(name: str, plan, ref_out: torch.Tensor, reps: int) -> dict[str, Any]:
    """The call without the row-group union path: the paged kernel alone on the ids as given
    (``no_union``) and after the region sort of every row (``no_union_sorted``, what
    ``MATE_SPARSE_UNION=0`` runs)."""
    import dataclasses

    from mate_kernels_musa.sparse_launch import schedule_for, sparse_attention

    row: dict[str, Any] = {}
    base = dataclasses.replace(schedule_for(plan), union_rows=0)
    for key, sched in (("no_union", dataclasses.replace(base, sort=False)),
                       ("no_union_sorted", dataclasses.replace(base, sort=True))):  # fmt: skip
        plan.out.fill_(float("nan"))
        sparse_attention(plan, sched)
        row[f"{key}_rel_l2_vs_torch"] = check_agreement(f"{name} {sched.label}", plan.out, ref_out)
        row[f"{key}_us"] = time_cuda_graph(lambda s=sched: sparse_attention(plan, s), reps=reps)["median_us"]
    return row


def _timed_row(name: str, kw: dict[str, Any], ids: str, sched, native: dict[str, float],
               ceil: dict[str, float]) -> dict[str, Any]:  # fmt: skip
    """The fields every timed row carries: shape, schedule, native percentiles, floors and ratios."""
    floor = _floor_us(kw, ceil["copy_TBps"])
    floor_design = _floor_us(kw, DESIGN_COPY_TBPS)
    return {
        "name": name,
        "rows": kw["query"].shape[0],
        "width": kw[ids].shape[1],
        "schedule": sched.label,
        **native_fields(native),
        "floor_us": floor,
        "ratio_to_floor": native["median_us"] / floor,
        "floor_us_at_4.27TBps": floor_design,
        "ratio_to_floor_at_4.27TBps": native["median_us"] / floor_design,
        "target_ratio": TARGETS.get(name.removesuffix("_physical")),
    }


def bench_physical(name: str, kw: dict[str, Any], meta, ref: tuple[torch.Tensor, torch.Tensor],
                   paged_us: float, ceil: dict[str, float], reps: int) -> dict[str, Any]:  # fmt: skip
    """The ``selected_kv_indices`` row of case ``name`` (same selections as the paged row)."""
    from mate_kernels_musa.sparse_launch import schedule_for, sparse_attention

    pkw = physical_inputs(kw, meta)
    plan = _native_plan(pkw)
    plan.out.fill_(float("nan"))
    sparse_attention(plan)
    ref_out, ref_lse = ref
    gated = plan.out.float() * torch.sigmoid(kw["gate"].float())[..., None]
    err = check_agreement(f"{name}_physical", gated, ref_out)
    native = time_cuda_graph(lambda: sparse_attention(plan), reps=reps)
    return {
        **_timed_row(f"{name}_physical", pkw, "selected_kv_indices", schedule_for(plan), native, ceil),
        "paged_us": paged_us,
        "vs_paged": native["median_us"] / paged_us,
        "rel_l2_vs_torch": err,
        "lse_err_vs_torch": float((plan.lse - ref_lse).abs().max()),
    }


def bench_case(name: str, ceil: dict[str, float], quick: bool, flex: bool, sweep: bool,
               physical: bool = False) -> dict[str, Any]:  # fmt: skip
    """One case's paged row; with ``physical`` its ``bench_physical`` row rides along under ``"physical_row"``."""
    from mate_kernels_musa.sparse_launch import schedule_for, sparse_attention

    kw = make_inputs(name)
    plan = _native_plan(kw)
    reps = 20 if quick else 100
    sparse_attention(plan)
    meta = _positions(kw)
    ref_out, ref_lse = torch_path(kw, meta)
    err = check_agreement(name, plan.out, ref_out)
    lse_err = float((plan.lse - ref_lse).abs().max())
    native = time_cuda_graph(lambda: sparse_attention(plan), reps=reps)
    native_wf = time_cuda_graph(lambda: sparse_attention(plan), reps=reps, flush_mode="write")
    torch_t = time_cuda_graph(lambda: torch_path(kw, meta), reps=max(5, reps // 10))
    row: dict[str, Any] = {
        **_timed_row(name, kw, "token_indices", schedule_for(plan), native, ceil),
        "native_write_flush_us": native_wf["median_us"],
        "public_best_us": PUBLIC_US.get(name),
        "torch_us": torch_t["median_us"],
        "speedup_vs_torch": torch_t["median_us"] / native["median_us"],
        "rel_l2_vs_torch": err,
        "lse_err_vs_torch": lse_err,
    }
    if flex and name == "prefill_mixed":
        row["flex_note"] = "FlexAttention not run: its setup here copies each request's whole context (68 GB)"
    elif flex:
        try:
            fn = _flex_setup(kw)
            f_out, _ = fn()
            row["flex_rel_l2_vs_torch"] = float(
                (f_out.transpose(1, 2).reshape_as(ref_out).double() - ref_out.double()).norm() / ref_out.double().norm()
            )
            flex_t = time_cuda_graph(fn, reps=max(5, reps // 10))
            row["flex_us"] = flex_t["median_us"]
            row["speedup_vs_flex"] = flex_t["median_us"] / native["median_us"]
        except Exception as exc:  # report, do not fail the whole benchmark
            row["flex_note"] = f"FlexAttention failed: {type(exc).__name__}: {str(exc)[:300]}"
    if name.startswith("prefill"):
        row.update(_no_union_timing(name, plan, ref_out, reps))
    if sweep:
        splits_list = (1, 2, 3, 4, 6, 8) if name.startswith("decode") else (1, 2)
        row["sweep"] = _sweep(plan, ref_out, max(10, reps // 4), splits_list)
    if physical:
        row["physical_row"] = bench_physical(name, kw, meta, (ref_out, ref_lse), row["native_us"], ceil, reps)
    return row


def run(quick: bool = False, flex: bool = True, sweep: bool = True, names: list[str] | None = None,
        physical: bool = True, ceil: dict | None = None) -> list[dict]:  # fmt: skip
    """Run every case (``names`` to pick some); returns one dict per case plus a ceilings row.

    With ``physical``, each case's row is followed by its ``<case>_physical`` row. ``ceil`` is
    the output of ``measure_ceilings()`` (measured here when not given).
    """
    ceil = ceil or measure_ceilings()
    results: list[dict[str, Any]] = [{"name": "ceilings", **ceil, "env": env_info()}]
    for name in names or list(CASES):
        row = bench_case(name, ceil, quick, flex, sweep, physical)
        results.append(row)
        if "physical_row" in row:
            results.append(row.pop("physical_row"))
        torch.cuda.empty_cache()  # each case's cache (up to 17 GB) is freed before the next
    return results


def format_table(results: list[dict]) -> str:
    cols = ["name", "schedule", "native_us", "floor_us", "ratio_to_floor", "ratio_to_floor_at_4.27TBps", "target_ratio",
            "torch_us",
            "speedup_vs_torch", "flex_us", "speedup_vs_flex", "vs_paged", "rel_l2_vs_torch"]  # fmt: skip
    lines = [" | ".join(cols)]
    for r in results:
        if r["name"] == "ceilings":
            lines.insert(
                0, f"ceilings: copy {r['copy_TBps']:.2f} TB/s, gemm8192 {r.get('gemm8192_TFLOPs', 0):.0f} TFLOP/s"
            )
            continue
        cells = []
        for c in cols:
            v = r.get(c, "-")
            cells.append(f"{v:.3g}" if isinstance(v, float) else str(v))
        lines.append(" | ".join(cells))
        if "flex_note" in r:
            lines.append(f"  note: {r['flex_note']}")
        if "sweep" in r:
            lines.append("  sweep: " + ", ".join(f"{s['schedule']}={s['us']:.0f}" for s in r["sweep"]))
            worst = max(s["rel_l2_vs_torch"] for s in r["sweep"])
            lines.append(f"  sweep worst rel L2 vs torch: {worst:.3g}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-flex", action="store_true")
    parser.add_argument("--no-sweep", action="store_true")
    parser.add_argument("--no-physical", action="store_true", help="skip the selected_kv_indices rows")
    parser.add_argument("--cases", nargs="*", default=None, choices=CASES, metavar="CASE",
                        help=f"some of {', '.join(CASES)} (default: all)")  # fmt: skip
    parser.add_argument("--json", default="bench_sparse.json")
    args = parser.parse_args(argv)
    if (status := missing_cuda("bench_sparse")) is not None:
        return status
    results = run(quick=args.quick, flex=not args.no_flex, sweep=not args.no_sweep, names=args.cases,
                  physical=not args.no_physical)  # fmt: skip
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)
    print(format_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
