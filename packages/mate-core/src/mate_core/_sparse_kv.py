"""K/V layout of qsa_sparse_attention: paged, padded, varlen or physical storage."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._sparse_query import metadata_vector
from .checks import (
    describe,
    require_int,
    require_metadata,
    require_none,
    require_rank,
    require_same_device,
    require_tensor,
)
from .errors import MateTypeError, MateValueError

__all__ = ["KVLayout", "check_key_value", "check_heads", "logical_kv", "physical_kv"]

_LOGICAL_LAYOUTS = (
    "paged [pages,page_size,Hkv,D] with block_table, padded [R,S,Hkv,D], or varlen [total_k,Hkv,D] with cu_seqlens_k"
)


class KVLayout(NamedTuple):
    """kind: "paged" | "padded" | "varlen" | "physical"; page_size: paged page size, else 0."""

    kind: str
    page_size: int
    block_table: torch.Tensor | None
    cu_seqlens_k: torch.Tensor | None


def check_key_value(key: object, value: object, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """key/value are tensors with the query's dtype, device and head dim; value matches key exactly."""
    key = require_tensor("key", key)
    value = require_tensor("value", value)
    require_same_device("key", key, "query", query)
    if key.dtype != query.dtype:
        raise MateTypeError(
            f"key: got dtype {describe(key.dtype)}; expected the query dtype {describe(query.dtype)} "
            "(Q and K/V dtypes must be equal)"
        )
    if key.dim() < 1 or key.shape[-1] != query.shape[-1]:
        raise MateValueError(
            f"key: got shape {list(key.shape)}; expected head dim D={query.shape[-1]} on the last axis (as query)"
        )
    require_same_device("value", value, "key", key)
    if value.dtype != key.dtype:
        raise MateTypeError(f"value: got dtype {describe(value.dtype)}; expected the key dtype {describe(key.dtype)}")
    if value.shape != key.shape:
        raise MateValueError(f"value: got shape {list(value.shape)}; expected the key shape {list(key.shape)}")
    return key, value


def check_heads(query: torch.Tensor, key: torch.Tensor) -> None:
    """Q head h reads KV head h // (Hq // Hkv), so Hkv must be >= 1 and divide Hq."""
    hq, hkv = query.shape[-2], key.shape[-2]
    if hkv < 1 or hq % hkv != 0:
        raise MateValueError(
            f"key: got {hkv} KV heads (shape {list(key.shape)}) for {hq} query heads; expected Hkv >= 1 "
            "dividing Hq (each group of Hq // Hkv query heads shares one KV head)"
        )


def _paged(key: torch.Tensor, block_table: object, page_size: object, num_requests: int, backend: str) -> KVLayout:
    table = require_metadata("block_table", block_table, backend, "key", key)
    if table.dim() != 2 or table.shape[0] != num_requests:
        raise MateValueError(
            f"block_table: got shape {list(table.shape)}; expected [R={num_requests}, max_pages] "
            "(one page-table row per request)"
        )
    slots = key.shape[1]
    if slots < 1:
        raise MateValueError(f"key: got shape {list(key.shape)}; expected a paged cache with page_size >= 1 on axis 1")
    given = require_int("page_size", page_size, minimum=1, optional=True)
    if given is not None and given != slots:
        raise MateValueError(
            f"page_size: got {given}; expected None or key.shape[1] == {slots} (the paged cache's page size)"
        )
    return KVLayout("paged", slots, table, None)


def _padded(key: torch.Tensor, num_requests: int) -> KVLayout:
    if key.shape[0] != num_requests:
        raise MateValueError(
            f"key: got padded K/V shape {list(key.shape)}; expected [R={num_requests}, S, Hkv, D] "
            "(one row per request; pass block_table for a paged cache)"
        )
    return KVLayout("padded", 0, None, None)


def _varlen(key: torch.Tensor, cu_seqlens_k: object, num_requests: int, backend: str) -> KVLayout:
    if cu_seqlens_k is None:
        raise MateValueError(
            f"cu_seqlens_k: got None with rank-3 key {list(key.shape)}; expected cu_seqlens_k [R+1] for varlen "
            "K/V [total_k,Hkv,D] (or selected_kv_indices for physical rows, or a rank-4 paged/padded key)"
        )
    # Dtype rules of the reference: backend='tilelang' rejects varlen K/V itself (check_native),
    # and that error, not an int32 demand, tells the caller what to pass instead.
    cu = metadata_vector(
        "cu_seqlens_k", cu_seqlens_k, "reference", key, num_requests + 1, "[R+1] cumulative key rows per request"
    )
    return KVLayout("varlen", 0, None, cu)


def logical_kv(
    key: torch.Tensor,
    block_table: object,
    page_size: object,
    cu_seqlens_k: object,
    num_requests: int,
    backend: str,
) -> KVLayout:
    """Paged (rank 4 + block_table), padded (rank 4) or varlen (rank 3 + cu_seqlens_k) K/V."""
    rank = require_rank("key", key, (3, 4), _LOGICAL_LAYOUTS)
    if block_table is None:
        require_none("page_size", page_size, "page_size describes a paged cache and requires block_table")
    if rank == 3:
        require_none(
            "block_table", block_table, f"paged K/V must be rank 4 [pages,page_size,Hkv,D]; key is {list(key.shape)}"
        )
        return _varlen(key, cu_seqlens_k, num_requests, backend)
    require_none("cu_seqlens_k", cu_seqlens_k, f"cu_seqlens_k describes rank-3 varlen K/V; key is {list(key.shape)}")
    if block_table is not None:
        return _paged(key, block_table, page_size, num_requests, backend)
    return _padded(key, num_requests)


def physical_kv(key: torch.Tensor) -> KVLayout:
    """Flattened [N,Hkv,D] K/V addressed by selected_kv_indices."""
    require_rank("key", key, (3,), "flattened [N,Hkv,D] physical rows (selected_kv_indices path)")
    return KVLayout("physical", 0, None, None)
