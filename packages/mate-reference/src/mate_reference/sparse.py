"""FP32 reference of QSA sparse core attention (``qsa_sparse_attention``).

For every query row and Q head ``h`` the output is the softmax-weighted sum of the
values of the row's *used* selected tokens, read from KV head ``h // (Hq // Hkv)``::

    s_t  = scale * q[row, h] . k[t]             (FP32)
    lse  = log(sum_t exp(s_t))                   (natural log; -inf with no used token)
    out  = sum_t exp(s_t - lse) * v[t]  * sigmoid(gate)   (zeros with no used token)

Which selected ids are used, how positions are inferred and how each KV layout is
addressed is documented in ``_rows`` and ``_gather``. ``block_indices``,
``num_splits``, ``warp_specialized`` and ``assume_compact_blocks`` are schedule hints
and do not change the result, so the reference ignores them.
"""

from __future__ import annotations

import torch

from mate_core import plan_sparse_attention
from mate_core.plans import SparseAttentionPlan

from ._backend import documents_reference_errors, require_reference
from ._gather import gather_kv
from ._rows import RowMeta, resolve_rows

__all__ = ["qsa_sparse_attention", "sparse_attention"]

Tensor = torch.Tensor

# Upper bound on the FP32 bytes of one chunk's gathered K and V together.
_CHUNK_BYTES = 256 << 20


