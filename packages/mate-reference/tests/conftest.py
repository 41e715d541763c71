"""Fixtures shared by the mate_reference tests."""

from __future__ import annotations

import math

import pytest
import torch

from mate_core.plans import SparseAttentionPlan


def build_sparse_plan(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    token_indices: torch.Tensor | None = None,
    *,
    selected_kv_indices: torch.Tensor | None = None,
    block_indices: torch.Tensor | None = None,
    cu_seqlens_q: torch.Tensor | None = None,
    token_to_req: torch.Tensor | None = None,
    num_requests: int | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    seq_lens_q: torch.Tensor | None = None,
    seq_lens_k: torch.Tensor | None = None,
    query_positions: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    scale: float | None = None,
    gate: torch.Tensor | None = None,
    num_splits: int = 0,
    return_lse: bool = False,
    out: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
) -> SparseAttentionPlan:
    """A SparseAttentionPlan built without validation (inputs are trusted to be well-formed).

    Unbound out/lse buffers are filled with NaN so a test sees any element the backend
    forgets to write.
    """
    padded = query.dim() == 4
    hq, dim = query.shape[-2:]
    rows = query.shape[0] * query.shape[1] if padded else query.shape[0]
    if selected_kv_indices is not None:
        kv_layout, num_req = "physical", 0
    elif block_table is not None:
        kv_layout, num_req = "paged", block_table.shape[0]
    elif key.dim() == 4:
        kv_layout, num_req = "padded", key.shape[0]
    else:
        kv_layout, num_req = "varlen", cu_seqlens_k.shape[0] - 1
    if padded:
        num_req = query.shape[0]
    elif cu_seqlens_q is not None:
        num_req = cu_seqlens_q.shape[0] - 1
    elif num_requests is not None:
        num_req = num_requests
    out_result = torch.full(query.shape, math.nan, dtype=query.dtype) if out is None else out
    lse_result = lse
    if lse is None and return_lse:
        lse_result = torch.full(query.shape[:-1], math.nan, dtype=torch.float32)

    def rows_of(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None or not padded else t.reshape(rows, *t.shape[2:])

    return SparseAttentionPlan(
        query=query.reshape(rows, hq, dim),
        key=key,
        value=value,
        kv_layout=kv_layout,
        token_indices=rows_of(token_indices) if padded else token_indices,
        selected_kv_indices=selected_kv_indices,
        block_indices=rows_of(block_indices) if padded else block_indices,
        cu_seqlens_q=cu_seqlens_q,
        token_to_req=token_to_req,
        cu_seqlens_k=cu_seqlens_k,
        seq_lens_q=seq_lens_q,
        seq_lens_k=seq_lens_k,
        query_positions=rows_of(query_positions) if padded else query_positions,
        block_table=block_table,
        gate=rows_of(gate) if padded else gate,
        num_requests=num_req,
        q_len=query.shape[1] if padded else 0,
        padded=padded,
        page_size=key.shape[1] if kv_layout == "paged" else 0,
        scale=1.0 / math.sqrt(dim) if scale is None else scale,
        num_splits=num_splits,
        return_lse=return_lse,
        warp_specialized=False,
        assume_compact_blocks=False,
        backend="reference",
        out=out_result.view(rows, hq, dim),
        lse=None if lse_result is None else lse_result.view(rows, hq),
        out_result=out_result,
        lse_result=lse_result,
    )


@pytest.fixture(scope="session")
def sparse_plan():
    """The unvalidated SparseAttentionPlan builder (``build_sparse_plan``)."""
    return build_sparse_plan


# backend values every public mate_reference entry point rejects: (backend, error, message pattern
# with ``{entry}`` for the entry point's name).
_REJECTED_BACKENDS = [
    ("tilelang", ValueError, r"^backend: got 'tilelang'; mate_reference\.{entry} runs only backend="),
    ("auto", ValueError, r"^backend: got 'auto'; automatic backend selection is not supported"),
    (3, TypeError, r"^backend: got int 3; expected one of "),
]


@pytest.fixture(params=_REJECTED_BACKENDS, ids=lambda case: repr(case[0]))
def rejected_backend(request):
    """``(backend, error, pattern)``: a backend the reference entry points reject, and how."""
    return request.param
