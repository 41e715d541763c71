"""Query layout of qsa_sparse_attention: padded, flattened or physical rows.

Everything here reads tensor metadata only (shape, stride, dtype, device).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .checks import describe, require_int, require_metadata, require_none, require_rank, require_tensor, row_view
from .errors import MateTypeError, MateValueError

__all__ = ["REFERENCE_DATA_DTYPES", "QueryLayout", "check_query", "logical_query", "physical_query", "metadata_vector"]

# The reference oracle also runs FP32 data; the native dtypes are checked in _sparse_native.
REFERENCE_DATA_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


class QueryLayout(NamedTuple):
    """Row structure of the query.

    rows: [rows, Hq, D] zero-copy view of ``query``.
    lead: ``query.shape[:-2]``, i.e. (B, Q) padded or (rows,) flattened; every
        query-row-indexed argument (indices, positions, gate, out) starts with it.
    num_requests: R (0 on the physical path, which has no requests).
    q_len: Q for padded queries (may be 0), 0 for flattened ones: tell them apart by ``len(lead)``.
    cu_seqlens_q: [R+1] or None; token_to_req: [rows] or None.
    """

    rows: torch.Tensor
    lead: tuple[int, ...]
    num_requests: int
    q_len: int
    cu_seqlens_q: torch.Tensor | None
    token_to_req: torch.Tensor | None


def check_query(query: object, ranks: tuple[int, ...], layout: str) -> torch.Tensor:
    """Tensor type, rank, data dtype and non-empty head/feature axes of ``query``."""
    query = require_tensor("query", query)
    require_rank("query", query, ranks, layout)
    if query.dtype not in REFERENCE_DATA_DTYPES:
        raise MateTypeError(
            f"query: got dtype {describe(query.dtype)}; expected bfloat16 or float16 "
            "(backend='reference' also accepts float32)"
        )
    if query.shape[-1] < 1 or query.shape[-2] < 1:
        raise MateValueError(
            f"query: got shape {list(query.shape)}; expected at least one head and a head dim D >= 1 "
            "on the last two axes"
        )
    return query


def metadata_vector(
    name: str, t: object, backend: str, query: torch.Tensor, length: int | None, what: str
) -> torch.Tensor:
    """A 1-D integer metadata tensor on the query's device, of ``length`` entries when given."""
    t = require_metadata(name, t, backend, "query", query)
    if t.dim() != 1 or (length is not None and t.shape[0] != length):
        expected = f"shape [{length}]" if length is not None else "a 1-D tensor"
        raise MateValueError(f"{name}: got shape {list(t.shape)}; expected {expected} ({what})")
    return t


def _padded(query: torch.Tensor, cu_seqlens_q: object, token_to_req: object, num_requests: object) -> QueryLayout:
    why = "a padded rank-4 query [B,Q,Hq,D] already fixes each row's request and local index"
    require_none("cu_seqlens_q", cu_seqlens_q, why)
    require_none("token_to_req", token_to_req, why)
    batch, q_len = query.shape[0], query.shape[1]
    n = require_int("num_requests", num_requests, minimum=0, optional=True)
    if n is not None and n != batch:
        raise MateValueError(
            f"num_requests: got {n}; expected None or {batch} (the batch axis of the padded query {list(query.shape)})"
        )
    rows = row_view("query", query, 2)
    return QueryLayout(rows, (batch, q_len), batch, q_len, None, None)


def _cu_seqlens_q(cu_seqlens_q: object, num_requests: int | None, backend: str, query: torch.Tensor) -> int:
    length = None if num_requests is None else num_requests + 1
    what = "[R+1] cumulative query rows" + ("" if num_requests is None else f" with R = num_requests = {num_requests}")
    cu = metadata_vector("cu_seqlens_q", cu_seqlens_q, backend, query, length, what)
    if cu.shape[0] < 1:
        raise MateValueError("cu_seqlens_q: got shape [0]; expected [R+1] with R >= 0 (at least the leading 0)")
    return cu.shape[0] - 1


def _flattened(
    query: torch.Tensor, cu_seqlens_q: object, token_to_req: object, num_requests: object, backend: str
) -> QueryLayout:
    if cu_seqlens_q is not None and token_to_req is not None:
        raise MateValueError(
            "cu_seqlens_q and token_to_req: got both; a flattened query [total_q,Hq,D] needs exactly one of "
            "cu_seqlens_q [R+1] or token_to_req [total_q] (with num_requests)"
        )
    if cu_seqlens_q is None and token_to_req is None:
        raise MateValueError(
            f"cu_seqlens_q / token_to_req: got neither for the flattened query {list(query.shape)}; expected "
            "exactly one of cu_seqlens_q [R+1] or token_to_req [total_q] with num_requests "
            "(or a padded [B,Q,Hq,D] query)"
        )
    n = require_int("num_requests", num_requests, minimum=0, optional=True)
    rows = query.shape[0]
    if cu_seqlens_q is not None:
        n = _cu_seqlens_q(cu_seqlens_q, n, backend, query)
        return QueryLayout(query, (rows,), n, 0, cu_seqlens_q, None)  # type: ignore[arg-type]
    if n is None:
        raise MateValueError(
            "num_requests: got None; token_to_req requires num_requests (the request count R, "
            "ids outside [0, R) mark padded rows)"
        )
    ttr = metadata_vector("token_to_req", token_to_req, backend, query, rows, "one request id per query row")
    return QueryLayout(query, (rows,), n, 0, None, ttr)


def logical_query(
    query: object, cu_seqlens_q: object, token_to_req: object, num_requests: object, backend: str
) -> QueryLayout:
    """Padded [B,Q,Hq,D] or flattened [total_q,Hq,D] query with its request metadata."""
    query = check_query(query, (3, 4), "padded [B,Q,Hq,D] or flattened [total_q,Hq,D]")
    if query.dim() == 4:
        return _padded(query, cu_seqlens_q, token_to_req, num_requests)
    return _flattened(query, cu_seqlens_q, token_to_req, num_requests, backend)


def physical_query(query: object) -> QueryLayout:
    """Flattened BF16 [rows,Hq,D] query of the selected_kv_indices path."""
    query = check_query(query, (3,), "flattened [rows,Hq,D] (selected_kv_indices needs flattened queries)")
    if query.dtype != torch.bfloat16:
        raise MateTypeError(
            f"query: got dtype {describe(query.dtype)}; expected bfloat16 (selected_kv_indices supports "
            "BF16 Q/K/V only)"
        )
    return QueryLayout(query, (query.shape[0],), 0, 0, None, None)
