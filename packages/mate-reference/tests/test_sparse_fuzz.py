"""Hypothesis fuzzing of qsa_sparse_attention metadata on the reference.

Valid-shaped calls go through the public wrapper (validation + reference); calls with
inconsistent metadata (which validation cannot see without reading device memory) go
straight to the backend. Either way the reference must not crash, must write every
element, and must keep its invariants: padded or empty rows are exactly zero with LSE
-inf, everything else is finite, and every output is bounded by the largest |value|
(a softmax average, scaled by a sigmoid gate <= 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

from mate_reference.sparse import qsa_sparse_attention, sparse_attention

hypothesis = pytest.importorskip("hypothesis")
st = pytest.importorskip("hypothesis.strategies")

FUZZ = hypothesis.settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture, hypothesis.HealthCheck.too_slow],
)
DIM = 4


@dataclass
class Call:
    """One drawn call: public keyword arguments plus the rows known to be padded."""

    args: dict
    padded_rows: torch.Tensor  # [rows] bool


def _lengths(draw, n, low, high):
    return draw(st.lists(st.integers(low, high), min_size=n, max_size=n))


def _query(draw, layout, num_req, heads, dtype, gen):
    """Query tensor, its layout metadata, and which flattened rows are padded."""
    lens = _lengths(draw, num_req, 0, 3)
    if layout == "padded":
        q_len = max(1, max(lens))
        query = torch.randn(num_req, q_len, heads, DIM, generator=gen).to(dtype)
        padded = torch.tensor([[i >= n for i in range(q_len)] for n in lens]).reshape(-1)
        return query, {"seq_lens_q": torch.tensor(lens, dtype=torch.int32)}, padded, lens
    req_ids = [r for r, n in enumerate(lens) for _ in range(n)]
    if layout == "cu":
        meta = {"cu_seqlens_q": torch.tensor([0, *lens], dtype=torch.int32).cumsum(0).to(torch.int32)}
        padded = [False] * len(req_ids)
    else:
        # Padded rows (ids -1 or >= R) sit before and after the contiguous request blocks.
        bad = st.sampled_from([-1, num_req, num_req + 5])
        head, tail = draw(st.lists(bad, max_size=2)), draw(st.lists(bad, max_size=2))
        req_ids = head + req_ids + tail
        meta = {"token_to_req": torch.tensor(req_ids, dtype=torch.int32), "num_requests": num_req}
        padded = [not 0 <= r < num_req for r in req_ids]
    shorter = draw(st.booleans())
    if shorter:  # seq_lens_q below the row count pads the tail rows of each request
        seq_q = [draw(st.integers(0, n)) for n in lens]
        meta["seq_lens_q"] = torch.tensor(seq_q, dtype=torch.int32)
        local = [req_ids[:i].count(r) if 0 <= r < num_req else 0 for i, r in enumerate(req_ids)]
        padded = [p or local[i] >= seq_q[req_ids[i]] for i, p in enumerate(padded)]
    query = torch.randn(len(req_ids), heads, DIM, generator=gen).to(dtype)
    return query, meta, torch.tensor(padded, dtype=torch.bool), lens


def _kv(draw, layout, num_req, kv_heads, dtype, gen):
    """Key, value, their layout metadata and the per-request capacity."""
    if layout == "padded":
        cap = [draw(st.integers(1, 8))] * num_req
        shape, meta = (num_req, cap[0], kv_heads, DIM), {}
    elif layout == "varlen":
        cap = _lengths(draw, num_req, 0, 8)
        shape = (sum(cap), kv_heads, DIM)
        meta = {"cu_seqlens_k": torch.tensor([0, *cap]).cumsum(0).to(torch.int32)}
    else:
        page_size, max_pages, pages = draw(st.sampled_from([1, 2, 4])), draw(st.integers(1, 3)), draw(st.integers(1, 6))
        table = draw(st.lists(st.integers(-1, pages + 2), min_size=num_req * max_pages, max_size=num_req * max_pages))
        cap = [page_size * max_pages] * num_req
        shape = (pages, page_size, kv_heads, DIM)
        meta = {"block_table": torch.tensor(table, dtype=torch.int32).reshape(num_req, max_pages)}
    key = torch.randn(*shape, generator=gen).to(dtype)
    value = torch.randn(*shape, generator=gen).to(dtype)
    return key, value, meta, cap


@st.composite
def logical_calls(draw, seed: int) -> Call:
    gen = torch.Generator().manual_seed(seed + draw(st.integers(0, 2**16)))
    num_req = draw(st.integers(1, 3))
    kv_heads, group = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 3]))
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))
    q_layout = draw(st.sampled_from(["padded", "cu", "token_to_req"]))
    kv_layout = draw(st.sampled_from(["padded", "varlen", "paged"]))
    query, q_meta, padded, _ = _query(draw, q_layout, num_req, kv_heads * group, dtype, gen)
    key, value, kv_meta, cap = _kv(draw, kv_layout, num_req, kv_heads, dtype, gen)
    width = draw(st.integers(0, 6))
    lead = query.shape[:-2]
    ids = torch.randint(-1, max(cap) + 4, (*lead, width), generator=gen, dtype=torch.int32)
    args = {"query": query, "key": key, "value": value, "token_indices": ids, **q_meta, **kv_meta}
    if draw(st.booleans()):
        args["seq_lens_k"] = torch.tensor([draw(st.integers(0, c)) for c in cap], dtype=torch.int32)
    if draw(st.booleans()):
        args["query_positions"] = torch.randint(0, max(cap) + 3, lead, generator=gen, dtype=torch.int32)
    gate_shape = draw(st.sampled_from([None, query.shape[:-1], query.shape]))
    if gate_shape is not None:  # sigmoid <= 1 keeps the convex-hull bound
        args["gate"] = torch.randn(gate_shape, generator=gen).to(draw(st.sampled_from([dtype, torch.float32])))
    return Call(args, padded)


def check_invariants(out: torch.Tensor, lse: torch.Tensor, call: Call) -> None:
    query, value = call.args["query"], call.args["value"]
    assert out.shape == query.shape and out.dtype == query.dtype
    assert lse.shape == query.shape[:-1] and lse.dtype == torch.float32
    rows_out, rows_lse = out.reshape(-1, *out.shape[-2:]), lse.reshape(-1, lse.shape[-1])
    empty = rows_lse == -math.inf  # [rows, Hq]
    # The selection is shared by all Q heads: a row is empty for every head or for none.
    assert torch.equal(empty.all(dim=1), empty.any(dim=1))
    assert torch.all(empty[call.padded_rows])
    assert torch.all(rows_out[empty] == 0)
    assert torch.isfinite(rows_lse[~empty]).all() and torch.isfinite(rows_out).all()
    bound = value.float().abs().max() if value.numel() else torch.tensor(0.0)
    assert torch.all(rows_out.float().abs() <= bound * (1 + 1e-2) + 1e-6)


@FUZZ
@hypothesis.given(data=st.data())
def test_fuzz_logical_metadata(seed, data):
    call = data.draw(logical_calls(seed))
    out, lse = qsa_sparse_attention(**call.args, return_lse=True)
    check_invariants(out, lse, call)


@FUZZ
@hypothesis.given(data=st.data())
def test_fuzz_physical_indices(seed, data):
    gen = torch.Generator().manual_seed(seed + data.draw(st.integers(0, 2**16)))
    rows, tokens = data.draw(st.integers(0, 5)), data.draw(st.integers(0, 9))
    kv_heads, group = data.draw(st.sampled_from([1, 2])), data.draw(st.sampled_from([1, 3, 12]))
    query = torch.randn(rows, kv_heads * group, DIM, generator=gen).bfloat16()
    key = torch.randn(tokens, kv_heads, DIM, generator=gen).bfloat16()
    value = torch.randn(tokens, kv_heads, DIM, generator=gen).bfloat16()
    width = data.draw(st.integers(0, 6))
    ids = torch.randint(-3, tokens + 3, (rows, width), generator=gen, dtype=torch.int32)
    call = Call({"query": query, "key": key, "value": value}, torch.zeros(rows, dtype=torch.bool))
    out, lse = qsa_sparse_attention(**call.args, selected_kv_indices=ids, return_lse=True)
    check_invariants(out, lse, call)
    in_range = ((ids >= 0) & (ids < tokens)).any(dim=1)
    assert torch.equal(torch.isfinite(lse).all(dim=1), in_range)


@FUZZ
@hypothesis.given(data=st.data())
def test_fuzz_inconsistent_metadata_never_crashes(seed, sparse_plan, data):
    """Metadata the caller promised but broke (unsorted cu_seqlens, lengths past capacity,
    cu_seqlens_k past the storage) is not checked by validation; the backend must still
    stay in bounds and keep padded/empty rows at zero and -inf."""
    call = data.draw(logical_calls(seed))
    args = dict(call.args)
    noise = st.lists(st.integers(-4, 20), min_size=1, max_size=4)
    for name in ("cu_seqlens_q", "cu_seqlens_k", "seq_lens_k", "seq_lens_q", "token_to_req"):
        if name in args and data.draw(st.booleans()):
            values = data.draw(noise)
            size = args[name].shape[0]
            args[name] = torch.tensor((values * size)[:size], dtype=torch.int32)
    plan = sparse_plan(**args, return_lse=True)
    sparse_attention(plan)
    out, lse = plan.out_result, plan.lse_result
    assert out.shape == args["query"].shape and lse.shape == args["query"].shape[:-1]
    empty = lse == -math.inf
    assert torch.all(out[empty] == 0)
    assert torch.isfinite(out).all()
