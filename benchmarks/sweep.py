"""Scaling sweeps: how cost grows with context length, batch and selection width.

Three one-dimensional sweeps around the canonical sparse decode point (64 requests x 1
row, 131072-token context, 512 blocks + tail = 2051 tokens, 24/2/256 bf16, page size
64, shuffled pages, gate + LSE on), and one over context length for MQA decode (64
requests, page size 64). Each point checks the native output against the plain-PyTorch
path once (relative L2 < 1e-2) before timing native and PyTorch by CUDA-graph replay.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import torch

from benchmarks import bench_mqa, bench_sparse
from benchmarks.checks import check_agreement
from benchmarks.timing import native_fields, time_cuda_graph

__all__ = ["points", "run_point"]

HQ, HKV, D, PAGE = bench_sparse.HQ, bench_sparse.HKV, bench_sparse.D, bench_sparse.PAGE
CANON = {"context": 131072, "batch": 64, "blocks": 512}
FULL = {
    "context": [8192, 16384, 32768, 65536, 131072],
    "batch": [1, 8, 32, 64, 128],
    "width": [131, 515, 1027, 2051],  # selected tokens = 4 * blocks + 3
    "mqa_context": [8192, 16384, 32768, 65536, 131072],
}
QUICK = {"context": [8192, 32768, 131072], "batch": [1, 64], "width": [131, 2051], "mqa_context": [8192, 131072]}


def sparse_decode_inputs(context: int, batch: int, blocks: int, seed: int = 0) -> dict[str, Any]:
    """``qsa_sparse_attention`` keyword arguments: ``batch`` decode rows at the end of ``context``."""
    gen = torch.Generator().manual_seed(seed)
    pos = torch.full((batch,), context - 1)
    nvis = (pos + 1) // 4
    chosen = torch.rand(batch, int(nvis.max()), generator=gen).topk(blocks, dim=1).indices
    ids = (chosen[:, :, None] * 4 + torch.arange(4)).reshape(batch, -1)
    tail = nvis[:, None] * 4 + torch.arange(3)
    tail = torch.where(tail <= pos[:, None], tail, torch.full_like(tail, -1))
    max_pages = context // PAGE
    pages = batch * max_pages
    dev = "cuda"
    return {
        "query": torch.randn(batch, HQ, D, device=dev, dtype=torch.bfloat16),
        "key": torch.randn(pages, PAGE, HKV, D, device=dev, dtype=torch.bfloat16),
        "value": torch.randn(pages, PAGE, HKV, D, device=dev, dtype=torch.bfloat16),
        "token_indices": torch.cat([ids, tail], 1).to(torch.int32).to(dev),
        "cu_seqlens_q": torch.arange(batch + 1, dtype=torch.int32, device=dev),
        "seq_lens_k": torch.full((batch,), context, dtype=torch.int32, device=dev),
        "block_table": torch.randperm(pages, generator=gen).view(batch, max_pages).to(torch.int32).to(dev),
        "gate": torch.randn(batch, HQ, device=dev, dtype=torch.bfloat16),
        "return_lse": True,
        "scale": 1.0 / math.sqrt(D),
    }


def _sparse_point(context: int, batch: int, blocks: int, copy_tbps: float, reps: int) -> dict[str, Any]:
    from mate_kernels_musa.sparse_launch import sparse_attention

    kw = sparse_decode_inputs(context, batch, blocks)
    plan = bench_sparse._native_plan(kw)
    meta = bench_sparse._positions(kw)
    plan.out.fill_(float("nan"))
    sparse_attention(plan)
    ref, _ = bench_sparse.torch_path(kw, meta)
    row = _timed(lambda: sparse_attention(plan), lambda: bench_sparse.torch_path(kw, meta), plan.out, ref, reps)
    row["floor_us"] = bench_sparse._floor_us(kw, copy_tbps)
    row["flops"] = 4 * batch * kw["token_indices"].shape[1] * HQ * D
    row["bytes"] = row["floor_us"] * 1e-6 * copy_tbps * 1e12
    return row


def _mqa_point(context: int, batch: int, copy_tbps: float, reps: int) -> dict[str, Any]:
    from mate_core import plan_mqa_decode
    from mate_kernels_musa import mqa_launch

    keys, h, d = context // 4, bench_mqa.H, bench_mqa.D
    q, k_cache, table, lens = bench_mqa.decode_inputs(batch, keys, PAGE, seed=keys)
    plan = plan_mqa_decode(q, k_cache, table, lens, keys, scale=bench_mqa.SCALE)

    def torch_path() -> torch.Tensor:
        return bench_mqa._decode_torch(q, k_cache, table, lens)

    plan.out.fill_(float("nan"))
    mqa_launch.mqa_decode(plan)
    row = _timed(lambda: mqa_launch.mqa_decode(plan), torch_path, plan.out, torch_path(), reps)
    row["bytes"] = batch * keys * d * 2 + batch * keys * 4
    row["floor_us"] = row["bytes"] / (copy_tbps * 1e12) * 1e6
    row["flops"] = 2 * batch * keys * h * d
    return row


def _timed(native: Callable[[], Any], torch_fn: Callable[[], Any], out: torch.Tensor, ref: torch.Tensor,
           reps: int) -> dict[str, Any]:  # fmt: skip
    err = check_agreement("sweep point", out, ref)
    t_native = time_cuda_graph(native, reps=reps)
    t_torch = time_cuda_graph(torch_fn, reps=max(5, reps // 5))
    return {
        **native_fields(t_native),
        "torch_us": t_torch["median_us"],
        "speedup_vs_torch": t_torch["median_us"] / t_native["median_us"],
        "rel_l2_vs_torch": err,
    }


def points(quick: bool) -> Iterator[tuple[str, str, int]]:
    """(op, swept axis, value) of every sweep point."""
    grid = QUICK if quick else FULL
    for axis in ("context", "batch", "width"):
        for x in grid[axis]:
            yield "sparse_decode", axis, x
    for x in grid["mqa_context"]:
        yield "mqa_decode", "context", x


def run_point(op: str, axis: str, x: int, copy_tbps: float, quick: bool) -> dict[str, Any]:
    """Measure one sweep point; returns a result row (see benchmarks.report for the schema)."""
    reps = 20 if quick else 50
    if op == "mqa_decode":
        row = _mqa_point(x, CANON["batch"], copy_tbps, reps)
        shape = f"q[{CANON['batch']},1,4,128], {x // 4} compressed keys/request, ps {PAGE}"
    else:
        p = dict(CANON)
        if axis == "width":
            p["blocks"] = (x - 3) // 4
        else:
            p[axis] = x
        row = _sparse_point(p["context"], p["batch"], p["blocks"], copy_tbps, reps)
        shape = f"{p['batch']}x1 rows, ctx {p['context']}, {4 * p['blocks'] + 3} tokens, 24/2/256 bf16"
    torch.cuda.empty_cache()
    row.update(op=op, sweep=axis, x=x, name=f"{op}_{axis}_{x}", shape=shape)
    row["ratio_to_floor"] = row["native_us"] / row["floor_us"]
    return row
