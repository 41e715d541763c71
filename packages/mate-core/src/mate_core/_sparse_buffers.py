"""Output buffers of qsa_sparse_attention: bind out=/lse= or allocate them."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._sparse_query import QueryLayout
from .checks import check_no_overlap, check_out_buffer, row_view

__all__ = ["Buffers", "check_buffers", "allocate_buffers"]


class Buffers(NamedTuple):
    """out [..query shape..] / lse [..query.shape[:-1]..] as returned, and their row views.

    out_result is None until allocated; lse_result is None when no LSE is wanted.
    """

    out_result: torch.Tensor | None
    lse_result: torch.Tensor | None
    out: torch.Tensor | None
    lse: torch.Tensor | None


def _bind(
    name: str,
    buf: object,
    shape: torch.Size,
    dtype: torch.dtype,
    layout: QueryLayout,
    inputs: dict[str, torch.Tensor | None],
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    buf = check_out_buffer(name, buf, shape=shape, dtype=dtype, device=device)
    rows = row_view(name, buf, len(layout.lead))
    check_no_overlap(name, buf, inputs)
    return buf, rows


def check_buffers(
    out: object, lse: object, query: torch.Tensor, layout: QueryLayout, inputs: dict[str, torch.Tensor | None]
) -> Buffers:
    """Validate caller buffers: shape, dtype, device, strides, row view, no overlap with any input.

    ``inputs`` names every input tensor (gate included, so gate/out overlap is rejected);
    lse is also checked against out.
    """
    out_result = out_rows = lse_result = lse_rows = None
    if out is not None:
        out_result, out_rows = _bind("out", out, query.shape, query.dtype, layout, inputs, query.device)
    if lse is not None:
        lse_inputs = {**inputs, "out": out_result}
        lse_result, lse_rows = _bind("lse", lse, query.shape[:-1], torch.float32, layout, lse_inputs, query.device)
    return Buffers(out_result, lse_result, out_rows, lse_rows)


def allocate_buffers(buffers: Buffers, query: torch.Tensor, layout: QueryLayout, return_lse: bool) -> Buffers:
    """Fill in out (and lse when return_lse) with torch.empty: backends write every element."""
    out_result, lse_result, out_rows, lse_rows = buffers
    if out_result is None:
        out_result = torch.empty(query.shape, dtype=query.dtype, device=query.device)
        out_rows = row_view("out", out_result, len(layout.lead))
    if lse_result is None and return_lse:
        lse_result = torch.empty(query.shape[:-1], dtype=torch.float32, device=query.device)
        lse_rows = row_view("lse", lse_result, len(layout.lead))
    return Buffers(out_result, lse_result, out_rows, lse_rows)
