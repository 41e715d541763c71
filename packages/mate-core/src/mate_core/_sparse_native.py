"""backend='tilelang' rules of qsa_sparse_attention, then the arch gate (last).

Native int32 metadata is enforced where each metadata tensor is checked
(checks.require_metadata); the rules here cover data dtype, head geometry,
K/V layout combinations and the vector-load rule on K/V.
"""

from __future__ import annotations

import torch

from ._sparse_kv import KVLayout
from .arch import native_target_for
from .checks import DATA_DTYPES, check_vector_layout, describe, require_native_grid
from .errors import MateTypeError, MateValueError

__all__ = ["NATIVE_HEAD_DIM", "MAX_NATIVE_GROUP", "check_native"]

NATIVE_HEAD_DIM = 256
MAX_NATIVE_GROUP = 16  # Hq // Hkv rows fit one 16-row MMA tile
_USE_REFERENCE = "use backend='reference' for this layout"


def _check_geometry(query: torch.Tensor, key: torch.Tensor) -> None:
    if query.dtype not in DATA_DTYPES:
        raise MateTypeError(
            f"query: got dtype {describe(query.dtype)}; backend='tilelang' expects bfloat16 or float16 "
            "(float32 requires backend='reference')"
        )
    dim = query.shape[-1]
    if dim != NATIVE_HEAD_DIM:
        raise MateValueError(
            f"query: got head dim D={dim} (shape {list(query.shape)}); backend='tilelang' expects "
            f"D == {NATIVE_HEAD_DIM}; {_USE_REFERENCE}"
        )
    hq, hkv = query.shape[-2], key.shape[-2]
    if hq // hkv > MAX_NATIVE_GROUP:
        raise MateValueError(
            f"query/key: got Hq={hq}, Hkv={hkv} (group {hq // hkv}); backend='tilelang' expects "
            f"Hq // Hkv <= {MAX_NATIVE_GROUP}; {_USE_REFERENCE}"
        )
    # The paged and union kernels put the KV heads on a grid axis, the merge kernel the Q heads.
    instead = "split the heads across calls or pass backend='reference'"
    require_native_grid("key", hkv, "KV heads (Hkv)", instead)
    require_native_grid("query", hq, "query heads (Hq)", instead)


def _check_kv_combination(kv: KVLayout, padded_query: bool, num_splits: int) -> None:
    if kv.kind == "varlen":
        raise MateValueError(
            "cu_seqlens_k: got flattened varlen K/V; backend='tilelang' expects paged K/V "
            f"(block_table) or padded [R,S,Hkv,D]; {_USE_REFERENCE}"
        )
    if kv.kind == "padded" and not padded_query:
        raise MateValueError(
            "query: got a flattened query with padded (non-paged) K/V; backend='tilelang' expects a padded "
            f"rank-4 query for non-paged K/V, or paged K/V (block_table) for flattened queries; {_USE_REFERENCE}"
        )
    require_native_grid("num_splits", num_splits, "splits", "pass a smaller count (None chooses one)")
    if kv.kind == "padded" and num_splits not in (0, 1):
        raise MateValueError(
            f"num_splits: got {num_splits} with padded (non-paged) K/V; backend='tilelang' accepts None (the "
            "schedule chooses) or 1 there: an explicit split count needs paged K/V (block_table)"
        )


def check_native(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kv: KVLayout, padded_query: bool, num_splits: int
) -> None:
    """All tilelang-only rules, then ``native_target_for(device)`` (before anything compiles)."""
    _check_geometry(query, key)
    _check_kv_combination(kv, padded_query, num_splits)
    check_vector_layout("key", key)
    check_vector_layout("value", value)
    native_target_for(query.device)
