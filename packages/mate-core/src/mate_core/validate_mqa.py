"""Validation of the MQA indexer entry points: ``qsa_indexer_mqa_score``, ``qsa_mqa_prefill``
(alias ``qsa_mqa``) and ``qsa_mqa_decode``.

Each ``plan_*`` reads tensor metadata only (no device reads, no syncs), checks the generic
rules, then the ``backend='tilelang'``-only rules, then the architecture gate, and returns a
plan whose FP32 output buffer is already allocated.
"""

from __future__ import annotations

import torch

from ._mqa_common import (
    drop_unit_axis,
    empty_scores,
    heads_and_dim,
    mqa_scale,
    native_gate,
    require_data,
    require_feature_dim,
    require_like,
    require_native_geometry,
    require_native_keys,
)
from .checks import (
    check_backend,
    check_vector_layout,
    require_int,
    require_metadata,
    require_native_grid,
    require_rank,
    require_size,
)
from .errors import MateValueError
from .plans import MQADecodePlan, MQAPrefillPlan
from .validate_indexer import plan_indexer_score

__all__ = ["NATIVE_DECODE_PAGE_SIZES", "plan_indexer_score", "plan_mqa_decode", "plan_mqa_prefill"]

NATIVE_DECODE_PAGE_SIZES = (8, 16, 32, 64)


def _shared_keys(name: str, k: torch.Tensor, dim: int, ref_name: str) -> torch.Tensor:
    """``[keys, D]`` view of prefill keys given as ``[keys, D]`` or ``[keys, 1, D]``."""
    layout = "[keys, D] or [keys, 1, D]"
    require_rank(name, k, (2, 3), layout)
    keys = drop_unit_axis(name, k, 1, layout) if k.dim() == 3 else k
    require_feature_dim(name, keys, dim, ref_name)
    return keys


def plan_mqa_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    row_starts: torch.Tensor,
    row_ends: torch.Tensor,
    score_scale: float | None = None,
    *,
    scale: float | None = None,
    backend: str = "tilelang",
) -> MQAPrefillPlan:
    """Validate one ``qsa_mqa_prefill`` / ``qsa_mqa`` call and allocate its output.

    Parameters
    ----------
    q : Tensor
        ``[rows, H, D]`` packed query rows (bf16/fp16; the reference also accepts float32).
    k : Tensor
        Shared keys ``[keys, D]`` or ``[keys, 1, D]``, dtype and device of ``q``.
    row_starts, row_ends : Tensor
        ``[rows]`` integer metadata: key ``j`` is visible to row ``r`` iff
        ``row_starts[r] <= j < row_ends[r]``.
    score_scale, scale, backend
        ``score_scale`` divides, ``scale`` multiplies (exclusive); default ``1 / sqrt(D)``.

    Returns
    -------
    MQAPrefillPlan
        With ``out`` the FP32 ``[rows, keys]`` buffer.

    Raises
    ------
    MateValueError, MateTypeError
        As the matching ``mate`` entry point documents (its ValueError and TypeError cases);
        :class:`UnsupportedTargetError` and :class:`LayoutError` for the native backend.
    """
    backend = check_backend(backend)
    q = require_data("q", q, backend)
    require_rank("q", q, (3,), "[rows, H, D]")
    heads, dim = heads_and_dim("q", q)
    k = require_data("k", k, backend)
    require_like("k", k, "q", q)
    keys = _shared_keys("k", k, dim, "q")
    rows = q.shape[0]
    starts = require_metadata("row_starts", row_starts, backend, "q", q, shape=(rows,), what="[rows]")
    ends = require_metadata("row_ends", row_ends, backend, "q", q, shape=(rows,), what="[rows]")
    resolved = mqa_scale(scale, score_scale, dim)
    if backend == "tilelang":
        require_native_geometry("q", heads, dim)
        require_native_keys("k", keys.shape[0])
        check_vector_layout("q", q)
        check_vector_layout("k", k)
    native_gate(backend, q.device)
    out = empty_scores((rows, keys.shape[0]), q.device)
    return MQAPrefillPlan(q=q, k=keys, row_starts=starts, row_ends=ends, scale=resolved, backend=backend, out=out)


