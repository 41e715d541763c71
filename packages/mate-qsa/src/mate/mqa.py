"""The MQA indexer entry points: block scores, packed prefill logits, paged decode logits.

Each function validates its arguments once in ``mate_core`` (shapes, dtypes,
devices, layouts; no device reads, no synchronization), then runs the chosen
backend on the resulting plan. ``backend="tilelang"`` (the default) never falls
back to the reference; ``backend="reference"`` runs the FP32 PyTorch oracle on
any device.
"""

from __future__ import annotations

import torch

from mate_core import plan_indexer_score, plan_mqa_decode, plan_mqa_prefill

from ._ops import run

__all__ = ["qsa_indexer_mqa_score", "qsa_mqa", "qsa_mqa_decode", "qsa_mqa_prefill"]


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
    backend: str = "tilelang",
) -> torch.Tensor:
    """Compute QSA MQA block scores.

    ``score[row, j] = scale * sum_h relu(q_idx[row, h, :] . block_keys[b, j, :])``,
    accumulated in FP32, ``b`` being the row's request (with ``block_table``, key ``j`` of
    request ``b`` is read through its page table). Block ``j`` covers tokens ``j*block_size ..
    (j+1)*block_size - 1`` and is visible to a query at request-local position
    ``p`` iff ``(j+1)*block_size - 1 <= p``; invisible blocks score ``-inf``.
    This function does not select Top-K (see :func:`mate.topk_blocks`).

    Parameters
    ----------
    q_idx : torch.Tensor
        Projected indexer queries, bf16 or fp16 (the reference also accepts
        float32). Padded ``[B, Q, H, D]`` (canonical ``[B, Q, 4, 128]``), or
        varlen ``[total_q, H, D]`` with exactly one of ``cu_seqlens_q`` or
        ``token_to_req`` (+ ``num_requests``); varlen requires
        ``backend="reference"`` (use :func:`qsa_mqa_prefill` for native packed rows).
        The native path takes ``B <= 65535`` per call (a launch-grid axis).
    block_keys : torch.Tensor
        Compressed keys, same dtype, device and ``D`` as ``q_idx``. Logical
        ``[R, N_B, D]`` (``R == B`` for padded ``q_idx``); with ``block_table`` a paged cache
        ``[pages, page_size, 1, D]`` or ``[pages, page_size, D]`` (reference only;
        native paged scoring is :func:`qsa_mqa_decode`). The native path takes
        ``N_B <= 268431360`` (65535 launch-grid rows of 4096 keys).
    block_table : torch.Tensor, optional
        int32 (reference: int32/int64) ``[R, max_pages]`` logical-to-physical
        page ids for a paged ``block_keys``; entries ``< 0`` or ``>= pages`` are masked.
    page_size : int, optional
        Must equal ``block_keys.shape[1]`` when given; requires ``block_table``.
    cu_seqlens_q : torch.Tensor, optional
        int32/int64 ``[R + 1]`` cumulative query rows per request (varlen only): request ``b``
        owns rows ``cu[b]:cu[b+1]``; rows before ``cu[0]`` or from ``cu[R]`` on are padded rows,
        which score ``-inf``.
    token_to_req : torch.Tensor, optional
        int32/int64 ``[total_q]`` request id of each row (varlen only; ids outside
        ``[0, R)`` mark padded rows, which score ``-inf``); needs ``num_requests``. A
        request's rows must be contiguous: a row's request-local index is its distance from
        the request's first row (padded rows between requests are fine).
    num_requests : int, optional
        Number of requests ``R`` (>= 0); required with ``token_to_req``. Otherwise
        ``None`` or, with padded queries, ``B``; with ``cu_seqlens_q``, ``len(cu_seqlens_q) - 1``.
    query_positions : torch.Tensor, optional
        int32 (reference: int32/int64) ``[B, Q]`` (or flattened ``[B * Q]``) for padded
        ``q_idx``, ``[total_q]`` for varlen: request-local positions. If omitted, a
        row's position is its local row index (a fresh prefill chunk).
    seq_lens_q : torch.Tensor, optional
        int32 (reference: int32/int64) ``[R]`` query rows per request; rows beyond it
        are all ``-inf``.
    block_size : int, default 4
        Tokens per compressed key (the native path supports 4).
    scale : float, optional
        Positive score multiplier; defaults to ``1/sqrt(D)``. Exclusive with ``score_scale``.
    score_scale : float, optional
        Positive score denominator (``scale = 1/score_scale``). Exclusive with ``scale``. For
        either, its FP32 multiplier must be a normal number, in [1.18e-38, 3.4e+38].
    backend : {"tilelang", "reference"}, default "tilelang"
        ``"tilelang"`` runs the native kernel (bf16/fp16, ``H == 4``, ``D == 128``,
        vector-load layout) on a supported GPU and raises otherwise;
        ``"reference"`` forces the FP32 PyTorch oracle.

    Returns
    -------
    torch.Tensor
        float32 scores ``[B, Q, N_B]`` (padded) or ``[total_q, N_B]`` (varlen);
        ``N_B`` is ``max_pages * page_size`` for a paged cache.

    Raises
    ------
    ValueError
        Inconsistent shapes, devices (every tensor on ``q_idx``'s), layouts, metadata, scaling,
        or backend options.
    TypeError
        Wrong Python types, or unsupported data or metadata dtypes.
    RuntimeError
        Native backend only: TileLang is missing, or a CUDA-graph capture misuse.

    The exception classes are listed in the :mod:`mate` package docstring.
    """
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
        backend=backend,
    )
    run("indexer_score", plan)
    return plan.result


