"""Launchers of the native MQA indexer kernels.

Each launcher takes a plan already validated by ``mate_core`` (no validation here), picks
the kernel specialization (dtype, page size, vector path), binds the plan's tensors and
their runtime strides, and launches on the current stream. No host sync and, apart from
the few ``[B, Q]`` interval tensors of ``indexer_score`` (computed on the device with
capturable torch ops), no allocation: warmed-up calls can be captured in a CUDA graph.
"""

from __future__ import annotations

from typing import Any

import torch

from mate_core.plans import IndexerScorePlan, MQADecodePlan, MQAPrefillPlan
from mate_core.validate_mqa import NATIVE_DECODE_PAGE_SIZES

from . import mqa_decode_kernel, mqa_score_kernel
from ._build import build, profile_name

__all__ = ["indexer_score", "mqa_prefill", "mqa_decode", "score_consts", "decode_consts", "specializations"]

_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16"}
VEC_ELEMS = 8  # 16 bytes of BF16/FP16


def _kernel(factory: Any, device: torch.device, *consts: Any) -> Any:
    return build(factory, profile_name(device), *consts)


def score_consts(
    dtype: str,
    tma_out: bool,
    tiles: tuple[int, int, int, int] | None = None,
    schedule: mqa_score_kernel.Schedule | None = None,
    rows: int = 0,
    keys: int = 0,
) -> tuple[Any, ...]:
    """Compile-time arguments of ``score_kernel``: the default tiles and schedule of the store path
    and of ``rows`` query rows over ``keys`` keys unless given (keys-on-M schedules only for bulk
    stores)."""
    if tiles is None:
        tiles = mqa_score_kernel.default_tiles(tma_out)
    if schedule is None:
        schedule = mqa_score_kernel.default_schedule(tma_out, rows, keys)
    if not tma_out and schedule.keys_on_m:
        schedule = mqa_score_kernel.Schedule()  # keys-on-M stages only for bulk stores
    return (dtype, *tiles, tma_out, *schedule)


def decode_consts(
    dtype: str, page_size: int, k_vec: bool, block_keys: int = mqa_decode_kernel.BLOCK_KEYS
) -> tuple[Any, ...]:
    """Compile-time arguments of ``decode_kernel``."""
    return (dtype, page_size, k_vec, block_keys)


def specializations(dtypes: tuple[str, ...] = ("bfloat16", "float16")) -> list[tuple[Any, tuple[Any, ...]]]:
    """``(factory, consts)`` of the default MQA kernels: the score kernel for both store paths (and the
    bulk-store schedule of whole causal prompts) and the decode kernel for every native page size
    on the 16-byte-load path."""
    score = [(mqa_score_kernel.score_kernel, score_consts(d, tma)) for d in dtypes for tma in (True, False)]
    score += [(mqa_score_kernel.score_kernel, score_consts(d, True, schedule=mqa_score_kernel.CAUSAL_SCHEDULE))
              for d in dtypes]  # fmt: skip
    decode = [
        (mqa_decode_kernel.decode_kernel, decode_consts(d, ps, True)) for d in dtypes for ps in NATIVE_DECODE_PAGE_SIZES
    ]
    return score + decode


