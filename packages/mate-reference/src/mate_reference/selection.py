"""Research helpers between the indexer and sparse attention: block top-k and index expansion.

The spec leaves top-k selection and block -> token expansion to the caller; these are
plain PyTorch versions a CPU user needs for a full QSA step::

    scores = qsa_indexer_mqa_score(q_idx, block_keys)          # [B, Q, N_B] FP32
    blocks = topk_blocks(scores, 512)                          # [B, Q, 512] int32
    tokens = expand_blocks(blocks, positions)                  # [B, Q, 2051] int32
"""

from __future__ import annotations

import torch

from mate_core.checks import describe, require_bool, require_int, require_tensor
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
    """
    scores = require_tensor("scores", scores)
    if not scores.is_floating_point() or scores.dim() < 1:
        raise MateTypeError(f"scores: got {describe(scores)}; expected a floating-point tensor [..., N]")
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
        raise MateTypeError(f"{name}: got dtype {describe(t.dtype)}; expected an integer dtype (int32 or int64)")
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
    block_size : int
        Tokens per block (>= 1); QSA uses 4.
    include_tail : bool
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
    """
    blocks = _require_integer("block_indices", block_indices)
    positions = _require_integer("query_positions", query_positions)
    block_size = require_int("block_size", block_size, minimum=1)
    include_tail = require_bool("include_tail", include_tail)
    if blocks.dim() < 1 or tuple(positions.shape) != tuple(blocks.shape[:-1]):
        raise MateValueError(
            f"query_positions: got shape {list(positions.shape)}; expected block_indices.shape[:-1] "
            f"({list(blocks.shape[:-1])}) for block_indices {list(blocks.shape)}"
        )
    if positions.device != blocks.device:
        raise MateValueError(f"query_positions: got device {positions.device}; expected {blocks.device}")
    offsets = torch.arange(block_size, device=blocks.device)
    b = blocks.long()[..., None]
    tokens = torch.where(b >= 0, b * block_size + offsets, torch.full_like(b, -1)).flatten(-2)
    if include_tail and block_size > 1:
        p = positions.long()[..., None]
        tail = ((p + 1) // block_size) * block_size + offsets[:-1]
        tail = torch.where((tail <= p) & (tail >= 0), tail, torch.full_like(tail, -1))
        tokens = torch.cat([tokens, tail], dim=-1)
    return tokens.to(torch.int32)
