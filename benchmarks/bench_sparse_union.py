"""Union-gather sparse attention (``sparse_attention_union``) on the issue-4 prefill shapes.

Cases ``prefill_overlap`` and ``prefill_uniform`` from :func:`benchmarks.bench_sparse.make_inputs`
(one request, 4096 rows at positions 126976..131071, 2051 selected tokens per row, bf16,
24/2/256, page size 64, gate and LSE on). For each ``R`` (rows per CTA) and tile:

* ``total_us``: the whole call (union prep + union kernel + merge);
* ``prep_us``: the prep alone (default method); ``attn_us``: union kernel + merge on
  a prepared union;
* ``union_mean`` / ``union_frac``: mean union size per group and its fraction of ``R * T``
  (the K/V bytes moved into the SMs relative to per-row gathers).

Per case, ``prep``: the prep methods timed alone for R = 4 (``resolve_us``: the resolve
kernel; ``torch_us``: resolve + the torch prep; ``fused_us``: the one-kernel prep). Beside
them: today's path (``sparse_launch.sparse_attention``), the no-reuse floor
(``bench_sparse._floor_us`` at the copy rate measured in the same run) and the targets
(0.45x / 0.6x of the floor). Every variant's output and LSE are checked against the
plain-PyTorch path before timing (``benchmarks.checks.check_agreement``). Timing: CUDA-graph
replay, L2 flushed before each replay, medians.

``python -m benchmarks.bench_sparse_union [--quick] [--rows-per-cta 2 4 8] [--json PATH]``
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import torch

from benchmarks import bench_sparse
from benchmarks.checks import check_agreement, missing_cuda
from benchmarks.timing import env_info, measure_ceilings, time_cuda_graph

CASES = ("prefill_overlap", "prefill_uniform")


def _variants(rows_per_cta: tuple[int, ...]) -> list[tuple[int, Any, str | None]]:
    """``(R, tile, prep method)``: each R's default tile and prep, plus the alternatives measured for R = 4."""
    from mate_kernels_musa.sparse_union import UnionTile, union_tile

    out: list[tuple[int, Any, str | None]] = [(r, union_tile(r), None) for r in rows_per_cta]
    if 4 in rows_per_cta:
        out += [(4, union_tile(4), "fused"),
                (4, UnionTile(block_n=32, threads=128, chunk_blocks=8, min_blocks=1), None),
                (4, UnionTile(block_n=32, threads=128, chunk_blocks=8, min_blocks=3), None)]  # fmt: skip
    return out


def _tile_name(r: int, tile: Any, method: str | None = None) -> str:
    name = f"R{r}/bn{tile.block_n}/t{tile.threads}/cb{tile.chunk_blocks}/mb{tile.min_blocks}/s{tile.num_stages}"
    return name + (f"/{method}" if method else "")


def bench_variant(plan, r: int, tile, method: str | None, ref: tuple[torch.Tensor, torch.Tensor],
                  reps: int) -> dict[str, Any]:  # fmt: skip
    """Check, then time one ``(R, tile, prep method)`` (whole call, prep alone, attention alone)."""
    from mate_kernels_musa.sparse_union import prepare_union, union_attention

    def prep():
        return prepare_union(plan, r, method)

    def whole():
        union_attention(plan, r, *prep(), tile)

    plan.out.fill_(float("nan"))
    plan.lse.fill_(float("nan"))
    whole()
    name = _tile_name(r, tile, method)
    err = check_agreement(name, plan.out, ref[0])
    lse_err = check_agreement(name + " lse", plan.lse, ref[1])
    u, nu, counts = prep()
    width = plan.token_indices.shape[1]
    total = time_cuda_graph(whole, reps=reps)
    prep_t = time_cuda_graph(prep, reps=reps)
    attn_t = time_cuda_graph(lambda: union_attention(plan, r, u, nu, counts, tile), reps=reps)
    return {
        "variant": name,
        "rows_per_cta": r,
        "total_us": total["median_us"],
        "prep_us": prep_t["median_us"],
        "attn_us": attn_t["median_us"],
        "union_mean": float(nu.float().mean()),
        "union_frac": float(nu.float().mean()) / (r * width),
        "rel_l2_vs_torch": err,
        "lse_rel_l2_vs_torch": lse_err,
    }


