"""mate_reference.sparse_attention against a deliberately naive float64 loop implementation."""

from __future__ import annotations

import math

import pytest
import torch

from mate_reference import sparse as sparse_mod
from mate_reference.sparse import qsa_sparse_attention, sparse_attention

NUM_REQ = 3
PAGE_SIZE = 4
MAX_PAGES = 3
NUM_PAGES = 7
PADDED_S = 11
VARLEN_LENS = (9, 4, 11)
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


# ----------------------------------------------------------------------------------------
# Naive implementation: Python loops, float64, user-level (unflattened) arguments.
# ----------------------------------------------------------------------------------------


def _naive_rows(query, args):
    """List of (request, local index) or None (padded row) per flattened row."""
    if query.dim() == 4:
        b, q = query.shape[:2]
        return [(r // q, r % q) for r in range(b * q)]
    rows = query.shape[0]
    if args.get("cu_seqlens_q") is not None:
        cu = args["cu_seqlens_q"].tolist()
        found = [None] * rows
        for req in range(len(cu) - 1):
            for r in range(cu[req], cu[req + 1]):
                found[r] = (req, r - cu[req])
        return found
    t2r = args["token_to_req"].tolist()
    found = []
    for r, req in enumerate(t2r):
        if 0 <= req < args["num_requests"]:
            found.append((req, r - t2r.index(req)))
        else:
            found.append(None)
    return found


def _naive_kv(key, value, args, req, t):
    """(k, v) [Hkv, D] of request-local token t, or None when storage has no such token."""
    if args.get("block_table") is not None:
        ps = key.shape[1]
        table = args["block_table"][req].tolist()
        if t // ps >= len(table):
            return None
        page = table[t // ps]
        if not 0 <= page < key.shape[0]:
            return None
        return key[page, t % ps], value[page, t % ps]
    if key.dim() == 4:
        return (key[req, t], value[req, t]) if t < key.shape[1] else None
    cu = args["cu_seqlens_k"].tolist()
    if t >= cu[req + 1] - cu[req]:
        return None
    return key[cu[req] + t], value[cu[req] + t]


def _naive_capacity(key, args, req):
    if args.get("block_table") is not None:
        return args["block_table"].shape[1] * key.shape[1]
    if key.dim() == 4:
        return key.shape[1]
    cu = args["cu_seqlens_k"].tolist()
    return cu[req + 1] - cu[req]


def _naive_selection(query, key, value, args):
    """Per flattened row, the list of (k, v) pairs its softmax runs over."""
    if args.get("selected_kv_indices") is not None:
        ids = args["selected_kv_indices"].tolist()
        return [[(key[t], value[t]) for t in row_ids if 0 <= t < key.shape[0]] for row_ids in ids]
    rows = _naive_rows(query, args)
    ids = args["token_indices"].reshape(len(rows), -1).tolist()
    positions = None if args.get("query_positions") is None else args["query_positions"].reshape(-1).tolist()
    counts = [sum(1 for x in rows if x is not None and x[0] == req) for req in range(NUM_REQ)]
    selection = []
    for r, found in enumerate(rows):
        chosen = []
        if found is not None:
            req, local = found
            len_q = counts[req] if args.get("seq_lens_q") is None else int(args["seq_lens_q"][req])
            len_k = _naive_capacity(key, args, req)
            if args.get("seq_lens_k") is not None:
                len_k = int(args["seq_lens_k"][req])
            pos = len_k - len_q + local if positions is None else positions[r]
            if local < len_q:
                for t in ids[r]:
                    kv = _naive_kv(key, value, args, req, t) if 0 <= t <= pos and t < len_k else None
                    if kv is not None:
                        chosen.append(kv)
        selection.append(chosen)
    return selection


def naive_sparse(query, key, value, scale=None, gate=None, **args):
    """Float64 loop oracle. Returns (out [query.shape], lse [query.shape[:-1]]), both float64."""
    hq, dim = query.shape[-2:]
    hkv = key.shape[-2]
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    q = query.double().reshape(-1, hq, dim)
    key, value = key.double(), value.double()
    out = torch.zeros(q.shape, dtype=torch.float64)
    lse = torch.full(q.shape[:2], -math.inf, dtype=torch.float64)
    for r, chosen in enumerate(_naive_selection(query, key, value, args)):
        for h in range(hq):
            kvh = h // (hq // hkv)
            scores = [scale * float(q[r, h] @ k[kvh]) for k, _ in chosen]
            if not scores:
                continue
            m = max(scores)
            weights = [math.exp(s - m) for s in scores]
            total = sum(weights)
            lse[r, h] = m + math.log(total)
            acc = sum(w * v[kvh] for w, (_, v) in zip(weights, chosen)) / total
            if gate is not None:
                g = gate.double().reshape(q.shape[0], hq, -1)[r, h]
                acc = acc * torch.sigmoid(g)
            out[r, h] = acc
    return out.reshape(query.shape), lse.reshape(query.shape[:-1])


# ----------------------------------------------------------------------------------------
# Random cases
# ----------------------------------------------------------------------------------------


def _randn(gen, *shape, dtype):
    return torch.randn(*shape, generator=gen).to(dtype)


def _query_args(gen, q_layout, hq, dim, dtype, meta):
    """Query and its layout metadata. Request 1 is empty in the flattened layouts."""
    if q_layout == "padded":
        return {"query": _randn(gen, NUM_REQ, 3, hq, dim, dtype=dtype)}
    if q_layout == "cu":
        return {
            "query": _randn(gen, 5, hq, dim, dtype=dtype),
            "cu_seqlens_q": torch.tensor([0, 3, 3, 5], dtype=meta),
        }
    # Rows 5 and 6 name no valid request: padded rows.
    return {
        "query": _randn(gen, 7, hq, dim, dtype=dtype),
        "token_to_req": torch.tensor([0, 0, 0, 2, 2, 5, -1], dtype=meta),
        "num_requests": NUM_REQ,
    }


def _kv_args(gen, kv_layout, hkv, dim, dtype, meta):
    if kv_layout == "padded":
        shape = (NUM_REQ, PADDED_S, hkv, dim)
        extra = {}
    elif kv_layout == "varlen":
        shape = (sum(VARLEN_LENS), hkv, dim)
        cu = torch.tensor([0, *VARLEN_LENS]).cumsum(0)
        extra = {"cu_seqlens_k": cu.to(meta)}
    else:
        shape = (NUM_PAGES, PAGE_SIZE, hkv, dim)
        table = torch.randint(0, NUM_PAGES, (NUM_REQ, MAX_PAGES), generator=gen)
        table[0, 1] = -1  # missing page
        table[2, 2] = NUM_PAGES + 3  # out-of-range page
        extra = {"block_table": table.to(meta)}
    return {"key": _randn(gen, *shape, dtype=dtype), "value": _randn(gen, *shape, dtype=dtype), **extra}


def _capacity(kv):
    if "block_table" in kv:
        return MAX_PAGES * PAGE_SIZE
    return PADDED_S if kv["key"].dim() == 4 else max(VARLEN_LENS)


def make_case(gen, q_layout, kv_layout, *, hq=4, hkv=2, dim=8, dtype=torch.float32, meta=torch.int32, width=10):
    """User-level arguments of one random call: -1 pads, duplicates, future and too-large ids."""
    args = {**_query_args(gen, q_layout, hq, dim, dtype, meta), **_kv_args(gen, kv_layout, hkv, dim, dtype, meta)}
    lead = args["query"].shape[:-2]
    ids = torch.randint(-1, _capacity(args) + 3, (*lead, width), generator=gen)
    if width >= 2:
        ids[..., 1] = ids[..., 0]  # duplicates
    args["token_indices"] = ids.to(meta)
    return args


def run_plan(sparse_plan, args, **extra):
    plan = sparse_plan(**args, **extra)
    sparse_attention(plan)
    return plan


def check_against_naive(plan, args, **extra):
    out, lse = naive_sparse(**args, **{k: v for k, v in extra.items() if k in ("scale", "gate")})
    tol = TOL[args["query"].dtype]
    assert plan.out_result.dtype == args["query"].dtype
    assert plan.out_result.shape == args["query"].shape
    torch.testing.assert_close(plan.out_result.double(), out, atol=tol, rtol=tol)
    if plan.lse_result is not None:
        assert plan.lse_result.dtype == torch.float32
        assert torch.equal(torch.isinf(plan.lse_result), torch.isinf(lse))
        finite = torch.isfinite(lse)
        torch.testing.assert_close(plan.lse_result.double()[finite], lse[finite], atol=tol, rtol=tol)
    # The case must exercise something: some output rows are nonzero.
    assert out.abs().sum() > 0


# ----------------------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kv_layout", ["padded", "varlen", "paged"])
@pytest.mark.parametrize("q_layout", ["padded", "cu", "token_to_req"])
def test_layouts_match_naive(gen, sparse_plan, q_layout, kv_layout):
    args = make_case(gen, q_layout, kv_layout)
    plan = run_plan(sparse_plan, args, return_lse=True)
    check_against_naive(plan, args)


@pytest.mark.parametrize("kv_layout", ["padded", "varlen", "paged"])
@pytest.mark.parametrize("q_layout", ["padded", "cu", "token_to_req"])
def test_seq_lens_q_and_k(gen, sparse_plan, q_layout, kv_layout):
    args = make_case(gen, q_layout, kv_layout, meta=torch.int64)
    cap = _capacity(args)
    args["seq_lens_q"] = torch.tensor([2, 0, 1])
    args["seq_lens_k"] = torch.tensor([cap - 3, 2, cap - 1])
    plan = run_plan(sparse_plan, args, return_lse=True)
    check_against_naive(plan, args)
    # Local index >= seq_lens_q: zero rows, LSE -inf. Padded query row 1 of request 0 is padded.
    if q_layout == "padded":
        assert torch.all(plan.out_result[0, 2] == 0)
        assert torch.all(plan.lse_result[0, 2] == -math.inf)
        assert torch.all(plan.lse_result[1] == -math.inf)


@pytest.mark.parametrize("kv_layout", ["padded", "varlen", "paged"])
@pytest.mark.parametrize("q_layout", ["padded", "cu"])
def test_query_positions_override(gen, sparse_plan, q_layout, kv_layout):
    """Explicit positions past seq_lens_k: ids in [seq_len_k, pos] are still masked."""
    args = make_case(gen, q_layout, kv_layout)
    lead = args["query"].shape[:-2]
    args["query_positions"] = torch.randint(0, _capacity(args), lead, generator=gen, dtype=torch.int32)
    args["seq_lens_k"] = torch.tensor([5, 1, 3], dtype=torch.int32)
    plan = run_plan(sparse_plan, args, return_lse=True)
    check_against_naive(plan, args)


def test_inferred_positions_are_bottom_right(gen, sparse_plan):
    """pos = seq_len_k - seq_len_q + i: the last query row sees the last key, the first does not."""
    args = make_case(gen, "padded", "padded", width=1)
    args["token_indices"] = torch.full((NUM_REQ, 3, 1), PADDED_S - 1, dtype=torch.int32)
    plan = run_plan(sparse_plan, args, return_lse=True)
    assert torch.all(torch.isfinite(plan.lse_result[:, 2]))
    assert torch.all(plan.lse_result[:, :2] == -math.inf)
    check_against_naive(plan, args)


@pytest.mark.parametrize(("hq", "hkv"), [(2, 2), (3, 1), (24, 2)])
def test_gqa_groups(gen, sparse_plan, hq, hkv):
    args = make_case(gen, "cu", "paged", hq=hq, hkv=hkv)
    plan = run_plan(sparse_plan, args, return_lse=True)
    check_against_naive(plan, args)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("q_layout", ["padded", "token_to_req"])
def test_dtypes(gen, sparse_plan, dtype, q_layout):
    args = make_case(gen, q_layout, "paged", dtype=dtype, dim=16)
    plan = run_plan(sparse_plan, args, return_lse=True)
    check_against_naive(plan, args)


@pytest.mark.parametrize("elementwise", [False, True])
@pytest.mark.parametrize("gate_dtype", ["query", "float32"])
@pytest.mark.parametrize("q_layout", ["padded", "cu"])
def test_gate(gen, sparse_plan, elementwise, gate_dtype, q_layout):
    args = make_case(gen, q_layout, "varlen", dtype=torch.bfloat16)
    shape = args["query"].shape if elementwise else args["query"].shape[:-1]
    dtype = args["query"].dtype if gate_dtype == "query" else torch.float32
    gate = (2 * torch.randn(shape, generator=gen)).to(dtype)
    plan = run_plan(sparse_plan, args, gate=gate)
    check_against_naive(plan, args, gate=gate)
    ungated = run_plan(sparse_plan, args)
    assert not torch.equal(plan.out_result, ungated.out_result)


def test_scale(gen, sparse_plan):
    args = make_case(gen, "padded", "padded")
    plan = run_plan(sparse_plan, args, scale=0.7, return_lse=True)
    check_against_naive(plan, args, scale=0.7)


def test_duplicates_count_twice(gen, sparse_plan):
    """Selecting token 0 twice and token 1 once weights v0 by 2/3 under equal scores."""
    query = torch.zeros(1, 1, 1, 4)
    key = torch.randn(1, 2, 1, 4, generator=gen)
    value = torch.randn(1, 2, 1, 4, generator=gen)
    ids = torch.tensor([[[0, 1, 0]]], dtype=torch.int32)
    plan = run_plan(sparse_plan, {"query": query, "key": key, "value": value, "token_indices": ids}, return_lse=True)
    expected = (2 * value[0, 0, 0] + value[0, 1, 0]) / 3
    torch.testing.assert_close(plan.out_result[0, 0, 0], expected)
    torch.testing.assert_close(plan.lse_result[0, 0, 0], torch.tensor(math.log(3.0)))


@pytest.mark.parametrize("kv_layout", ["padded", "varlen", "paged"])
def test_empty_selection(gen, sparse_plan, kv_layout):
    args = make_case(gen, "cu", kv_layout)
    args["token_indices"][:2] = -1  # no selected ids
    args["token_indices"][2] = 10**6  # only ids past every length
    plan = run_plan(sparse_plan, args, return_lse=True)
    check_against_naive(plan, args)
    assert torch.all(plan.out_result[:3] == 0)
    assert torch.all(plan.lse_result[:3] == -math.inf)


@pytest.mark.parametrize("physical", [False, True])
def test_zero_width_selection(gen, sparse_plan, physical):
    args = make_case(gen, "cu", "varlen", width=0)
    if physical:
        args = {"query": args["query"], "key": args["key"], "value": args["value"]}
        args["selected_kv_indices"] = torch.zeros(5, 0, dtype=torch.int32)
    plan = run_plan(sparse_plan, args, return_lse=True)
    assert torch.all(plan.out_result == 0)
    assert torch.all(plan.lse_result == -math.inf)


def test_masked_slots_and_empty_rows_ignore_nonfinite_values(gen, sparse_plan):
    """Masked slots read a clamped cache row full of NaN; neither it nor a NaN gate on an empty row leaks."""
    args = make_case(gen, "padded", "paged")
    args["key"][0] = math.nan
    args["value"][0] = math.nan
    args["block_table"] = torch.tensor([[0, -1, 1], [0, -1, 2], [0, -1, 3]], dtype=torch.int32)
    choices = torch.tensor([-1, 4, 5, 8, 9, 11])
    args["token_indices"] = choices[torch.randint(0, 6, (NUM_REQ, 3, 10), generator=gen)].to(torch.int32)
    args["token_indices"][:, :, 0] = 8
    args["token_indices"][0, 0] = -1
    gate = torch.randn(args["query"].shape[:-1], generator=gen)
    gate[0, 0] = math.nan
    plan = run_plan(sparse_plan, args, gate=gate, return_lse=True)
    assert torch.all(plan.out_result[0, 0] == 0)
    assert torch.all(plan.lse_result[0, 0] == -math.inf)
    assert torch.isfinite(plan.out_result).all()
    check_against_naive(plan, args, gate=gate)


def test_physical(gen, sparse_plan):
    base = make_case(gen, "cu", "varlen", dtype=torch.bfloat16)
    num_tokens = base["key"].shape[0]
    ids = torch.randint(-2, num_tokens + 3, (5, 9), generator=gen)
    ids[:, 1] = ids[:, 0]
    ids[4] = -1  # empty row
    args = {
        "query": base["query"],
        "key": base["key"],
        "value": base["value"],
        "selected_kv_indices": ids.to(torch.int32),
    }
    plan = run_plan(sparse_plan, args, return_lse=True)
    check_against_naive(plan, args)
    assert torch.all(plan.out_result[4] == 0)
    assert torch.all(plan.lse_result[4] == -math.inf)


def test_physical_has_no_causal_filter(gen, sparse_plan):
    """Ids far beyond any causal position are used on the physical path."""
    query = torch.randn(2, 2, 8, generator=gen)
    key = torch.randn(50, 1, 8, generator=gen)
    value = torch.randn(50, 1, 8, generator=gen)
    ids = torch.tensor([[49, 48], [47, 50]], dtype=torch.int32)
    plan = run_plan(
        sparse_plan, {"query": query, "key": key, "value": value, "selected_kv_indices": ids}, return_lse=True
    )
    torch.testing.assert_close(plan.out_result[1, 0], value[47, 0])
    assert torch.all(torch.isfinite(plan.lse_result))


def test_invalid_pages_masked(gen, sparse_plan):
    """Page -1, a page >= pages, and logical pages >= max_pages (seq_lens_k past capacity) are masked."""
    args = make_case(gen, "padded", "paged", width=12)
    cap = MAX_PAGES * PAGE_SIZE
    args["seq_lens_k"] = torch.full((NUM_REQ,), cap + 8, dtype=torch.int32)
    args["query_positions"] = torch.full((NUM_REQ, 3), cap + 8, dtype=torch.int32)
    ids = torch.arange(cap + 4, dtype=torch.int32)[torch.randperm(cap + 4, generator=gen)[:12]]
    args["token_indices"] = ids.expand(NUM_REQ, 3, 12).clone()
    plan = run_plan(sparse_plan, args, return_lse=True)
    check_against_naive(plan, args)


def test_strided_out_and_lse_views(gen, sparse_plan):
    args = make_case(gen, "padded", "paged", dtype=torch.float16)
    b, q, h, d = args["query"].shape
    # Batch/query axes stay collapsible (a zero-copy row view); heads and features are sliced.
    out_storage = torch.randn(b, q, h + 1, d + 3, generator=gen).half()
    lse_storage = torch.randn(b, q, h + 2, generator=gen)
    out_before, lse_before = out_storage.clone(), lse_storage.clone()
    out = out_storage[:, :, 1:, 2 : 2 + d]
    lse = lse_storage[:, :, 1 : 1 + h]
    plan = run_plan(sparse_plan, args, out=out, lse=lse)
    check_against_naive(plan, args)
    assert plan.out_result is out and plan.lse_result is lse
    expected_out, expected_lse = naive_sparse(**args)
    torch.testing.assert_close(out.double(), expected_out, atol=2e-3, rtol=2e-3)
    untouched = torch.ones_like(out_storage, dtype=torch.bool)
    untouched[:, :, 1:, 2 : 2 + d] = False
    assert torch.equal(out_storage[untouched], out_before[untouched])
    untouched = torch.ones_like(lse_storage, dtype=torch.bool)
    untouched[:, :, 1 : 1 + h] = False
    assert torch.equal(lse_storage[untouched], lse_before[untouched])
    assert torch.equal(torch.isinf(lse), torch.isinf(expected_lse))


@pytest.mark.parametrize("kv_layout", ["padded", "varlen", "paged"])
@pytest.mark.parametrize("sliced_axis", [1, -1])
def test_strided_kv_views(gen, sparse_plan, kv_layout, sliced_axis):
    """K/V views with storage offsets: slicing axis 1 keeps padded/paged leading axes unmergeable."""
    args = make_case(gen, "cu", kv_layout)
    for name in ("key", "value"):
        t = args[name]
        grow = [0] * t.dim()
        grow[sliced_axis] = 2
        big = torch.randn([s + g for s, g in zip(t.shape, grow)], generator=gen)
        view = big.narrow(sliced_axis % t.dim(), 1, t.shape[sliced_axis])
        view.copy_(t)
        args[name] = view
    plan = run_plan(sparse_plan, args, return_lse=True)
    check_against_naive(plan, args)


def test_hints_do_not_change_result(gen, sparse_plan):
    args = make_case(gen, "padded", "paged", width=11)
    plain = run_plan(sparse_plan, args, return_lse=True)
    blocks = torch.randint(-1, 3, (NUM_REQ, 3, 2), generator=gen, dtype=torch.int32)
    hinted = run_plan(sparse_plan, args, return_lse=True, block_indices=blocks, num_splits=3)
    assert torch.equal(plain.out_result, hinted.out_result)
    assert torch.equal(plain.lse_result, hinted.lse_result)


def test_chunked_rows_match_single_chunk(gen, sparse_plan, monkeypatch):
    args = make_case(gen, "token_to_req", "paged")
    whole = run_plan(sparse_plan, args, return_lse=True)
    monkeypatch.setattr(sparse_mod, "_CHUNK_BYTES", 1)
    chunked = run_plan(sparse_plan, args, return_lse=True)
    assert torch.equal(whole.out_result, chunked.out_result)
    assert torch.equal(whole.lse_result, chunked.lse_result)
    check_against_naive(chunked, args)


def test_without_lse_writes_only_out(gen, sparse_plan):
    args = make_case(gen, "cu", "padded")
    plan = run_plan(sparse_plan, args)
    assert plan.lse is None
    assert not torch.isnan(plan.out_result).any()
    check_against_naive(plan, args)


# ----------------------------------------------------------------------------------------
# Public CPU-research wrapper (validation by mate_core.plan_sparse_attention)
# ----------------------------------------------------------------------------------------


def _check_result(result, args, gate=None):
    out, lse = result
    expected_out, expected_lse = naive_sparse(**args, gate=gate)
    tol = TOL[args["query"].dtype]
    assert out.dtype == args["query"].dtype and out.shape == args["query"].shape
    assert lse.dtype == torch.float32 and lse.shape == args["query"].shape[:-1]
    torch.testing.assert_close(out.double(), expected_out, atol=tol, rtol=tol)
    assert torch.equal(torch.isinf(lse), torch.isinf(expected_lse))
    finite = torch.isfinite(expected_lse)
    torch.testing.assert_close(lse.double()[finite], expected_lse[finite], atol=tol, rtol=tol)
    assert expected_out.abs().sum() > 0


@pytest.mark.parametrize("kv_layout", ["padded", "varlen", "paged"])
@pytest.mark.parametrize("q_layout", ["padded", "cu", "token_to_req"])
def test_public_layouts(gen, q_layout, kv_layout):
    args = make_case(gen, q_layout, kv_layout, dtype=torch.bfloat16, hq=6, hkv=2)
    args["seq_lens_q"] = torch.tensor([2, 0, 2], dtype=torch.int32)
    gate = torch.randn(args["query"].shape[:-1], generator=gen)
    _check_result(qsa_sparse_attention(**args, gate=gate, return_lse=True), args, gate=gate)


def test_public_query_positions_and_seq_lens_k(gen):
    args = make_case(gen, "padded", "paged", dtype=torch.float16, meta=torch.int64)
    args["query_positions"] = torch.randint(0, MAX_PAGES * PAGE_SIZE, (NUM_REQ, 3), generator=gen)
    args["seq_lens_k"] = torch.tensor([10, 3, 12])
    _check_result(qsa_sparse_attention(**args, page_size=PAGE_SIZE, return_lse=True), args)


def test_public_physical_with_buffers(gen):
    base = make_case(gen, "cu", "varlen", dtype=torch.bfloat16)
    ids = torch.randint(-2, base["key"].shape[0] + 3, (5, 9), generator=gen, dtype=torch.int32)
    ids[2] = -1
    args = {"query": base["query"], "key": base["key"], "value": base["value"], "selected_kv_indices": ids}
    out = torch.full(base["query"].shape, math.nan, dtype=torch.bfloat16)
    lse = torch.full(base["query"].shape[:-1], math.nan)
    result = qsa_sparse_attention(**args, out=out, lse=lse)
    assert result is out  # lse= is written even without return_lse
    _check_result((out, lse), args)
    assert torch.all(out[2] == 0) and torch.all(lse[2] == -math.inf)


def test_public_out_is_returned_and_fully_written(gen):
    args = make_case(gen, "token_to_req", "paged", dtype=torch.float16)
    out = torch.full(args["query"].shape, math.nan, dtype=torch.float16)
    result, lse = qsa_sparse_attention(**args, out=out, return_lse=True)
    assert result is out
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    _check_result((out, lse), args)


def test_public_returns_tensor_without_lse(gen):
    args = make_case(gen, "padded", "padded")
    result = qsa_sparse_attention(**args, softmax_scale=0.5)
    assert isinstance(result, torch.Tensor)
    torch.testing.assert_close(result.double(), naive_sparse(**args, scale=0.5)[0], atol=1e-5, rtol=1e-5)


def test_public_block_hint_does_not_change_result(gen):
    args = make_case(gen, "padded", "paged", dtype=torch.bfloat16, width=11)
    blocks = torch.randint(-1, MAX_PAGES, (NUM_REQ, 3, 2), generator=gen, dtype=torch.int32)
    plain = qsa_sparse_attention(**args, return_lse=True)
    hinted = qsa_sparse_attention(
        **args, block_indices=blocks, num_splits=2, warp_specialized=True, assume_compact_blocks=True, return_lse=True
    )
    assert torch.equal(plain[0], hinted[0]) and torch.equal(plain[1], hinted[1])


def test_public_backend_must_be_reference(gen, rejected_backend):
    backend, error, match = rejected_backend
    args = make_case(gen, "padded", "padded")
    with pytest.raises(error, match=match.format(entry="qsa_sparse_attention")):
        qsa_sparse_attention(**args, backend=backend)


def test_public_validates(gen):
    args = make_case(gen, "padded", "padded")
    with pytest.raises(ValueError, match="softmax_scale"):
        qsa_sparse_attention(**args, scale=1.0, softmax_scale=1.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kv_layout", ["padded", "varlen", "paged"])
@pytest.mark.parametrize("q_layout", ["padded", "cu", "token_to_req"])
def test_public_on_cuda_matches_cpu(gen, q_layout, kv_layout):
    """The reference is device-agnostic: the same call on a CUDA device agrees with the CPU."""
    args = make_case(gen, q_layout, kv_layout, dtype=torch.bfloat16, hq=24, hkv=2, dim=64)
    gate = torch.randn(args["query"].shape, generator=gen)
    cpu_out, cpu_lse = qsa_sparse_attention(**args, gate=gate, return_lse=True)
    moved = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    out, lse = qsa_sparse_attention(**moved, gate=gate.cuda(), return_lse=True)
    assert out.device.type == "cuda" and lse.device.type == "cuda"
    torch.testing.assert_close(out.cpu().float(), cpu_out.float(), atol=1.6e-2, rtol=1.6e-2)
    torch.testing.assert_close(lse.cpu(), cpu_lse, atol=1e-4, rtol=1e-4)
    _check_result((out.cpu(), lse.cpu()), args, gate=gate)
