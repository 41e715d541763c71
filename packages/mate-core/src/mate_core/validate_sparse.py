"""Validation of ``qsa_sparse_attention``: :func:`plan_sparse_attention`.

Order: generic checks (query layout, K/V layout, indices and row arguments,
scalars, buffers) -> backend='tilelang' rules -> the arch gate, so a CPU call with
backend='tilelang' reports its own rule violations first and otherwise raises
UnsupportedTargetError. Output buffers are allocated last. Nothing here reads
device memory or synchronizes; data-pointer checks are skipped while tracing.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._sparse_buffers import Buffers, allocate_buffers, check_buffers
from ._sparse_kv import KVLayout, check_heads, check_key_value, logical_kv, physical_kv
from ._sparse_native import check_native
from ._sparse_options import Options, check_compute_dtype, check_kv_scales, check_options, check_physical_exclusions
from ._sparse_query import QueryLayout, logical_query, metadata_vector, physical_query
from ._sparse_rows import Selection, gate_rows, lead_metadata, logical_selection, physical_selection
from .checks import check_backend, positions_view
from .plans import SparseAttentionPlan

__all__ = ["plan_sparse_attention"]


class _Parts(NamedTuple):
    """Everything that depends on the path (logical or physical), validated."""

    layout: QueryLayout
    key: torch.Tensor
    value: torch.Tensor
    kv: KVLayout
    selection: Selection
    seq_lens_q: torch.Tensor | None
    seq_lens_k: torch.Tensor | None
    query_positions: torch.Tensor | None
    gate: torch.Tensor | None


def _optional_lengths(
    name: str, t: object, backend: str, query: torch.Tensor, num_requests: int
) -> torch.Tensor | None:
    if t is None:
        return None
    return metadata_vector(name, t, backend, query, num_requests, f"one length per request, R = {num_requests}")


def _logical(query, key, value, token_indices, block_indices, cu_seqlens_q, token_to_req, num_requests,
             cu_seqlens_k, seq_lens_q, seq_lens_k, query_positions, block_table, page_size, gate,
             assume_compact_blocks, backend) -> _Parts:  # fmt: skip
    """Padded/flattened query with paged/padded/varlen K/V and request-local token_indices."""
    layout = logical_query(query, cu_seqlens_q, token_to_req, num_requests, backend)
    key, value = check_key_value(key, value, query)
    kv = logical_kv(key, block_table, page_size, cu_seqlens_k, layout.num_requests, backend)
    selection = logical_selection(token_indices, block_indices, assume_compact_blocks, backend, query, layout)
    positions = None
    if query_positions is not None:
        positions = positions_view(lead_metadata("query_positions", query_positions, backend, query, layout, None))
    return _Parts(
        layout,
        key,
        value,
        kv,
        selection,
        _optional_lengths("seq_lens_q", seq_lens_q, backend, query, layout.num_requests),
        _optional_lengths("seq_lens_k", seq_lens_k, backend, query, layout.num_requests),
        positions,
        gate_rows(gate, query, layout),
    )


def _physical(query, key, value, selected_kv_indices, assume_compact_blocks, backend, excluded) -> _Parts:
    """Flattened BF16 query with physical [N,Hkv,D] K/V rows; ``excluded`` must all be None."""
    check_physical_exclusions(excluded)
    layout = physical_query(query)
    key, value = check_key_value(key, value, query)
    kv = physical_kv(key)
    selection = physical_selection(selected_kv_indices, assume_compact_blocks, backend, query, layout)
    return _Parts(layout, key, value, kv, selection, None, None, None, None)


def _input_tensors(query: torch.Tensor, parts: _Parts) -> dict[str, torch.Tensor | None]:
    """Every input an output buffer must not overlap (gate included)."""
    return {
        "query": query,
        "key": parts.key,
        "value": parts.value,
        "token_indices": parts.selection.token_indices,
        "selected_kv_indices": parts.selection.selected_kv_indices,
        "block_indices": parts.selection.block_indices,
        "gate": parts.gate,
        "cu_seqlens_q": parts.layout.cu_seqlens_q,
        "token_to_req": parts.layout.token_to_req,
        "cu_seqlens_k": parts.kv.cu_seqlens_k,
        "seq_lens_q": parts.seq_lens_q,
        "seq_lens_k": parts.seq_lens_k,
        "query_positions": parts.query_positions,
        "block_table": parts.kv.block_table,
    }


def plan_sparse_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    token_indices: torch.Tensor | None = None,
    *,
    block_indices: torch.Tensor | None = None,
    cu_seqlens_q: torch.Tensor | None = None,
    token_to_req: torch.Tensor | None = None,
    num_requests: int | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    seq_lens_q: torch.Tensor | None = None,
    seq_lens_k: torch.Tensor | None = None,
    query_positions: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    page_size: int | None = None,
    scale: float | None = None,
    gate: torch.Tensor | None = None,
    num_splits: int | None = None,
    return_lse: bool = False,
    backend: str = "tilelang",
    warp_specialized: bool = False,
    assume_compact_blocks: bool = False,
    out: torch.Tensor | None = None,
    selected_kv_indices: torch.Tensor | None = None,
    softmax_scale: float | None = None,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    compute_dtype: torch.dtype = torch.bfloat16,
    lse: torch.Tensor | None = None,
) -> SparseAttentionPlan:
    """Validate one ``qsa_sparse_attention`` call and return its plan.

    Parameters
    ----------
    query, key, value, token_indices, ...
        Exactly the arguments of ``mate.qsa_sparse_attention`` (names, order,
        defaults). Data: query [B,Q,Hq,D] or [total_q,Hq,D]; key/value paged
        [pages,page_size,Hkv,D], padded [R,S,Hkv,D], varlen [total_k,Hkv,D] or
        physical [N,Hkv,D]; bf16/fp16 (float32 too for the reference). Metadata:
        int32 (int32 or int64 for the reference), on the query's device.

    Returns
    -------
    SparseAttentionPlan
        Zero-copy row views: query [rows,Hq,D]; token_indices or
        selected_kv_indices [rows,T]; block_indices [rows,NB]; query_positions
        [rows]; gate [rows,Hq] or [rows,Hq,D]; out [rows,Hq,D] (query dtype) and
        lse [rows,Hq] (float32; None when neither ``return_lse`` nor ``lse=`` was
        given), bound to the caller's ``out=``/``lse=`` or allocated with
        torch.empty. scale is the resolved multiplier; num_splits None becomes 0.

    Raises
    ------
    MateValueError / MateTypeError
        On any invalid shape, dtype, device, layout, combination or scalar.
    LayoutError
        backend='tilelang' with K/V that break the vector-load rule.
    UnsupportedTargetError
        backend='tilelang' on a device that is not a native target (checked last).
    """
    backend = check_backend(backend)
    if selected_kv_indices is None:
        parts = _logical(query, key, value, token_indices, block_indices, cu_seqlens_q, token_to_req, num_requests,
                         cu_seqlens_k, seq_lens_q, seq_lens_k, query_positions, block_table, page_size, gate,
                         assume_compact_blocks, backend)  # fmt: skip
    else:
        excluded = {
            "token_indices": token_indices, "block_indices": block_indices, "cu_seqlens_q": cu_seqlens_q,
            "token_to_req": token_to_req, "num_requests": num_requests, "cu_seqlens_k": cu_seqlens_k,
            "seq_lens_q": seq_lens_q, "seq_lens_k": seq_lens_k, "query_positions": query_positions,
            "block_table": block_table, "page_size": page_size, "gate": gate,
        }  # fmt: skip
        parts = _physical(query, key, value, selected_kv_indices, assume_compact_blocks, backend, excluded)
    check_heads(query, parts.key)
    options = check_options(scale, softmax_scale, query.shape[-1], num_splits, return_lse, warp_specialized)
    check_kv_scales(k_scale, v_scale)
    check_compute_dtype(compute_dtype, query.dtype, parts.kv.kind == "physical")
    buffers = check_buffers(out, lse, query, parts.layout, _input_tensors(query, parts))
    if backend == "tilelang":
        check_native(query, parts.key, parts.value, parts.kv, len(parts.layout.lead) == 2, options.num_splits)
    buffers = allocate_buffers(buffers, query, parts.layout, options.return_lse)
    return _plan(parts, options, buffers, assume_compact_blocks, backend)


def _plan(
    parts: _Parts, options: Options, buffers: Buffers, assume_compact_blocks: bool, backend: str
) -> SparseAttentionPlan:
    layout, kv, selection = parts.layout, parts.kv, parts.selection
    return SparseAttentionPlan(
        query=layout.rows,
        key=parts.key,
        value=parts.value,
        kv_layout=kv.kind,
        token_indices=selection.token_indices,
        selected_kv_indices=selection.selected_kv_indices,
        block_indices=selection.block_indices,
        cu_seqlens_q=layout.cu_seqlens_q,
        token_to_req=layout.token_to_req,
        cu_seqlens_k=kv.cu_seqlens_k,
        seq_lens_q=parts.seq_lens_q,
        seq_lens_k=parts.seq_lens_k,
        query_positions=parts.query_positions,
        block_table=kv.block_table,
        gate=parts.gate,
        num_requests=layout.num_requests,
        q_len=layout.q_len,
        padded=len(layout.lead) == 2,
        page_size=kv.page_size,
        scale=options.scale,
        num_splits=options.num_splits,
        return_lse=options.return_lse,
        warp_specialized=options.warp_specialized,
        assume_compact_blocks=assume_compact_blocks,
        backend=backend,
        out=buffers.out,
        lse=buffers.lse,
        out_result=buffers.out_result,
        lse_result=buffers.lse_result,
    )