def qsa_mqa_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    row_starts: torch.Tensor,
    row_ends: torch.Tensor,
    score_scale: float | None = None,
    *,
    scale: float | None = None,
    backend: str = "tilelang",
) -> torch.Tensor:
    """Compute packed-prefill MQA logits.

    ``out[r, j] = scale * sum_h relu(q[r, h, :] . k[j, :])`` for
    ``row_starts[r] <= j < row_ends[r]``, ``-inf`` elsewhere (an empty interval
    gives a row of ``-inf``). Also exported as :func:`qsa_mqa`.

    Parameters
    ----------
    q : torch.Tensor
        Queries ``[rows, heads, dim]``, bf16 or fp16 (reference also float32).
    k : torch.Tensor
        Shared keys ``[keys, dim]`` or ``[keys, 1, dim]``, dtype and device of ``q``. The
        native path takes ``keys <= 268431360`` (65535 launch-grid rows of 4096 keys).
    row_starts : torch.Tensor
        int32 (reference: int32/int64) ``[rows]``: inclusive visible-key start per row.
    row_ends : torch.Tensor
        int32 (reference: int32/int64) ``[rows]``: exclusive visible-key end per row.
    score_scale : float, optional
        Positive score denominator, exclusive with ``scale``.
    scale : float, optional
        Positive score multiplier; defaults to ``1/sqrt(dim)``. For either, its FP32 multiplier
        must be a normal number, in [1.18e-38, 3.4e+38].
    backend : {"tilelang", "reference"}, default "tilelang"
        TileLang supports bf16/fp16 ``heads == 4``, ``dim == 128`` inputs that
        satisfy the vector-load layout rule; ``"reference"`` is the FP32 oracle.

    Returns
    -------
    torch.Tensor
        float32 ``[rows, keys]`` scores, ``-inf`` outside each visible interval.

    Raises
    ------
    ValueError
        Invalid shapes, devices (every tensor on ``q``'s), layout, scaling, or backend options.
    TypeError
        Wrong Python types, or unsupported data or metadata dtypes.
    RuntimeError
        Native backend only: TileLang is missing, or a CUDA-graph capture misuse.

    The exception classes are listed in the :mod:`mate` package docstring.
    """
    plan = plan_mqa_prefill(q, k, row_starts, row_ends, score_scale=score_scale, scale=scale, backend=backend)
    run("mqa_prefill", plan)
    return plan.out


qsa_mqa = qsa_mqa_prefill


def qsa_mqa_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    page_table: torch.Tensor,
    context_lens: torch.Tensor,
    max_model_len: int,
    score_scale: float | None = None,
    *,
    scale: float | None = None,
    backend: str = "tilelang",
) -> torch.Tensor:
    """Compute paged-decode MQA logits with packed-row metadata.

    Key ``j`` of request ``b`` is read from page ``page_table[b, j // page_size]``,
    slot ``j % page_size``; it is visible iff ``j < context_lens[b]`` and that page
    id is in ``[0, pages)``. Invisible keys score ``-inf``, and so do the columns
    ``j >= max_pages * page_size`` when ``max_model_len`` is wider than the table.

    Parameters
    ----------
    q : torch.Tensor
        Queries ``[B, heads, dim]`` or ``[B, 1, heads, dim]``, bf16 or fp16
        (reference also float32). May be broadcast (stride 0). The native path takes
        ``B <= 65535`` per call (a launch-grid axis).
    k_cache : torch.Tensor
        Compressed paged keys ``[pages, page_size, 1, dim]`` or
        ``[pages, page_size, dim]``, dtype and device of ``q``. The native path
        supports ``page_size`` in {8, 16, 32, 64}; others need ``backend="reference"``.
    page_table : torch.Tensor
        int32 (reference: int32/int64) ``[B, max_pages]`` physical page ids; unused
        entries may be -1.
    context_lens : torch.Tensor
        int32 (reference: int32/int64) ``[B]`` visible compressed-key counts.
    max_model_len : int
        Output width in compressed-key units (>= 1).
    score_scale : float, optional
        Positive score denominator, exclusive with ``scale``.
    scale : float, optional
        Positive score multiplier; defaults to ``1/sqrt(dim)``. For either, its FP32 multiplier
        must be a normal number, in [1.18e-38, 3.4e+38].
    backend : {"tilelang", "reference"}, default "tilelang"
        TileLang supports bf16/fp16 ``heads == 4``, ``dim == 128``; ``"reference"``
        is the FP32 oracle.

    Returns
    -------
    torch.Tensor
        float32 ``[B, max_model_len]`` scores; invisible keys score ``-inf``.

    Raises
    ------
    ValueError
        Invalid shapes, devices (every tensor on ``q``'s), page size, ``max_model_len``,
        scaling, or backend options.
    TypeError
        Wrong Python types, or unsupported data or metadata dtypes.
    RuntimeError
        Native backend only: TileLang is missing, or a CUDA-graph capture misuse.

    The exception classes are listed in the :mod:`mate` package docstring.
    """
    plan = plan_mqa_decode(
        q, k_cache, page_table, context_lens, max_model_len, score_scale=score_scale, scale=scale, backend=backend
    )
    run("mqa_decode", plan)
    return plan.out
