"""Selected-token K/V gathers for the sparse-attention reference, one per KV layout.

Each gather turns a chunk of selected ids into the gathered keys and values plus a
``used`` mask saying which slots take part in the softmax. Unused slots read a
clamped, in-bounds storage row and are then zeroed, so neither an invalid id nor
the contents of an unused cache row can reach the output.
"""

from __future__ import annotations

import torch

from mate_core.plans import SparseAttentionPlan

from ._rows import RowMeta, take

__all__ = ["gather_kv"]

Tensor = torch.Tensor


def _logical_used(tokens: Tensor, meta: RowMeta, rows: slice) -> Tensor:
    """Causal / length / capacity filter of request-local ids, ``[n, T]`` bool."""
    pos = meta.pos[rows, None]
    limit = torch.minimum(meta.seq_len_k[rows], meta.capacity[rows])[:, None]
    return (tokens >= 0) & (tokens <= pos) & (tokens < limit) & meta.valid[rows, None]


def _padded_index(plan: SparseAttentionPlan, tokens: Tensor, meta: RowMeta, rows: slice):
    used = _logical_used(tokens, meta, rows)
    req = meta.req[rows, None].expand_as(tokens)
    return (req, tokens), used


def _varlen_index(plan: SparseAttentionPlan, tokens: Tensor, meta: RowMeta, rows: slice):
    used = _logical_used(tokens, meta, rows)
    return (meta.kv_start[rows, None] + tokens,), used


def _paged_index(plan: SparseAttentionPlan, tokens: Tensor, meta: RowMeta, rows: slice):
    used = _logical_used(tokens, meta, rows)
    page_size = plan.page_size
    max_pages = plan.block_table.shape[1]
    logical_page = tokens.clamp(min=0) // page_size
    used &= logical_page < max_pages
    page = take(plan.block_table, meta.req[rows, None] * max_pages + logical_page, -1)
    used &= (page >= 0) & (page < plan.key.shape[0])
    return (page, tokens.clamp(min=0) % page_size), used


def _physical_index(plan: SparseAttentionPlan, tokens: Tensor, meta: RowMeta | None, rows: slice):
    # Ids < 0 or >= N are masked by the bounds check in gather_kv; no causal filter here.
    return (tokens,), torch.ones_like(tokens, dtype=torch.bool)


_INDEXERS = {
    "padded": _padded_index,
    "varlen": _varlen_index,
    "paged": _paged_index,
    "physical": _physical_index,
}


def _in_bounds(index: tuple[Tensor, ...], shape: torch.Size) -> Tensor:
    """True where every component of ``index`` lies inside its storage axis, ``[n, T]`` bool."""
    inside = torch.ones_like(index[0], dtype=torch.bool)
    for i, size in zip(index, shape):
        inside &= (i >= 0) & (i < size)
    return inside


def _flat_rows(storage: Tensor, index: tuple[Tensor, ...]) -> tuple[Tensor, Tensor] | None:
    """Storage as ``[tokens, Hkv, D]`` (a view, never a copy) and ``index`` as one token index.

    None when the leading axes cannot be merged without copying the storage.
    """
    lead = len(index)
    try:
        flat = storage.view(-1, *storage.shape[lead:])
    except RuntimeError:
        return None
    token = index[0]
    for i, size in zip(index[1:], storage.shape[1:lead]):
        token = token * size + i
    return flat, token


def _gather(storage: Tensor, index: tuple[Tensor, ...], used: Tensor) -> Tensor:
    """``storage[index]`` as FP32 ``[n, Hkv, T, D]`` (contiguous), unused slots zeroed.

    ``used`` must already imply that ``index`` is in bounds wherever it is True.
    """
    n, t = used.shape
    hkv, dim = storage.shape[-2:]
    result = torch.empty((n, hkv, t, dim), dtype=torch.float32, device=storage.device)
    if n * t == 0 or any(size == 0 for size in storage.shape[: len(index)]):
        return result.zero_()
    safe = tuple(torch.where(used, i, torch.zeros_like(i)) for i in index)
    merged = _flat_rows(storage, safe)
    if merged is None:
        gathered = storage[safe]
    else:
        flat, token = merged
        # index_select on one merged axis is several times faster than tuple advanced indexing.
        gathered = flat.index_select(0, token.reshape(-1)).view(n, t, hkv, dim)
    # One pass converts to FP32 and moves T next to D, so both attention matmuls read contiguous rows.
    result.copy_(gathered.permute(0, 2, 1, 3))
    return result.masked_fill_(~used[:, None, :, None], 0.0)


def gather_kv(plan: SparseAttentionPlan, meta: RowMeta | None, rows: slice) -> tuple[Tensor, Tensor, Tensor]:
    """Gather the selected keys and values of a chunk of rows.

    Parameters
    ----------
    plan : SparseAttentionPlan
        The call plan; ``plan.kv_layout`` picks the gather.
    meta : RowMeta or None
        Resolved rows (None on the physical path, which has no request metadata).
    rows : slice
        The chunk of flattened query rows, ``n`` rows.

    Returns
    -------
    keys, values : Tensor
        FP32 ``[n, Hkv, T, D]``, contiguous; unused slots are zero.
    used : Tensor
        bool ``[n, T]``: the slot takes part in the softmax (duplicates included).
    """
    ids = plan.selected_kv_indices if plan.kv_layout == "physical" else plan.token_indices
    tokens = ids[rows].long()
    index, used = _INDEXERS[plan.kv_layout](plan, tokens, meta, rows)
    # Inconsistent caller metadata (e.g. cu_seqlens_k past the storage) must not index out of bounds.
    used &= _in_bounds(index, plan.key.shape)
    return _gather(plan.key, index, used), _gather(plan.value, index, used), used
