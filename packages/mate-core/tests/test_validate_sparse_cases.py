"""Valid qsa_sparse_attention argument sets shared by the test_validate_sparse_* files.

No tests here: ``sparse_call`` builds a valid call for one query layout and one
K/V layout; each test then breaks or inspects one argument.
"""

from __future__ import annotations

import types
from typing import Any

import torch

B, Q = 2, 3  # padded query: requests x rows per request
ROWS = B * Q  # flattened queries use the same row count
CU_Q = [0, 2, 6]  # flattened rows per request: 2 and 4
TOKEN_TO_REQ = [0, 0, 1, 1, 1, -1]  # the last row is a padded row
PAGES, PAGE_SIZE, MAX_PAGES = 5, 4, 3
BLOCK_TABLE = [[0, 3, -1], [1, 4, 2]]
S = 6  # padded K/V capacity
CU_K = [0, 4, 10]
PHYSICAL_N = 10  # rows of physical K/V

QUERY_LAYOUTS = ("padded", "cu_seqlens", "token_to_req")
KV_LAYOUTS = ("paged", "padded", "varlen")
NATIVE = {"dtype": torch.bfloat16, "heads": (24, 2), "dim": 256, "backend": "tilelang"}


def _randn(gen: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(shape, generator=gen).to(dtype)


def _meta(values: list, dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def _query_args(gen: torch.Generator, query: str, hq: int, dim: int, dtype: torch.dtype, idx: torch.dtype) -> dict:
    if query == "padded":
        return {"query": _randn(gen, (B, Q, hq, dim), dtype)}
    args: dict[str, Any] = {"query": _randn(gen, (ROWS, hq, dim), dtype)}
    if query == "cu_seqlens":
        args["cu_seqlens_q"] = _meta(CU_Q, idx)
    elif query == "token_to_req":
        args["token_to_req"] = _meta(TOKEN_TO_REQ, idx)
        args["num_requests"] = B
    return args


def _kv_shape(kv: str, hkv: int, dim: int) -> tuple[int, ...]:
    return {
        "paged": (PAGES, PAGE_SIZE, hkv, dim),
        "padded": (B, S, hkv, dim),
        "varlen": (CU_K[-1], hkv, dim),
        "physical": (PHYSICAL_N, hkv, dim),
    }[kv]


def _kv_args(gen: torch.Generator, kv: str, hkv: int, dim: int, dtype: torch.dtype, idx: torch.dtype) -> dict:
    shape = _kv_shape(kv, hkv, dim)
    args: dict[str, Any] = {"key": _randn(gen, shape, dtype), "value": _randn(gen, shape, dtype)}
    if kv == "paged":
        args["block_table"] = _meta(BLOCK_TABLE, idx)
    elif kv == "varlen":
        args["cu_seqlens_k"] = _meta(CU_K, idx)
    return args


def sparse_call(
    gen: torch.Generator,
    *,
    query: str = "padded",
    kv: str = "paged",
    dtype: torch.dtype | None = None,
    heads: tuple[int, int] = (4, 2),
    dim: int = 8,
    width: int = 7,
    index_dtype: torch.dtype = torch.int32,
    backend: str = "reference",
) -> dict[str, Any]:
    """Keyword arguments of one valid plan_sparse_attention call.

    query: "padded" [B,Q,Hq,D], "cu_seqlens" / "token_to_req" [ROWS,Hq,D], or
    "physical" (flattened BF16-style rows with selected_kv_indices; ``kv`` is then ignored).
    kv: "paged" | "padded" | "varlen". width: T, the selection width.
    dtype: data dtype, default float32 (bfloat16 on the physical path, which requires it).
    """
    hq, hkv = heads
    if dtype is None:
        dtype = torch.bfloat16 if query == "physical" else torch.float32
    if query == "physical":
        args = _query_args(gen, "flat", hq, dim, dtype, index_dtype)
        args.update(_kv_args(gen, "physical", hkv, dim, dtype, index_dtype))
        args["selected_kv_indices"] = torch.randint(-1, PHYSICAL_N + 1, (ROWS, width), generator=gen).to(index_dtype)
    else:
        args = _query_args(gen, query, hq, dim, dtype, index_dtype)
        args.update(_kv_args(gen, kv, hkv, dim, dtype, index_dtype))
        lead = tuple(args["query"].shape[:-2])
        args["token_indices"] = torch.randint(-1, S, (*lead, width), generator=gen).to(index_dtype)
    args["backend"] = backend
    return args


def apply(args: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """Copy of ``args`` with ``changes``; a lambda value is called with the original args."""
    new = dict(args)
    for name, value in changes.items():
        new[name] = value(args) if isinstance(value, types.FunctionType) else value
    return new


def lead(args: dict[str, Any]) -> tuple[int, ...]:
    """The query's batch/row axes: (B, Q) padded or (rows,) flattened."""
    return tuple(args["query"].shape[:-2])


def ints(shape: tuple[int, ...], dtype: torch.dtype = torch.int32) -> torch.Tensor:
    """Small non-constant integer metadata of a given shape (validation never reads it)."""
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(n) % 5 - 1).to(dtype).reshape(shape)


def to_device(args: dict[str, Any], device: str) -> dict[str, Any]:
    """Every tensor argument moved to ``device`` (e.g. "meta", whose data cannot be read)."""
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in args.items()}


def misaligned(t: torch.Tensor) -> torch.Tensor:
    """Same shape and dtype, random values, one element (2 bytes) past a 16-byte boundary."""
    flat = torch.randn(t.numel() + 1).to(t.dtype)
    return flat[1:].view(t.shape)


def same_memory(view: torch.Tensor, base: torch.Tensor) -> bool:
    """``view`` starts where ``base`` starts, in the same storage (a zero-copy view)."""
    return view.data_ptr() == base.data_ptr() and (
        view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    )
