"""MQA indexer benchmark (issue 3 shapes): native TileLang vs plain PyTorch vs the floor.

Shapes
------
* decode: q [64, 1, 4, 128] bf16, 32768 compressed keys per request, page size 64 and 16,
  physical pages shuffled, max_model_len 32768. Floor: K bytes read + logits written over
  the measured copy bandwidth. Timed by CUDA-graph replay with the L2 flushed.
* prefill: 4096 rows x 32768 keys, row_ends = (pos + 1) // 4 for pos 126976..131071.
* causal: 32768 rows x 8192 keys, row_ends = (pos + 1) // 4 for pos 0..32767.
  Prefill floor: max(visible-score math at the measured bf16 GEMM rate, FP32 output write
  at copy bandwidth).

Every timing is a burst from a settled GPU (``benchmarks.timing``); the prefill-shaped
rows also carry ``sustained_us``: the native call after one second of itself, when the board's
power limit holds the SM clock down (``sustained_sm_mhz``), against floors from the burst ceilings.

The plain-PyTorch path is einsum + relu + head sum + masked fill on the same inputs.
Ceilings are measured in the same process. ``python -m benchmarks.bench_mqa [--quick]
[--json PATH]`` prints a table and writes JSON; ``--variants`` adds (``--only-variants``
runs just it and the indexer case) every score-kernel schedule in
``mate_kernels_musa.mqa_score_kernel.VARIANTS`` on the prefill and causal shapes, each
checked against the PyTorch path before it is timed (``--match LABEL ...`` keeps only
those variants), plus ``blind_prefill``: the prefill shape with every interval empty, where
the kernel only streams ``-inf`` tiles (its store path alone against the write floor).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

import torch

from benchmarks.checks import check_agreement, missing_cuda
from benchmarks.timing import (
    env_info,
    measure_ceilings,
    native_fields,
    sustained_fields,
    time_cuda_graph,
    time_sustained,
)

H, D = 4, 128
SCALE = 1.0 / math.sqrt(D)


def _torch_scores(q: torch.Tensor, k: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """Plain PyTorch: q [R, H, D], k [R or 1, N, D] -> masked FP32 scores [R, N]."""
    logits = torch.einsum("rhd,rnd->rhn", q, k.expand(q.shape[0], -1, -1) if k.shape[0] == 1 else k)
    scores = logits.float().relu_().sum(1).mul_(SCALE)
    return scores.masked_fill_(~visible, float("-inf"))


def _torch_prefill(q: torch.Tensor, k: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    logits = torch.einsum("rhd,nd->rhn", q, k)
    j = torch.arange(k.shape[0], device=k.device)
    visible = (j[None, :] >= starts[:, None]) & (j[None, :] < ends[:, None])
    return logits.float().relu_().sum(1).mul_(SCALE).masked_fill_(~visible, float("-inf"))


def _decode_torch(q: torch.Tensor, k_cache: torch.Tensor, table: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """Plain PyTorch paged decode: page gather, then ``_torch_scores``."""
    batch, keys = table.shape[0], table.shape[1] * k_cache.shape[1]
    kk = k_cache[table.long()].view(batch, keys, D)
    visible = torch.arange(keys, device=q.device)[None, :] < lens[:, None]
    return _torch_scores(q.view(batch, H, D), kk, visible)


def _row(name: str, shape: str, native: dict, torch_t: dict | None, floor_us: float, extra: dict) -> dict[str, Any]:
    row = {
        "name": name,
        "shape": shape,
        **native_fields(native),
        "floor_us": floor_us,
        "ratio_to_floor": native["median_us"] / floor_us,
        **extra,
    }
    if torch_t is not None:
        row["torch_us"] = torch_t["median_us"]
        row["speedup_vs_torch"] = torch_t["median_us"] / native["median_us"]
    return row


def decode_inputs(batch: int, keys: int, page_size: int, seed: int, device: str = "cuda") -> tuple[torch.Tensor, ...]:
    """``(q [batch,1,4,128], k_cache [pages,page_size,1,128], page_table, context_lens)``: bf16
    data, every request ``keys`` long, physical pages shuffled across requests."""
    max_pages = keys // page_size
    gen = torch.Generator(device=device).manual_seed(seed)
    k_cache = torch.randn(batch * max_pages, page_size, 1, D, device=device, generator=gen, dtype=torch.bfloat16)
    table = torch.randperm(batch * max_pages, device=device, generator=gen).view(batch, max_pages).to(torch.int32)
    lens = torch.full((batch,), keys, dtype=torch.int32, device=device)
    q = torch.randn(batch, 1, H, D, device=device, generator=gen, dtype=torch.bfloat16)
    return q, k_cache, table, lens


def bench_decode(page_size: int, ceil: dict, quick: bool, block_keys: int | None = None) -> dict[str, Any]:
    from mate_core import plan_mqa_decode
    from mate_kernels_musa import mqa_launch

    batch, keys, max_len = 64, 32768, 32768
    q, k_cache, table, lens = decode_inputs(batch, keys, page_size, seed=page_size)
    plan = plan_mqa_decode(q, k_cache, table, lens, max_len, scale=SCALE)
    kw = {} if block_keys is None else {"block_keys": block_keys}
    plan.out.fill_(float("nan"))
    mqa_launch.mqa_decode(plan, **kw)
    err = check_agreement(f"mqa decode ps {page_size}", plan.out, _decode_torch(q, k_cache, table, lens))
    native = time_cuda_graph(lambda: mqa_launch.mqa_decode(plan, **kw), reps=30 if quick else 100)

    def torch_path():
        return _decode_torch(q, k_cache, table, lens)

    torch_t = None if block_keys is not None else time_cuda_graph(torch_path, reps=10 if quick else 30)
    nbytes = batch * keys * D * 2 + batch * max_len * 4
    floor_us = nbytes / (ceil["copy_TBps"] * 1e12) * 1e6
    name = f"decode_ps{page_size}" + ("" if block_keys is None else f"_bk{block_keys}")
    return _row(name, f"q[{batch},1,4,128] keys {keys}/req ps {page_size}", native, torch_t, floor_us,
                {"GBps": nbytes / native["median_us"] / 1e3, "rel_l2_vs_torch": err})  # fmt: skip


def bench_prefill(name: str, rows: int, keys: int, pos0: int, ceil: dict, quick: bool, indexer: bool = False,
                  with_torch: bool = True) -> dict[str, Any]:  # fmt: skip
    """Packed prefill scoring; with ``indexer``, the same rows through ``qsa_indexer_mqa_score``
    (padded ``q_idx [1, rows, 4, 128]``, ``block_keys [1, keys, 128]``, ``query_positions``).
    ``with_torch`` also times the plain-PyTorch path."""
    from mate_core import plan_indexer_score, plan_mqa_prefill
    from mate_kernels_musa import mqa_launch

    q, k, starts, ends = prefill_inputs(rows, keys, pos0)
    pos = torch.arange(pos0, pos0 + rows, device="cuda")
    if indexer:
        positions = pos.to(torch.int32)[None]
        plan = plan_indexer_score(q[None], k[None], query_positions=positions, scale=SCALE)
        fn = lambda: mqa_launch.indexer_score(plan)  # noqa: E731
    else:
        plan = plan_mqa_prefill(q, k, starts, ends, scale=SCALE)
        fn = lambda: mqa_launch.mqa_prefill(plan)  # noqa: E731

    plan.out.fill_(float("nan"))
    fn()
    err = check_agreement(f"mqa prefill {name}", plan.out, _torch_prefill(q, k, starts, ends))
    native = time_cuda_graph(fn, reps=10 if quick else 30)
    sustained = time_sustained(fn, reps=10 if quick else 30, seconds=0.3 if quick else 1.0)
    torch_t = None
    if with_torch:
        torch_t = time_cuda_graph(lambda: _torch_prefill(q, k, starts, ends), reps=3 if quick else 10)
    visible = int(ends.long().sum())
    math_us = 2 * visible * H * D / (ceil["gemm8192_TFLOPs"] * 1e12) * 1e6
    write_us = rows * keys * 4 / (ceil["copy_TBps"] * 1e12) * 1e6
    return _row(name, f"{rows} rows x {keys} keys, pos {pos0}..{pos0 + rows - 1}", native, torch_t,
                max(math_us, write_us), {"math_floor_us": math_us, "write_floor_us": write_us,
                "TFLOPs_visible": 2 * visible * H * D / native["median_us"] / 1e6,
                "rel_l2_vs_torch": err, **sustained_fields(sustained)})  # fmt: skip


def prefill_inputs(rows: int, keys: int, pos0: int) -> tuple[torch.Tensor, ...]:
    """``(q [rows,4,128], k [keys,128], starts, ends)``: bf16 data, causal intervals
    ``[0, (pos + 1) // 4)`` for ``pos = pos0 + row``."""
    gen = torch.Generator(device="cuda").manual_seed(rows)
    q = torch.randn(rows, H, D, device="cuda", generator=gen, dtype=torch.bfloat16)
    k = torch.randn(keys, D, device="cuda", generator=gen, dtype=torch.bfloat16)
    pos = torch.arange(pos0, pos0 + rows, device="cuda")
    ends = ((pos + 1) // 4).clamp(max=keys).to(torch.int32)
    starts = torch.zeros(rows, dtype=torch.int32, device="cuda")
    return q, k, starts, ends


def bench_score_variants(name: str, rows: int, keys: int, pos0: int, ceil: dict, quick: bool,
                         match: tuple[str, ...] = ()) -> list[dict]:  # fmt: skip
    """Every score-kernel variant (``mqa_score_kernel.VARIANTS``) on one prefill shape (one
    reference, each variant checked against it before it is timed); ``match`` keeps only the
    variants whose label is one of these."""
    from mate_kernels_musa import mqa_launch, mqa_score_kernel

    q, k, starts, ends = prefill_inputs(rows, keys, pos0)
    ref = _torch_prefill(q, k, starts, ends)
    out = torch.empty(rows, keys, device="cuda", dtype=torch.float32)
    visible = int(ends.long().sum())
    math_us = 2 * visible * H * D / (ceil["gemm8192_TFLOPs"] * 1e12) * 1e6
    floor_us = max(math_us, rows * keys * 4 / (ceil["copy_TBps"] * 1e12) * 1e6)
    results = []
    for tiles, sched in mqa_score_kernel.VARIANTS:
        if match and mqa_score_kernel.variant_label(tiles, sched) not in match:
            continue

        def fn(tiles=tiles, sched=sched):
            mqa_launch.launch_score(q[None], k[None], starts[None], ends[None], out[None], SCALE, tiles, sched)

        case = f"{name}[{mqa_score_kernel.variant_label(tiles, sched)}]"
        try:
            out.fill_(float("nan"))
            fn()
            err = check_agreement(case, out, ref)
            native = time_cuda_graph(fn, reps=10 if quick else 30)
        except Exception as exc:  # one broken variant must not hide the others' timings
            results.append({"name": case, "error": f"{type(exc).__name__}: {exc}"})
            continue
        results.append(_row(case, f"{rows} rows x {keys} keys", native, None, floor_us,
                            {"tiles": list(tiles), "schedule": list(sched), "rel_l2_vs_torch": err}))  # fmt: skip
    return results


def bench_blind(ceil: dict, quick: bool) -> dict[str, Any]:
    """The prefill shape with every interval empty: the default kernel only streams -inf tiles
    (bulk stores, no loads, no MMAs), which shows what its store path alone costs against the
    write floor."""
    from mate_kernels_musa import mqa_launch

    rows, keys = 4096, 32768
    q, k, starts, _ = prefill_inputs(rows, keys, 0)
    out = torch.empty(rows, keys, device="cuda", dtype=torch.float32)

    def fn():
        mqa_launch.launch_score(q[None], k[None], starts[None], starts[None], out[None], SCALE)

    out.fill_(float("nan"))
    fn()
    if not bool(torch.isneginf(out).all()):
        raise RuntimeError("blind prefill: not every score is -inf")
    native = time_cuda_graph(fn, reps=10 if quick else 30)
    write_us = rows * keys * 4 / (ceil["copy_TBps"] * 1e12) * 1e6
    return _row("blind_prefill", f"{rows} rows x {keys} keys, all intervals empty", native, None, write_us,
                {"write_floor_us": write_us, "GBps": rows * keys * 4 / native["median_us"] / 1e3})  # fmt: skip


def run(
    quick: bool = False,
    variants: bool = False,
    ceil: dict | None = None,
    only_variants: bool = False,
    match: tuple[str, ...] = (),
) -> list[dict]:
    """Run every shape; returns one dict per measurement (the first holds the ceilings).

    ``ceil`` is the output of ``measure_ceilings()`` (measured here when not given);
    ``variants`` adds the score-kernel schedule sweep, ``only_variants`` runs just that sweep
    (and the indexer case, which has no variant hook); ``match`` limits the sweep to these
    variant labels.
    """
    ceil = ceil or measure_ceilings()
    results: list[dict] = [{"name": "ceilings", **ceil, **env_info()}]
    if not only_variants:
        for ps in (64, 16):
            results.append(bench_decode(ps, ceil, quick))
        results.append(bench_prefill("prefill", 4096, 32768, 126976, ceil, quick))
        results.append(bench_prefill("causal", 32768, 8192, 0, ceil, quick))
    results.append(bench_prefill("indexer_score", 4096, 32768, 126976, ceil, quick, indexer=True,
                                 with_torch=not only_variants))  # fmt: skip
    if variants or only_variants:
        results.append(bench_blind(ceil, quick))
        results += bench_score_variants("prefill", 4096, 32768, 126976, ceil, quick, match)
        results += bench_score_variants("causal", 32768, 8192, 0, ceil, quick, match)
    return results


def format_table(results: list[dict]) -> str:
    c = results[0]
    lines = [
        f"ceilings: copy {c['copy_TBps']:.2f} TB/s (kernel {c['kernel_copy_TBps']:.2f}, memcpy {c['memcpy_TBps']:.2f}), bf16 gemm {c['gemm4096_TFLOPs']:.0f} (4096) / "
        f"{c['gemm8192_TFLOPs']:.0f} (8192) TFLOP/s; {c.get('gpu')}",
        f"{'case':<28} {'native us':>10} {'floor us':>9} {'x floor':>8} {'torch us':>10} {'speedup':>8}",
    ]
    for r in results[1:]:
        if "error" in r:
            lines.append(f"{r['name']:<36} FAILED {r['error'][:200]}")
            continue
        torch_us = f"{r['torch_us']:.1f}" if "torch_us" in r else "-"
        speed = f"{r['speedup_vs_torch']:.1f}x" if "speedup_vs_torch" in r else "-"
        lines.append(
            f"{r['name']:<36} {r['native_us']:>10.1f} {r['floor_us']:>9.1f} {r['ratio_to_floor']:>8.2f} "
            f"{torch_us:>10} {speed:>8}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--variants", action="store_true", help="also time alternative score-kernel schedules")
    parser.add_argument("--only-variants", action="store_true", help="only the schedule sweep (and the indexer case)")
    parser.add_argument("--match", nargs="+", default=(), metavar="LABEL",
                        help="time only these variant labels (e.g. keys-overlap-tpc64)")  # fmt: skip
    parser.add_argument("--json", default="bench_mqa.json")
    args = parser.parse_args(argv)
    if (status := missing_cuda("bench_mqa")) is not None:
        return status
    results = run(quick=args.quick, variants=args.variants, only_variants=args.only_variants,
                  match=tuple(args.match))  # fmt: skip
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)
    print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