def _chunk_rows(plan: SparseAttentionPlan) -> int:
    """Rows per chunk so that the gathered K/V of one chunk stay under ``_CHUNK_BYTES``."""
    ids = plan.selected_kv_indices if plan.kv_layout == "physical" else plan.token_indices
    hkv, dim = plan.key.shape[-2], plan.key.shape[-1]
    per_row = 2 * 4 * max(ids.shape[1] * hkv * dim, 1)
    return max(1, _CHUNK_BYTES // per_row)


def _attend(query: Tensor, keys: Tensor, values: Tensor, used: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    """Masked softmax attention of one chunk.

    Parameters
    ----------
    query : Tensor
        ``[n, Hq, D]``, any float dtype.
    keys, values : Tensor
        FP32 ``[n, Hkv, T, D]``.
    used : Tensor
        bool ``[n, T]``.
    scale : float
        Score multiplier.

    Returns
    -------
    out : Tensor
        FP32 ``[n, Hq, D]`` (before gating; zero for rows with no used token).
    lse : Tensor
        FP32 ``[n, Hq]``, natural log; -inf for rows with no used token.
    """
    n, hq, dim = query.shape
    hkv = keys.shape[1]
    q = query.float().reshape(n, hkv, hq // hkv, dim)
    scores = torch.matmul(q, keys.transpose(-1, -2)) * scale  # [n, Hkv, G, T]
    scores = scores.masked_fill(~used[:, None, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    # A row without used tokens has lse = -inf; shifting by 0 there keeps exp(-inf) = 0 (not NaN).
    shift = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    probs = torch.exp(scores - shift[..., None])
    out = torch.matmul(probs, values)  # [n, Hkv, G, D]
    return out.reshape(n, hq, dim), lse.reshape(n, hq)


def _gated(out: Tensor, gate: Tensor | None) -> Tensor:
    """``out * sigmoid(gate)`` with gate ``[n, Hq]`` or ``[n, Hq, D]``; FP32."""
    if gate is None:
        return out
    g = torch.sigmoid(gate.float())
    return out * (g[..., None] if g.dim() == 2 else g)


def _run_chunk(plan: SparseAttentionPlan, meta: RowMeta | None, rows: slice) -> None:
    keys, values, used = gather_kv(plan, meta, rows)
    out, lse = _attend(plan.query[rows], keys, values, used, plan.scale)
    out = _gated(out, None if plan.gate is None else plan.gate[rows])
    # Empty rows are exactly zero even when the gate holds NaN/inf.
    out = out.masked_fill(~used.any(dim=1)[:, None, None], 0.0)
    plan.out[rows].copy_(out)
    if plan.lse is not None:
        plan.lse[rows].copy_(lse)


def sparse_attention(plan: SparseAttentionPlan) -> None:
    """Run the reference on a validated plan, writing ``plan.out`` and ``plan.lse`` in place.

    Parameters
    ----------
    plan : SparseAttentionPlan
        From ``mate_core.plan_sparse_attention``. ``plan.out`` (``[rows, Hq, D]``, query
        dtype, possibly a strided view of the caller's ``out``) receives every element;
        ``plan.lse`` (``[rows, Hq]`` FP32, or None) receives the natural-log LSE, -inf for
        padded rows and rows with no used token.
    """
    meta = None if plan.kv_layout == "physical" else resolve_rows(plan)
    step = _chunk_rows(plan)
    for start in range(0, plan.rows, step):
        _run_chunk(plan, meta, slice(start, min(start + step, plan.rows)))


@documents_reference_errors
def qsa_sparse_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    token_indices: Tensor | None = None,
    *,
    block_indices: Tensor | None = None,
    cu_seqlens_q: Tensor | None = None,
    token_to_req: Tensor | None = None,
    num_requests: int | None = None,
    cu_seqlens_k: Tensor | None = None,
    seq_lens_q: Tensor | None = None,
    seq_lens_k: Tensor | None = None,
    query_positions: Tensor | None = None,
    block_table: Tensor | None = None,
    page_size: int | None = None,
    scale: float | None = None,
    gate: Tensor | None = None,
    num_splits: int | None = None,
    return_lse: bool = False,
    backend: str = "reference",
    warp_specialized: bool = False,
    assume_compact_blocks: bool = False,
    out: Tensor | None = None,
    selected_kv_indices: Tensor | None = None,
    softmax_scale: float | None = None,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    compute_dtype: torch.dtype = torch.bfloat16,
    lse: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """QSA sparse core attention on the FP32 reference (CPU or any torch device).

    Same arguments, validation and results as ``mate.qsa_sparse_attention``, except that
    ``backend`` defaults to, and only accepts, ``"reference"`` (this package has no native
    kernels; use ``mate.qsa_sparse_attention`` for ``backend="tilelang"``).

    Parameters
    ----------
    query, key, value, token_indices, block_indices, cu_seqlens_q, token_to_req, num_requests, \
cu_seqlens_k, seq_lens_q, seq_lens_k, query_positions, block_table, page_size, scale, gate, \
num_splits, return_lse, warp_specialized, assume_compact_blocks, out, selected_kv_indices, \
softmax_scale, k_scale, v_scale, compute_dtype, lse
        As in the spec and ``mate.qsa_sparse_attention`` (README, section "API"); the oracle
        also takes float32 queries, int64 metadata, varlen K/V and any page size, on any device.
    backend : {"reference"}, default "reference"
        Only the oracle.

    Returns
    -------
    Tensor or tuple of Tensor
        The query-shaped output in the query dtype (``out`` itself when given), or
        ``(out, lse)`` with FP32 ``lse`` of shape ``query.shape[:-1]`` when ``return_lse``.
    """
    require_reference(backend, "qsa_sparse_attention")
    plan = plan_sparse_attention(
        query,
        key,
        value,
        token_indices,
        block_indices=block_indices,
        cu_seqlens_q=cu_seqlens_q,
        token_to_req=token_to_req,
        num_requests=num_requests,
        cu_seqlens_k=cu_seqlens_k,
        seq_lens_q=seq_lens_q,
        seq_lens_k=seq_lens_k,
        query_positions=query_positions,
        block_table=block_table,
        page_size=page_size,
        scale=scale,
        gate=gate,
        num_splits=num_splits,
        return_lse=return_lse,
        backend="reference",
        warp_specialized=warp_specialized,
        assume_compact_blocks=assume_compact_blocks,
        out=out,
        selected_kv_indices=selected_kv_indices,
        softmax_scale=softmax_scale,
        k_scale=k_scale,
        v_scale=v_scale,
        compute_dtype=compute_dtype,
        lse=lse,
    )
    sparse_attention(plan)
    return plan.returned()
