"""Normalized call plans.

``mate_core`` validates a public call once and returns one of these plans; the
backends (``mate_reference``, ``mate_kernels_musa``) consume the plan and never
validate again. Every field is a tensor, ``None``, or a Python scalar/str, so a
plan maps one-to-one onto a ``torch.library`` custom-op signature.

Conventions shared by all plans
-------------------------------
* "rows" is the flattened query-row axis: ``B*Q`` for padded queries (row
  ``r`` belongs to request ``r // q_len`` at local index ``r % q_len``) and
  ``total_q`` for packed/varlen queries (request from ``cu_seqlens_q`` or
  ``token_to_req``; local index = row minus the request's first row).
* Row views of user tensors are zero-copy ``view``s: writing a plan's ``out``
  writes the caller's tensor.
* ``scale`` is always the resolved multiplier (``score_scale`` and
  ``softmax_scale`` are folded in during validation).
* Output buffers are allocated (or bound, when the caller passed ``out=``/``lse=``)
  during planning; backends write every element of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["IndexerScorePlan", "MQAPrefillPlan", "MQADecodePlan", "SparseAttentionPlan"]

Tensor = torch.Tensor


@dataclass(frozen=True)
class IndexerScorePlan:
    """``qsa_indexer_mqa_score``.

    q: [rows, H, D] view of ``q_idx`` (a padded ``q_idx`` whose batch/query axes cannot be
       merged without a copy, i.e. a sliced view, stays [B, Q, H, D]).
    block_keys: logical [B, N_B, D], or paged cache [pages, page_size, D] (head axis dropped).
    block_table: paged only, [R, max_pages]; entries < 0 or >= pages are masked.
    query_positions: [rows], or [B, Q] when the caller's sliced view has no [rows] view without a
       copy (backends flatten it with ``reshape``), or None (inferred: local index, a fresh
       prefill chunk).
    seq_lens_q: [R] or None; rows at local index >= seq_lens_q[req] are all -inf.
    out: [rows, num_blocks] FP32 view of ``result`` ([B, Q, N_B] or [total_q, N_B]).
    """

    q: Tensor
    block_keys: Tensor
    block_table: Tensor | None
    cu_seqlens_q: Tensor | None
    token_to_req: Tensor | None
    query_positions: Tensor | None
    seq_lens_q: Tensor | None
    num_requests: int
    q_len: int  # padded: Q (may be 0); varlen: 0
    padded: bool  # q_idx [B, Q, H, D] (Q may be 0, so q_len cannot tell)
    num_blocks: int  # output width N_B
    page_size: int  # paged: page size; logical: 0
    block_size: int
    scale: float
    backend: str
    out: Tensor
    result: Tensor

    @property
    def paged(self) -> bool:
        return self.block_table is not None


@dataclass(frozen=True)
class MQAPrefillPlan:
    """``qsa_mqa_prefill`` / ``qsa_mqa``.

    q: [rows, H, D]; k: [keys, D] (head axis dropped); row_starts/row_ends: [rows].
    out: [rows, keys] FP32; key j of row r is visible iff row_starts[r] <= j < row_ends[r].
    """

    q: Tensor
    k: Tensor
    row_starts: Tensor
    row_ends: Tensor
    scale: float
    backend: str
    out: Tensor


@dataclass(frozen=True)
class MQADecodePlan:
    """``qsa_mqa_decode``.

    q: [B, H, D] (possibly broadcast, stride 0); k_cache: [pages, page_size, D].
    page_table: [B, max_pages]; context_lens: [B].
    out: [B, max_model_len] FP32.
    """

    q: Tensor
    k_cache: Tensor
    page_table: Tensor
    context_lens: Tensor
    max_model_len: int
    page_size: int
    scale: float
    backend: str
    out: Tensor


@dataclass(frozen=True)
class SparseAttentionPlan:
    """``qsa_sparse_attention``.

    query: [rows, Hq, D] view.
    key/value: as given; layout in ``kv_layout``:
      "padded"   [B, S, Hkv, D]           request b reads row b; capacity S
      "varlen"   [total_k, Hkv, D]        request b reads cu_seqlens_k[b]:cu_seqlens_k[b+1]
      "paged"    [pages, page_size, Hkv, D] via block_table [R, max_pages]
      "physical" [N, Hkv, D]              selected_kv_indices are physical rows
    token_indices / selected_kv_indices: [rows, T] (exactly one is set).
    block_indices: [rows, NB] hint or None.
    query_positions: [rows], or [B, Q] when the caller's sliced view has no [rows] view without
    a copy (backends flatten it with ``reshape``), or None (bottom-right causal positions).
    gate: [rows, Hq] or [rows, Hq, D], or None.
    out: [rows, Hq, D] view of ``out_result``; lse: [rows, Hq] FP32 view of
    ``lse_result`` (None when neither return_lse nor an lse buffer was given).
    num_splits: 0 means "choose" (the spec's None).
    """

    query: Tensor
    key: Tensor
    value: Tensor
    kv_layout: str
    token_indices: Tensor | None
    selected_kv_indices: Tensor | None
    block_indices: Tensor | None
    cu_seqlens_q: Tensor | None
    token_to_req: Tensor | None
    cu_seqlens_k: Tensor | None
    seq_lens_q: Tensor | None
    seq_lens_k: Tensor | None
    query_positions: Tensor | None
    block_table: Tensor | None
    gate: Tensor | None
    num_requests: int
    q_len: int  # padded queries: Q (may be 0); flattened: 0
    padded: bool  # query [B, Q, Hq, D] (Q may be 0, so q_len cannot tell)
    page_size: int  # paged: page size; else 0
    scale: float
    num_splits: int
    return_lse: bool
    warp_specialized: bool
    assume_compact_blocks: bool
    backend: str
    out: Tensor
    lse: Tensor | None
    out_result: Tensor
    lse_result: Tensor | None

    @property
    def rows(self) -> int:
        return self.query.shape[0]

    def returned(self) -> Tensor | tuple[Tensor, Tensor]:
        """What the public function returns."""
        if self.return_lse and self.lse_result is not None:
            return self.out_result, self.lse_result
        return self.out_result
