"""Validation of ``qsa_indexer_mqa_score`` (metadata only: no device reads, no syncs)."""

from __future__ import annotations

from typing import NamedTuple

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
    describe,
    positions_view,
    require_int,
    require_metadata,
    require_native_grid,
    require_none,
    require_rank,
)
from .errors import MateValueError
from .plans import IndexerScorePlan

__all__ = ["plan_indexer_score"]

NATIVE_BLOCK_SIZE = 4


class _Queries(NamedTuple):
    q: torch.Tensor  # [rows, H, D], or [B, Q, H, D] when the padded axes do not collapse
    rows: int
    num_requests: int
    q_len: int  # padded Q, or 0 for varlen
    cu_seqlens_q: torch.Tensor | None
    token_to_req: torch.Tensor | None
    lead: tuple[int, ...]  # leading axes of the result: (B, Q) or (total_q,)


class _Keys(NamedTuple):
    block_keys: torch.Tensor  # [B, N_B, D] logical or [pages, page_size, D] paged
    block_table: torch.Tensor | None
    page_size: int
    width: int


def _padded_queries(q_idx, cu_seqlens_q, token_to_req, num_requests) -> _Queries:
    batch, q_len = q_idx.shape[0], q_idx.shape[1]
    for name, value in (("cu_seqlens_q", cu_seqlens_q), ("token_to_req", token_to_req)):
        require_none(name, value, f"with padded q_idx {list(q_idx.shape)}; it describes varlen q_idx [total_q, H, D]")
    num_requests = require_int("num_requests", num_requests, minimum=0, optional=True)
    if num_requests is not None and num_requests != batch:
        raise MateValueError(
            f"num_requests: got {num_requests} with padded q_idx {list(q_idx.shape)}; expected None or {batch} (B)"
        )
    try:
        q = q_idx.view(batch * q_len, *q_idx.shape[2:])
    except RuntimeError:  # a sliced view: backends read it through its own strides
        q = q_idx
    return _Queries(q, batch * q_len, batch, q_len, None, None, (batch, q_len))


def _varlen_queries(q_idx, cu_seqlens_q, token_to_req, num_requests) -> _Queries:
    # Checked with the reference's dtype rules whatever the backend: backend='tilelang' rejects
    # varlen q_idx itself (_check_native), and that error, not an int32 demand, says what to pass.
    rules = "reference"
    total_q = q_idx.shape[0]
    if cu_seqlens_q is not None and token_to_req is not None:
        raise MateValueError(
            "cu_seqlens_q and token_to_req: got both; varlen q_idx [total_q, H, D] takes exactly one of them"
        )
    if cu_seqlens_q is None and token_to_req is None:
        raise MateValueError(
            f"cu_seqlens_q / token_to_req: got neither with varlen q_idx {list(q_idx.shape)}; expected exactly "
            "one (cu_seqlens_q [R+1], or token_to_req [total_q] with num_requests)"
        )
    num_requests = require_int("num_requests", num_requests, minimum=0, optional=True)
    if cu_seqlens_q is not None:
        cu = require_metadata("cu_seqlens_q", cu_seqlens_q, rules, "q_idx", q_idx)
        if cu.dim() != 1 or cu.shape[0] < 1:
            raise MateValueError(
                f"cu_seqlens_q: got shape {list(cu.shape)}; expected [R + 1] (rank 1, at least 1 entry)"
            )
        requests = cu.shape[0] - 1
        if num_requests is not None and num_requests != requests:
            raise MateValueError(
                f"num_requests: got {num_requests}; expected None or {requests} (cu_seqlens_q has {requests + 1} entries)"
            )
        return _Queries(q_idx, total_q, requests, 0, cu, None, (total_q,))
    t2r = require_metadata("token_to_req", token_to_req, rules, "q_idx", q_idx, shape=(total_q,), what="[total_q]")
    if num_requests is None:
        raise MateValueError("num_requests: got None with token_to_req; expected the number of requests (an int >= 0)")
    return _Queries(q_idx, total_q, num_requests, 0, None, t2r, (total_q,))


def _queries(q_idx, cu_seqlens_q, token_to_req, num_requests) -> _Queries:
    if q_idx.dim() == 4:
        return _padded_queries(q_idx, cu_seqlens_q, token_to_req, num_requests)
    return _varlen_queries(q_idx, cu_seqlens_q, token_to_req, num_requests)


