"""Query-row resolution for the sparse-attention reference.

Maps every flattened query row to its request, its request-local index, whether
it is a real (non-padded) row, its causal position and its request's KV length,
following the agreed semantics:

* padded queries: row ``r`` is request ``r // Q`` at local index ``r % Q``;
* ``cu_seqlens_q``: request ``b`` owns rows ``cu[b]:cu[b+1]``;
* ``token_to_req``: the row's request id; ids outside ``[0, R)`` mark padded rows;
  the local index counts from the request's first row;
* ``seq_len_q = seq_lens_q[req]`` (else the request's row count); rows at local
  index ``>= seq_len_q`` are padded;
* ``seq_len_k = seq_lens_k[req]`` (else the KV capacity of the request);
* ``pos = query_positions[row]`` (else ``seq_len_k - seq_len_q + local``).

Metadata is caller-prepared and may be inconsistent; every lookup clamps its index
and masks, so no metadata value can index out of bounds.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mate_core.plans import SparseAttentionPlan

__all__ = ["RowMeta", "resolve_rows", "take"]

Tensor = torch.Tensor


@dataclass(frozen=True)
class RowMeta:
    """Per-row metadata, every field ``[rows]`` int64 (``valid``: bool).

    req: request id clamped into ``[0, R)`` (meaningless where ``valid`` is False).
    valid: the row is a real query row (not padded, request id in range).
    pos: causal position; token ``t`` is visible iff ``t <= pos``.
    seq_len_k: KV length of the row's request.
    capacity: KV capacity of the row's request (tokens addressable in storage).
    kv_start: first token of the row's request in varlen K/V (0 for other layouts).
    """

    req: Tensor
    valid: Tensor
    pos: Tensor
    seq_len_k: Tensor
    capacity: Tensor
    kv_start: Tensor


def take(table: Tensor, index: Tensor, fill: int) -> Tensor:
    """``table.reshape(-1)[index]`` as int64, ``fill`` where ``index`` is outside the table.

    Parameters
    ----------
    table : Tensor
        Any-shape integer tensor, read flattened.
    index : Tensor
        Integer tensor of flat positions, any shape.
    fill : int
        Value for out-of-range positions.

    Returns
    -------
    Tensor
        int64, shape of ``index``.
    """
    flat = table.reshape(-1)
    n = flat.numel()
    inside = (index >= 0) & (index < n)
    if n == 0:
        return torch.full_like(index, fill, dtype=torch.int64)
    values = flat[index.clamp(0, n - 1)].long()
    return torch.where(inside, values, torch.full_like(values, fill))


def _padded_rows(plan: SparseAttentionPlan, r: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    q_len = plan.q_len
    return r // q_len, r % q_len, torch.full_like(r, q_len)


def _cu_rows(plan: SparseAttentionPlan, r: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    cu = plan.cu_seqlens_q.long()
    req = torch.searchsorted(cu[1:].contiguous(), r, right=True)
    start = take(cu, req, 0)
    count = take(cu, req + 1, 0) - start
    return req, r - start, count


def _token_to_req_rows(plan: SparseAttentionPlan, r: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    num_req = plan.num_requests
    req = plan.token_to_req.long().reshape(-1)
    # Out-of-range rows go to a spare slot R so the scatters need no boolean indexing.
    slot = torch.where((req >= 0) & (req < num_req), req, torch.full_like(req, num_req))
    first = torch.full((num_req + 1,), r.numel(), dtype=torch.int64, device=r.device)
    first.scatter_reduce_(0, slot, r, reduce="amin")
    count = torch.zeros(num_req + 1, dtype=torch.int64, device=r.device)
    count.scatter_add_(0, slot, torch.ones_like(r))
    return req, r - first[slot], count[slot]


def _capacity(plan: SparseAttentionPlan, req: Tensor) -> tuple[Tensor, Tensor]:
    """KV capacity and varlen start of each row's request, both ``[rows]`` int64."""
    zeros = torch.zeros_like(req)
    if plan.kv_layout == "padded":
        return torch.full_like(req, plan.key.shape[1]), zeros
    if plan.kv_layout == "paged":
        return torch.full_like(req, plan.block_table.shape[1] * plan.page_size), zeros
    cu_k = plan.cu_seqlens_k.long()
    start = take(cu_k, req, 0)
    return take(cu_k, req + 1, 0) - start, start


def resolve_rows(plan: SparseAttentionPlan) -> RowMeta:
    """Resolve every query row of a logical (non-physical) plan.

    Parameters
    ----------
    plan : SparseAttentionPlan
        A plan whose ``kv_layout`` is "padded", "varlen" or "paged".

    Returns
    -------
    RowMeta
        Per-row tensors of length ``plan.rows`` on the query's device.
    """
    r = torch.arange(plan.rows, dtype=torch.int64, device=plan.query.device)
    if plan.padded:
        req, local, count = _padded_rows(plan, r)
    elif plan.cu_seqlens_q is not None:
        req, local, count = _cu_rows(plan, r)
    else:
        req, local, count = _token_to_req_rows(plan, r)
    in_range = (req >= 0) & (req < plan.num_requests)
    req = req.clamp(0, max(plan.num_requests - 1, 0))
    seq_len_q = count if plan.seq_lens_q is None else take(plan.seq_lens_q, req, 0)
    capacity, kv_start = _capacity(plan, req)
    seq_len_k = capacity if plan.seq_lens_k is None else take(plan.seq_lens_k, req, 0)
    if plan.query_positions is None:
        pos = seq_len_k - seq_len_q + local
    else:
        pos = plan.query_positions.reshape(-1).long()
    valid = in_range & (local >= 0) & (local < seq_len_q)
    return RowMeta(req=req, valid=valid, pos=pos, seq_len_k=seq_len_k, capacity=capacity, kv_start=kv_start)
