"""Research helpers between the indexer and sparse attention: block top-k and index expansion.

The spec leaves top-k selection and block -> token expansion to the caller; these are
plain PyTorch versions a CPU user needs for a full QSA step::

    scores = qsa_indexer_mqa_score(q_idx, block_keys)          # [B, Q, N_B] FP32
    blocks = topk_blocks(scores, 512)                          # [B, Q, 512] int32
    tokens = expand_blocks(blocks, positions)                  # [B, Q, 2051] int32
"""

from __future__ import annotations

import torch

from mate_core.checks import INT32_MAX, describe, require_bool, require_int, require_tensor
from mate_core.errors import MateTypeError, MateValueError

__all__ = ["expand_blocks", "topk_blocks"]

_INTEGER = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def topk_blocks(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Ids of the ``k`` highest-scoring visible blocks per row, best first.

    Parameters
    ----------
    scores : Tensor
        ``[..., N]`` floating-point block scores (e.g. from ``qsa_indexer_mqa_score``);
        ``-inf`` (and NaN) marks a block that cannot be selected.
    k : int
        Number of blocks to keep (>= 0); may exceed ``N``.

    Returns
    -------
    Tensor
        ``[..., k]`` int32 block ids in descending score order; ties keep the lower block
        id first. Rows with fewer than ``k`` selectable blocks are padded with ``-1``.

    Raises
    ------
    ValueError
        :class:`mate_core.MateValueError`: ``scores`` of rank 0, or ``k < 0``.
    TypeError
        :class:`mate_core.MateTypeError`: ``scores`` not a floating-point tensor, or ``k`` not an int.
    """
    scores = require_tensor("scores", scores)
    if not scores.is_floating_point():
        raise MateTypeError(
            f"scores: got dtype {describe(scores.dtype)}; expected a floating-point dtype (block scores [..., N])"
        )
    if scores.dim() < 1:
        raise MateValueError(
            f"scores: got shape {list(scores.shape)} (rank 0); expected rank >= 1 [..., N] (N block scores per row)"
        )
    k = require_int("k", k, minimum=0)
    keep = min(k, scores.shape[-1])
    # NaN sorts as -inf so it is never chosen; a stable sort makes tie order deterministic.
    ranked = torch.nan_to_num(scores, nan=float("-inf"), posinf=float("inf"), neginf=float("-inf"))
    values, ids = torch.sort(ranked, dim=-1, descending=True, stable=True)
    values, ids = values[..., :keep], ids[..., :keep]
    ids = torch.where(values > float("-inf"), ids, torch.full_like(ids, -1)).to(torch.int32)
    pad = ids.new_full((*ids.shape[:-1], k - keep), -1)
    return torch.cat([ids, pad], dim=-1)


def _require_integer(name: str, t: object) -> torch.Tensor:
    t = require_tensor(name, t)
    if t.dtype not in _INTEGER:
        raise MateTypeError(
            f"{name}: got dtype {describe(t.dtype)}; expected an integer dtype (int32 or int64; also int8, int16, uint8)"
        )
    return t


def expand_blocks(
    block_indices: torch.Tensor,
    query_positions: torch.Tensor,
    block_size: int = 4,
    include_tail: bool = True,
) -> torch.Tensor:
    """Expand selected blocks into request-local token ids, plus the query's causal tail.

    Parameters
    ----------
    block_indices : Tensor
        ``[..., k]`` integer block ids; negative ids are padding.
    query_positions : Tensor
        ``[...]`` integer request-local position ``p`` of each query (shape
        ``block_indices.shape[:-1]``).
    block_size : int, default 4
        Tokens per block (>= 1); QSA uses 4.
    include_tail : bool, default True
        Append the tokens of the query's own incomplete block,
        ``((p + 1) // block_size) * block_size .. p`` (at most ``block_size - 1`` tokens).

    Returns
    -------
    Tensor
        ``[..., k * block_size + (block_size - 1 if include_tail else 0)]`` int32 token ids.
        Slots ``i * block_size .. i * block_size + block_size - 1`` hold block ``i``'s tokens
        (``-1`` for a padding block); the last ``block_size - 1`` slots hold the tail, then
        ``-1``. With 512 blocks of 4 this is the canonical 2051-slot selection, directly usable
        as ``token_indices`` (with ``block_indices`` as its hint) in ``qsa_sparse_attention``.
        Token ids past int32 (``> 2**31 - 1``, e.g. from int64 block ids or positions) are
        returned as ``-1``, the padding value, because the native path consumes int32 ids; no
        device value is read to decide this (the check is an elementwise ``torch.where``).

    Raises
    ------
    ValueError
        :class:`mate_core.MateValueError`: ``block_indices`` of rank 0, ``query_positions`` not of
        shape ``block_indices.shape[:-1]``, or ``block_size < 1``.
    TypeError
        :class:`mate_core.MateTypeError`: non-integer ``block_indices`` or ``query_positions``, a
        ``block_size`` that is not an int, or an ``include_tail`` that is not a bool.
    """
    blocks = _require_integer("block_indices", block_indices)
    positions = _require_integer("query_positions", query_positions)
    block_size = require_int("block_size", block_size, minimum=1)
    include_tail = require_bool("include_tail", include_tail)
    if blocks.dim() < 1:
        raise MateValueError(
            f"block_indices: got shape {list(blocks.shape)} (rank 0); expected a tensor of rank >= 1 [..., NB] "
            "(NB block ids per query row)"
        )
    if tuple(positions.shape) != tuple(blocks.shape[:-1]):
        raise MateValueError(
            f"query_positions: got shape {list(positions.shape)}; expected block_indices.shape[:-1] "
            f"({list(blocks.shape[:-1])}) for block_indices {list(blocks.shape)}"
        )
    if positions.device != blocks.device:
        raise MateValueError(
            f"query_positions: got a tensor on {positions.device}; expected block_indices's device ({blocks.device})"
        )
    offsets = torch.arange(block_size, device=blocks.device)
    # int64 arithmetic on clamped operands cannot overflow; every token id that does not fit int32
    # becomes -1 (the int32 cast below would otherwise wrap it onto a small, valid-looking id).
    b = blocks.long()[..., None]
    tokens = b.clamp(max=INT32_MAX // block_size + 1) * block_size + offsets
    tokens = torch.where((b >= 0) & (tokens <= INT32_MAX), tokens, torch.full_like(tokens, -1)).flatten(-2)
    if include_tail and block_size > 1:
        # p < 0 has no tail; p >= 2**31 - 1 + block_size has only tail tokens past int32.
        p = positions.long()[..., None].clamp(min=-1, max=INT32_MAX + block_size)
        tail = ((p + 1) // block_size) * block_size + offsets[:-1]
        tail = torch.where((tail <= p) & (tail >= 0) & (tail <= INT32_MAX), tail, torch.full_like(tail, -1))
        tokens = torch.cat([tokens, tail], dim=-1)
    return tokens.to(torch.int32)
