"""The QSA core-attention entry point: attention over per-query selected tokens."""

from __future__ import annotations

import torch

from mate_core import plan_sparse_attention

from ._ops import run

__all__ = ["qsa_sparse_attention"]


def qsa_sparse_attention(
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
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Run QSA core attention over a per-query compact token set.

    For each query row and Q head ``h``: softmax over the *used* selected tokens
    of ``scale * q . k`` (KV head ``h // (Hq // Hkv)``), then the weighted sum of
    their values; optionally ``out = attention * sigmoid(gate)``. A selected
    request-local token ``t`` is used iff ``0 <= t <= pos``, ``t < seq_len_k`` and
    (paged) its page id is valid; duplicates count as often as they appear. Rows
    with no used token, and padded rows, output zeros with LSE ``-inf``. The
    query position defaults to ``pos = seq_len_k - seq_len_q + i`` (bottom-right
    causal), ``i`` being the request-local row index; without ``seq_lens_k``,
    ``seq_len_k`` is the request's K/V capacity (``S`` padded, ``max_pages * page_size``
    paged, its ``cu_seqlens_k`` span varlen), and without ``seq_lens_q``, ``seq_len_q`` is
    its number of query rows.

    Parameters
    ----------
    query : torch.Tensor
        bf16 or fp16 (reference: also float32; with ``selected_kv_indices``: bf16
        only) ``[B, Q, Hq, D]`` padded (batch and query axes must form a zero-copy
        row view) or ``[total_q, Hq, D]`` flattened with exactly one of
        ``cu_seqlens_q`` or ``token_to_req`` + ``num_requests`` (with
        ``selected_kv_indices``: flattened, with neither). Canonical
        geometry: ``Hq=24, Hkv=2, D=256``; ``backend="tilelang"`` requires
        ``D == 256``, ``Hq // Hkv <= 16`` and ``Hq <= 65535`` (a launch-grid axis).
    key : torch.Tensor
        Same dtype, device and ``D`` as ``query``; ``Hkv >= 1`` must divide ``Hq``.
        Paged ``[pages, page_size, Hkv, D]`` with ``block_table``; padded
        ``[R, S, Hkv, D]`` (``R == B`` for a padded query; ``backend="tilelang"``
        needs a padded query here); flattened varlen ``[total_k, Hkv, D]`` with
        ``cu_seqlens_k`` (reference only); or physical ``[N, Hkv, D]`` with
        ``selected_kv_indices`` (bf16 only). ``backend="tilelang"`` also needs
        ``key`` and ``value`` to satisfy the vector-load layout rule.
    value : torch.Tensor
        Same shape, dtype and device as ``key``.
    token_indices : torch.Tensor, optional
        int32 (reference: int32/int64) ``[B, Q, T]`` or ``[total_q, T]``
        request-local token ids shared by all Q heads; -1 pads. Required unless
        ``selected_kv_indices`` is given.
    block_indices : torch.Tensor, optional
        int32 (reference: int32/int64) ``[B, Q, NB]`` / ``[total_q, NB]``
        four-token blocks behind ``token_indices`` (a hint; ``T == 4 * NB + 3``,
        ``1 <= NB <= 512``). Validated; the attention is always computed from
        ``token_indices``, and no backend reads the hint yet.
    cu_seqlens_q : torch.Tensor, optional
        int32 (reference: int32/int64) ``[R + 1]`` cumulative query rows (flattened query):
        request ``b`` owns rows ``cu[b]:cu[b+1]``; rows before ``cu[0]`` or from ``cu[R]`` on
        are padded rows.
    token_to_req : torch.Tensor, optional
        int32 (reference: int32/int64) ``[total_q]`` request id per row (ids outside
        ``[0, R)`` mark padded rows); needs ``num_requests``. A request's rows must be
        contiguous: a row's request-local index is its distance from the request's first row
        (padded rows between requests are fine).
    num_requests : int, optional
        ``R`` (>= 0); required with ``token_to_req``. Otherwise ``None`` or, with
        ``cu_seqlens_q``, ``len(cu_seqlens_q) - 1``; with a padded query, ``B``.
    cu_seqlens_k : torch.Tensor, optional
        int32/int64 ``[R + 1]`` cumulative KV rows of flattened varlen K/V (reference only).
    seq_lens_q : torch.Tensor, optional
        int32 (reference: int32/int64) ``[R]`` query rows per request; rows beyond are
        padded (zeros, LSE -inf).
    seq_lens_k : torch.Tensor, optional
        int32 (reference: int32/int64) ``[R]`` actual KV lengths, at most the cache capacity.
    query_positions : torch.Tensor, optional
        int32 (reference: int32/int64) ``[B, Q]`` or ``[total_q]`` request-local causal
        positions.
    block_table : torch.Tensor, optional
        int32 (reference: int32/int64) ``[R, max_pages]`` logical-to-physical page ids
        (paged K/V).
    page_size : int, optional
        Must equal ``key.shape[1]`` when given (paged K/V).
    scale : float, optional
        Positive softmax multiplier; defaults to ``1/sqrt(D)``. Exclusive with ``softmax_scale``;
        its FP32 multiplier must be a normal number, in [1.18e-38, 3.4e+38].
    gate : torch.Tensor, optional
        float32 or the query dtype, ``query.shape[:-1]`` or ``query.shape``, on the
        query's device (padded: batch and query axes must form a zero-copy row view);
        ``out = attention * sigmoid(gate)``.
    num_splits : int, optional
        ``None`` chooses a schedule; a positive int sets the SplitKV count (1 disables it;
        the native path takes at most 65535, and with padded K/V only ``None``, whose schedule
        may still split, or 1).
        With ``None``, in prefill-sized native calls the rows of requests with 16+ query
        rows (prefill chunks, also among decode rows) share one K/V gather between
        neighbouring rows whose selections overlap; environment ``MATE_SPARSE_UNION=0``
        turns that off, ``=1`` on for every row of every prefill-sized call.
    return_lse : bool, default False
        Also return the float32 natural-log log-sum-exp, shape ``query.shape[:-1]``.
    backend : {"tilelang", "reference"}, default "tilelang"
        Native kernels (no automatic fallback) or the FP32 PyTorch oracle.
    warp_specialized : bool, default False
        Opt-in warp-specialized prefill (a hint). Validated; no backend acts on it yet, so
        results and speed do not depend on it.
    assume_compact_blocks : bool, default False
        Producer contract that valid ``block_indices`` form a causal prefix of
        each row; requires ``block_indices``. Validated; no backend relies on it yet.
    out : torch.Tensor, optional
        Writable non-overlapping positive-stride view with the query's shape,
        dtype and device (padded: batch and query axes must form a zero-copy row
        view; not a leaf that requires grad); returned as is. Must not overlap any input.
    selected_kv_indices : torch.Tensor, optional
        int32 (reference: int32/int64) ``[total_q, T]`` physical row ids into
        flattened bf16 K/V ``[N, Hkv, D]``; no page translation or causal filter;
        ids outside ``[0, N)`` are masked. Exclusive with ``token_indices``,
        request/page metadata and ``gate``.
    softmax_scale : float, optional
        Alias of ``scale``; do not pass both.
    k_scale, v_scale : float, default 1.0
        Must be 1.0 (FP8 K/V is unsupported).
    compute_dtype : torch.dtype, default torch.bfloat16
        bfloat16 (or the query dtype on the logical path); FP8 is rejected.
    lse : torch.Tensor, optional
        float32 buffer of shape ``query.shape[:-1]`` on the query's device, under the
        same layout rules as ``out`` (and must not overlap ``out``); written whenever
        supplied.

    Returns
    -------
    torch.Tensor or tuple[torch.Tensor, torch.Tensor]
        The query-shaped output in the query dtype (exactly ``out`` when given),
        or ``(output, lse)`` when ``return_lse=True``, ``lse`` being float32
        ``query.shape[:-1]``.

    Raises
    ------
    ValueError
        Invalid shapes, devices (every tensor on the query's), output layout or overlap,
        scaling, incompatible hints or metadata, backend options, or a bad
        ``MATE_SPARSE_UNION`` value.
    TypeError
        Wrong Python types, or unsupported dtypes (data, metadata, ``gate``, ``out``, ``lse``).
    RuntimeError
        Native backend only: TileLang is missing, or a CUDA-graph capture misuse (a capture
        on another device's stream, or a device's first call made inside a capture).

    The exception classes are listed in the :mod:`mate` package docstring.
    """
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
        backend=backend,
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
    run("sparse_attention", plan)
    return plan.returned()