def _decode_cache(k_cache: torch.Tensor, dim: int) -> torch.Tensor:
    """``[pages, page_size, D]`` view of ``[pages, page_size, 1, D]`` / ``[pages, page_size, D]``."""
    layout = "[pages, page_size, 1, D] or [pages, page_size, D]"
    require_rank("k_cache", k_cache, (3, 4), layout)
    cache = drop_unit_axis("k_cache", k_cache, 2, layout) if k_cache.dim() == 4 else k_cache
    if cache.shape[1] < 1:
        raise MateValueError(f"k_cache: got shape {list(k_cache.shape)}; expected {layout} with page_size >= 1")
    require_feature_dim("k_cache", cache, dim, "q")
    return cache


def _check_native_page_size(page_size: int) -> None:
    if page_size not in NATIVE_DECODE_PAGE_SIZES:
        raise MateValueError(
            f"k_cache: got page_size {page_size} (k_cache.shape[1]); backend='tilelang' supports page sizes "
            f"{list(NATIVE_DECODE_PAGE_SIZES)} only; pass backend='reference' for other page sizes"
        )


def plan_mqa_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    page_table: torch.Tensor,
    context_lens: torch.Tensor,
    max_model_len: int,
    score_scale: float | None = None,
    *,
    scale: float | None = None,
    backend: str = "tilelang",
) -> MQADecodePlan:
    """Validate one ``qsa_mqa_decode`` call and allocate its output.

    Parameters
    ----------
    q : Tensor
        ``[B, H, D]`` or ``[B, 1, H, D]``; may be broadcast (stride 0); bf16/fp16 (the
        reference also accepts float32). Not subject to the vector-load rule.
    k_cache : Tensor
        ``[pages, page_size, 1, D]`` or ``[pages, page_size, D]``, dtype and device of ``q``.
    page_table : Tensor
        ``[B, max_pages]`` integer page ids; ids < 0 or >= pages are masked.
    context_lens : Tensor
        ``[B]`` integer visible key counts.
    max_model_len : int
        Output width (>= 1).
    score_scale, scale, backend
        ``score_scale`` divides, ``scale`` multiplies (exclusive); default ``1 / sqrt(D)``.

    Returns
    -------
    MQADecodePlan
        With ``q`` as ``[B, H, D]``, ``k_cache`` as ``[pages, page_size, D]`` and ``out`` the
        FP32 ``[B, max_model_len]`` buffer.

    Raises
    ------
    MateValueError, MateTypeError
        As the matching ``mate`` entry point documents (its ValueError and TypeError cases);
        :class:`UnsupportedTargetError` and :class:`LayoutError` for the native backend.
    """
    backend = check_backend(backend)
    q = require_data("q", q, backend)
    require_rank("q", q, (3, 4), "[B, H, D] or [B, 1, H, D]")
    q3 = drop_unit_axis("q", q, 1, "[B, 1, H, D]") if q.dim() == 4 else q
    heads, dim = heads_and_dim("q", q3)
    k_cache = require_data("k_cache", k_cache, backend)
    require_like("k_cache", k_cache, "q", q)
    cache = _decode_cache(k_cache, dim)
    batch = q3.shape[0]
    table = require_metadata("page_table", page_table, backend, "q", q)
    require_rank("page_table", table, (2,), "[B, max_pages]")
    require_size("page_table", table, 0, batch, "B, the batch of q")
    lens = require_metadata("context_lens", context_lens, backend, "q", q, shape=(batch,), what="[B]")
    max_model_len = require_int("max_model_len", max_model_len, minimum=1)
    resolved = mqa_scale(scale, score_scale, dim)
    if backend == "tilelang":
        require_native_geometry("q", heads, dim)
        _check_native_page_size(cache.shape[1])
        require_native_grid("q", batch, "requests (B)", "split the batch across calls or pass backend='reference'")
    native_gate(backend, q.device)
    out = empty_scores((batch, max_model_len), q.device)
    return MQADecodePlan(
        q=q3,
        k_cache=cache,
        page_table=table,
        context_lens=lens,
        max_model_len=max_model_len,
        page_size=cache.shape[1],
        scale=resolved,
        backend=backend,
        out=out,
    )