def strides8(t: torch.Tensor) -> list[int]:
    """Outer strides of ``t`` in units of 8 elements; 0 for size-1 axes (never indexed).

    The caller guarantees (vector-load rule) that every other outer stride is a multiple of 8.
    """
    return [t.stride(a) // VEC_ELEMS if t.shape[a] > 1 else 0 for a in range(t.dim() - 1)]


def vector_ok(t: torch.Tensor) -> bool:
    """Whether ``t`` (2-byte dtype) satisfies the 16-byte vector-load layout rule."""
    if t.stride(-1) != 1 or t.data_ptr() % 16:
        return False
    return all(t.shape[a] <= 1 or t.stride(a) % VEC_ELEMS == 0 for a in range(t.dim() - 1))


def launch_score(
    q: torch.Tensor,
    k: torch.Tensor,
    starts: torch.Tensor,
    ends: torch.Tensor,
    out: torch.Tensor,
    scale: float,
    tiles: tuple[int, int, int, int] | None = None,
    schedule: mqa_score_kernel.Schedule | None = None,
) -> None:
    """Run the score kernel on ``q [nb, nq, 4, 128]``, ``k [nb, nk, 128]``, ``out [nb, nq, nk]``.

    ``starts``/``ends`` are ``[nb, nq]`` int32; ``tiles`` is ``(block_rows, block_keys, threads,
    tiles_per_cta)`` (default: :func:`~.mqa_score_kernel.default_tiles`) and ``schedule`` a
    :class:`~.mqa_score_kernel.Schedule` (default: :func:`~.mqa_score_kernel.default_schedule` of
    the store path and of ``nq`` rows over ``nk`` keys); the grid is derived from the shapes inside
    the kernel.
    """
    if out.numel() == 0:
        return
    # Bulk tensor (TMA) stores need 16-byte row pitches: nk % 4 == 0 (out is contiguous).
    tma_out = out.shape[2] % 4 == 0 and out.data_ptr() % 16 == 0
    consts = score_consts(_DTYPES[q.dtype], tma_out, tiles, schedule, q.shape[1], k.shape[1])
    kernel = _kernel(mqa_score_kernel.score_kernel, q.device, *consts)
    kernel(q, k, starts, ends, out, *strides8(q), *strides8(k), float(scale))


def mqa_prefill(plan: MQAPrefillPlan) -> None:
    """Native ``qsa_mqa_prefill``: writes ``plan.out [rows, keys]`` (FP32)."""
    launch_score(
        plan.q.unsqueeze(0),
        plan.k.unsqueeze(0),
        plan.row_starts.unsqueeze(0),
        plan.row_ends.unsqueeze(0),
        plan.out.unsqueeze(0),
        plan.scale,
    )


def indexer_intervals(plan: IndexerScorePlan) -> tuple[torch.Tensor, torch.Tensor]:
    """Visible block interval ``[0, end)`` of every padded query row, on the device.

    Returns ``(starts, ends)``, each ``[B, Q]`` int32 (``starts`` is a broadcast zero).
    Block ``j`` is visible iff ``(j + 1) * block_size - 1 <= pos``, i.e.
    ``j < floor((pos + 1) / block_size)``; rows at local index ``>= seq_lens_q[b]`` see nothing.
    """
    batch, q_len, width = plan.result.shape
    device = plan.result.device
    local = torch.arange(q_len, device=device, dtype=torch.int64)
    pos = local if plan.query_positions is None else plan.query_positions.view(batch, q_len).long()
    ends = torch.div(pos + 1, plan.block_size, rounding_mode="floor").clamp_(0, width).expand(batch, q_len)
    if plan.seq_lens_q is not None:
        ends = torch.where(local[None, :] < plan.seq_lens_q.long()[:, None], ends, 0)
    starts = torch.zeros((1, 1), dtype=torch.int32, device=device).expand(batch, q_len)
    return starts, ends.to(torch.int32)


def indexer_score(plan: IndexerScorePlan) -> None:
    """Native padded ``qsa_indexer_mqa_score``: writes ``plan.result [B, Q, N_B]`` (FP32)."""
    batch, q_len, _ = plan.result.shape
    if plan.result.numel() == 0:
        return
    q = plan.q if plan.q.dim() == 4 else plan.q.view(batch, q_len, *plan.q.shape[-2:])
    starts, ends = indexer_intervals(plan)
    launch_score(q, plan.block_keys, starts, ends, plan.result, plan.scale)


def mqa_decode(plan: MQADecodePlan, block_keys: int = mqa_decode_kernel.BLOCK_KEYS) -> None:
    """Native paged ``qsa_mqa_decode``: writes ``plan.out [B, max_model_len]`` (FP32)."""
    out, cache, table = plan.out, plan.k_cache, plan.page_table
    if out.numel() == 0:
        return
    if cache.shape[0] == 0 or table.shape[1] == 0:
        # No page can be valid: every score is -inf (and there is nothing to bind).
        out.fill_(float("-inf"))
        return
    k_vec = vector_ok(cache)
    consts = decode_consts(_DTYPES[cache.dtype], plan.page_size, k_vec, block_keys)
    kernel = _kernel(mqa_decode_kernel.decode_kernel, out.device, *consts)
    k_s8 = strides8(cache) if k_vec else [0, 0]
    kernel(plan.q, cache, table, plan.context_lens, out, *k_s8, float(plan.scale))