def bench_prep(plan, r: int, reps: int) -> dict[str, Any]:
    """Prep cost by method (and the resolve step of the torch method) for ``R = r``."""
    from mate_kernels_musa.sparse_union import prepare_union, resolve_physical

    steps = {
        "resolve_us": lambda: resolve_physical(plan, r),
        "torch_us": lambda: prepare_union(plan, r, "torch"),
        "fused_us": lambda: prepare_union(plan, r, "fused"),
    }
    out: dict[str, Any] = {}
    for k, fn in steps.items():
        try:
            out[k] = time_cuda_graph(fn, reps=reps)["median_us"]
        except Exception as exc:  # an opt-in method failing must not hide the others
            out[k] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return out


def bench_case(name: str, ceil: dict[str, float], rows_per_cta: tuple[int, ...], reps: int) -> dict[str, Any]:
    from mate_core import plan_sparse_attention
    from mate_kernels_musa.sparse_launch import sparse_attention

    kw = bench_sparse.make_inputs(name)
    plan = plan_sparse_attention(**kw, backend="tilelang")
    ref = bench_sparse.torch_path(kw, bench_sparse._positions(kw))
    sparse_attention(plan)
    today_err = check_agreement(name + " paged", plan.out, ref[0])
    today = time_cuda_graph(lambda: sparse_attention(plan), reps=reps)
    floor = bench_sparse._floor_us(kw, ceil["copy_TBps"])
    row: dict[str, Any] = {
        "name": name,
        "today_us": today["median_us"],
        "today_rel_l2_vs_torch": today_err,
        "floor_us": floor,
        "target_us": bench_sparse.TARGETS[name] * floor,
        "variants": [],
    }
    row["prep"] = bench_prep(plan, 4, reps)
    print(json.dumps(row["prep"]), flush=True)
    for r, tile, method in _variants(rows_per_cta):
        try:
            v = bench_variant(plan, r, tile, method, ref, reps)
            v["ratio_to_floor"] = v["total_us"] / floor
            v["vs_today"] = v["total_us"] / row["today_us"]
        except Exception as exc:  # one failing variant must not hide the others
            v = {"variant": _tile_name(r, tile, method), "error": f"{type(exc).__name__}: {str(exc)[:400]}"}
        row["variants"].append(v)
        print(json.dumps(v), flush=True)
    return row


def format_table(results: list[dict[str, Any]]) -> str:
    lines = []
    for res in results:
        if res["name"] == "ceilings":
            lines.append(f"ceilings: copy {res['copy_TBps']:.2f} TB/s")
            continue
        lines.append(f"{res['name']}: today {res['today_us']:.0f} us, floor {res['floor_us']:.0f} us, "
                     f"target {res['target_us']:.0f} us")  # fmt: skip
        lines.append("  prep R=4: " + ", ".join(f"{k} {v:.0f}" if isinstance(v, float) else f"{k} {v}"
                                               for k, v in res["prep"].items()))  # fmt: skip
        for v in res["variants"]:
            if "error" in v:
                lines.append(f"  {v['variant']}: ERROR {v['error']}")
                continue
            lines.append(f"  {v['variant']}: total {v['total_us']:.0f} us (prep {v['prep_us']:.0f}, attn "
                         f"{v['attn_us']:.0f}), {v['ratio_to_floor']:.2f}x floor, {v['vs_today']:.2f}x today, "
                         f"union {v['union_frac']:.2f} of R*T, rel L2 {v['rel_l2_vs_torch']:.2g}")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows-per-cta", type=int, nargs="*", default=[2, 4, 5, 8])
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=CASES, metavar="CASE",
                        help=f"some of {', '.join(CASES)} (default: all)")  # fmt: skip
    parser.add_argument("--json", default="bench_sparse_union.json")
    args = parser.parse_args(argv)
    if (status := missing_cuda("bench_sparse_union")) is not None:
        return status
    ceil = measure_ceilings()
    results: list[dict[str, Any]] = [{"name": "ceilings", **ceil, "env": env_info()}]
    for name in args.cases:
        results.append(bench_case(name, ceil, tuple(args.rows_per_cta), 10 if args.quick else 50))
        torch.cuda.empty_cache()
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    print(format_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