def _logical_keys(block_keys, page_size, queries: _Queries, dim: int) -> _Keys:
    require_none("page_size", page_size, "without block_table; page_size describes a paged block_keys cache")
    require_rank(
        "block_keys",
        block_keys,
        (3,),
        "logical [B, N_B, D] (a paged cache [pages, page_size, 1, D] needs block_table)",
    )
    if block_keys.shape[0] != queries.num_requests:
        raise MateValueError(
            f"block_keys: got shape {list(block_keys.shape)}; expected [B, N_B, D] with B == "
            f"{queries.num_requests} (the number of requests)"
        )
    require_feature_dim("block_keys", block_keys, dim, "q_idx")
    return _Keys(block_keys, None, 0, block_keys.shape[1])


def _paged_keys(block_keys, block_table, page_size, queries: _Queries, q_idx, dim: int, backend: str) -> _Keys:
    table = require_metadata("block_table", block_table, backend, "q_idx", q_idx)
    if table.dim() != 2 or table.shape[0] != queries.num_requests:
        raise MateValueError(
            f"block_table: got shape {list(table.shape)}; expected [R, max_pages] with R == {queries.num_requests}"
        )
    layout = "paged [pages, page_size, 1, D] or [pages, page_size, D]"
    require_rank("block_keys", block_keys, (3, 4), layout)
    cache = drop_unit_axis("block_keys", block_keys, 2, layout) if block_keys.dim() == 4 else block_keys
    if cache.shape[1] < 1:
        raise MateValueError(f"block_keys: got shape {list(block_keys.shape)}; expected {layout} with page_size >= 1")
    require_feature_dim("block_keys", cache, dim, "q_idx")
    page_size = require_int("page_size", page_size, minimum=1, optional=True)
    if page_size is not None and page_size != cache.shape[1]:
        raise MateValueError(
            f"page_size: got {page_size}; expected None or {cache.shape[1]} (block_keys.shape[1] {list(block_keys.shape)})"
        )
    return _Keys(cache, table, cache.shape[1], table.shape[1] * cache.shape[1])


def _positions(query_positions, queries: _Queries, q_idx, backend) -> torch.Tensor | None:
    """``query_positions`` [B, Q] or [B*Q] (padded), [total_q] (varlen), as a [rows] view where
    one exists without a copy (:func:`.checks.positions_view`)."""
    if query_positions is None:
        return None
    pos = require_metadata("query_positions", query_positions, backend, "q_idx", q_idx)
    accepted = [[queries.rows]] + ([list(queries.lead)] if len(queries.lead) == 2 else [])
    if list(pos.shape) not in accepted:
        raise MateValueError(f"query_positions: got shape {list(pos.shape)}; expected one of {accepted}")
    return positions_view(pos)


def _check_native(keys: _Keys, q_idx, block_keys, block_size: int, heads: int, dim: int) -> None:
    """Rules of backend='tilelang' only (after every generic rule, before the arch gate)."""
    if q_idx.dim() == 3:
        raise MateValueError(
            f"q_idx: got varlen {list(q_idx.shape)}; backend='tilelang' scores padded q_idx [B, Q, 4, 128] only. "
            "Use qsa_mqa_prefill for native packed rows, or pass backend='reference'"
        )
    if keys.block_table is not None:
        raise MateValueError(
            f"block_table: got {describe(keys.block_table)}; backend='tilelang' scores logical block_keys "
            "[B, N_B, 128] only. Use qsa_mqa_decode for native paged scoring, or pass backend='reference'"
        )
    require_native_geometry("q_idx", heads, dim)
    if block_size != NATIVE_BLOCK_SIZE:
        raise MateValueError(
            f"block_size: got {block_size}; backend='tilelang' supports block_size == {NATIVE_BLOCK_SIZE} only; "
            "pass backend='reference' for other block sizes"
        )
    require_native_grid(
        "q_idx", q_idx.shape[0], "requests (B)", "split the batch across calls or pass backend='reference'"
    )
    require_native_keys("block_keys", keys.width)
    check_vector_layout("q_idx", q_idx)
    check_vector_layout("block_keys", block_keys)


