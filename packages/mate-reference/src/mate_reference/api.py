"""CPU-research entry points for the MQA indexer: the spec's signatures, reference backend only.

Each function validates through ``mate_core.plan_*(..., backend='reference')`` and runs
the FP32 reference on the inputs' device. ``backend`` defaults to, and only accepts,
``"reference"`` (as in :func:`mate_reference.qsa_sparse_attention`). ``pip install
mate-reference`` alone is enough; ``mate.qsa_*`` is the full facade with the native backend.
"""

from __future__ import annotations

import torch

from mate_core import plan_indexer_score, plan_mqa_decode, plan_mqa_prefill

from . import mqa
from ._backend import documents_reference_errors, require_reference

__all__ = ["qsa_indexer_mqa_score", "qsa_mqa", "qsa_mqa_decode", "qsa_mqa_prefill"]


@documents_reference_errors
def qsa_indexer_mqa_score(
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
    backend: str = "reference",
) -> torch.Tensor:
    """QSA MQA block scores on the FP32 oracle.

    Block ``j`` is ``-inf`` unless its last token ``(j + 1) * block_size - 1`` is at or
    before the query's position (default: its local row index), the row is not padded,
    and (paged) its page is valid.

    Parameters
    ----------
    q_idx, block_keys, block_table, page_size, cu_seqlens_q, token_to_req, num_requests, \
query_positions, seq_lens_q, block_size, scale, score_scale
        As in the spec and ``mate.qsa_indexer_mqa_score`` (README, section "API"); the oracle
        also takes float32 data, int64 metadata, varlen queries and paged keys, on any device.
    backend : {"reference"}, default "reference"
        Only the oracle (``mate.qsa_indexer_mqa_score`` runs the native kernels).

    Returns
    -------
    torch.Tensor
        float32 ``[B, Q, N_B]`` (padded ``q_idx``) or ``[total_q, N_B]`` (varlen).
    """
    require_reference(backend, "qsa_indexer_mqa_score")
    plan = plan_indexer_score(
        q_idx,
        block_keys,
        block_table=block_table,
        page_size=page_size,
        cu_seqlens_q=cu_seqlens_q,
        token_to_req=token_to_req,
        num_requests=num_requests,
        query_positions=query_positions,
        seq_lens_q=seq_lens_q,
        block_size=block_size,
        scale=scale,
        score_scale=score_scale,
        backend="reference",
    )
    mqa.indexer_score(plan)
    return plan.result


@documents_reference_errors
def qsa_mqa_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    row_starts: torch.Tensor,
    row_ends: torch.Tensor,
    score_scale: float | None = None,
    *,
    scale: float | None = None,
    backend: str = "reference",
) -> torch.Tensor:
    """Packed-prefill MQA logits on the FP32 oracle; ``-inf`` outside ``[row_starts, row_ends)``.

    Parameters
    ----------
    q, k, row_starts, row_ends, score_scale, scale
        As in the spec and ``mate.qsa_mqa_prefill`` (README, section "API"); the oracle also
        takes float32 data and int64 metadata, on any device.
    backend : {"reference"}, default "reference"
        Only the oracle (``mate.qsa_mqa_prefill`` runs the native kernels).

    Returns
    -------
    torch.Tensor
        float32 ``[rows, keys]``.
    """
    require_reference(backend, "qsa_mqa_prefill")
    plan = plan_mqa_prefill(q, k, row_starts, row_ends, score_scale, scale=scale, backend="reference")
    mqa.mqa_prefill(plan)
    return plan.out


qsa_mqa = qsa_mqa_prefill


@documents_reference_errors
def qsa_mqa_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    page_table: torch.Tensor,
    context_lens: torch.Tensor,
    max_model_len: int,
    score_scale: float | None = None,
    *,
    scale: float | None = None,
    backend: str = "reference",
) -> torch.Tensor:
    """Paged-decode MQA logits on the FP32 oracle; invisible keys are ``-inf``.

    Parameters
    ----------
    q, k_cache, page_table, context_lens, max_model_len, score_scale, scale
        As in the spec and ``mate.qsa_mqa_decode`` (README, section "API"); the oracle also
        takes float32 data, int64 metadata and any page size, on any device.
    backend : {"reference"}, default "reference"
        Only the oracle (``mate.qsa_mqa_decode`` runs the native kernels).

    Returns
    -------
    torch.Tensor
        float32 ``[B, max_model_len]``.
    """
    require_reference(backend, "qsa_mqa_decode")
    plan = plan_mqa_decode(
        q, k_cache, page_table, context_lens, max_model_len, score_scale, scale=scale, backend="reference"
    )
    mqa.mqa_decode(plan)
    return plan.out