def plan_indexer_score(
    q_idx: torch.Tensor,
    block_keys: torch.Tensor,
    *,
    block_table: torch.Tensor | None = None,
    page_size: int | None = None,
    cu_seqlens_q: torch.Tensor | None = None,
    token_to_req: torch.Tensor | None = None,
    num_requests: int | None = None,
    query_positions: torch.Tensor | None = None,
    seq_lens_q: torch.Tensor | None = None,
    block_size: int = 4,
    scale: float | None = None,
    score_scale: float | None = None,
    backend: str = "tilelang",
) -> IndexerScorePlan:
    """Validate one ``qsa_indexer_mqa_score`` call and allocate its FP32 output.

    Parameters
    ----------
    q_idx : Tensor
        Padded ``[B, Q, H, D]`` or varlen ``[total_q, H, D]`` (then exactly one of
        ``cu_seqlens_q [R+1]`` or ``token_to_req [total_q]`` + ``num_requests``); bf16/fp16
        (the reference also accepts float32).
    block_keys : Tensor
        Logical ``[B, N_B, D]`` (B == number of requests), or with ``block_table [R, max_pages]``
        a paged cache ``[pages, page_size, 1, D]`` / ``[pages, page_size, D]``; dtype of ``q_idx``.
    block_table : Tensor, optional
        ``[R, max_pages]`` integer page ids of a paged ``block_keys``; ids < 0 or >= pages are masked.
    page_size : int, optional
        Must equal ``block_keys.shape[1]`` when given; requires ``block_table``.
    cu_seqlens_q, token_to_req : Tensor, optional
        Varlen row metadata (exactly one): ``[R + 1]`` cumulative rows, or ``[total_q]``
        request id per row.
    num_requests : int, optional
        ``R``; required with ``token_to_req``.
    query_positions, seq_lens_q : Tensor, optional
        ``[B, Q]``/``[rows]`` request-local positions and ``[R]`` query lengths (integer metadata).
    block_size, scale, score_scale, backend
        As in the spec; ``scale``/``score_scale`` resolve into one multiplier.

    Returns
    -------
    IndexerScorePlan
        ``result`` is the FP32 ``[B, Q, W]`` or ``[total_q, W]`` output (W = N_B, or
        ``max_pages * page_size`` when paged) and ``out`` its ``[rows, W]`` view.

    Raises
    ------
    MateValueError, MateTypeError
        As the matching ``mate`` entry point documents (its ValueError and TypeError cases);
        :class:`UnsupportedTargetError` and :class:`LayoutError` for the native backend.
    """
    backend = check_backend(backend)
    q_idx = require_data("q_idx", q_idx, backend)
    require_rank("q_idx", q_idx, (3, 4), "padded [B, Q, H, D] or varlen [total_q, H, D]")
    heads, dim = heads_and_dim("q_idx", q_idx)
    block_keys = require_data("block_keys", block_keys, backend)
    require_like("block_keys", block_keys, "q_idx", q_idx)
    queries = _queries(q_idx, cu_seqlens_q, token_to_req, num_requests)
    if block_table is None:
        keys = _logical_keys(block_keys, page_size, queries, dim)
    else:
        keys = _paged_keys(block_keys, block_table, page_size, queries, q_idx, dim, backend)
    positions = _positions(query_positions, queries, q_idx, backend)
    if seq_lens_q is not None:
        seq_lens_q = require_metadata(
            "seq_lens_q", seq_lens_q, backend, "q_idx", q_idx, shape=(queries.num_requests,), what="[R]"
        )
    block_size = require_int("block_size", block_size, minimum=1)
    resolved = mqa_scale(scale, score_scale, dim)
    if backend == "tilelang":
        _check_native(keys, q_idx, block_keys, block_size, heads, dim)
    native_gate(backend, q_idx.device)

    result = empty_scores((*queries.lead, keys.width), q_idx.device)
    return IndexerScorePlan(
        q=queries.q,
        block_keys=keys.block_keys,
        block_table=keys.block_table,
        cu_seqlens_q=queries.cu_seqlens_q,
        token_to_req=queries.token_to_req,
        query_positions=positions,
        seq_lens_q=seq_lens_q,
        num_requests=queries.num_requests,
        q_len=queries.q_len,
        padded=len(queries.lead) == 2,
        num_blocks=keys.width,
        page_size=keys.page_size,
        block_size=block_size,
        scale=resolved,
        backend=backend,
        out=result.view(queries.rows, keys.width),
        result=result,
    )
