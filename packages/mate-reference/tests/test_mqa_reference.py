"""The MQA indexer reference against deliberately naive float64 loops.

Every backend call runs on a plan whose output was poisoned with NaN, so an element the
reference forgets to write shows up. ``-inf`` positions must match exactly.
"""

from __future__ import annotations

import math

import pytest
import torch

import mate_reference
from mate_core import plan_indexer_score, plan_mqa_decode, plan_mqa_prefill
from mate_reference import indexer_score, mqa_decode, mqa_prefill

NEG_INF = float("-inf")
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


# --------------------------------------------------------------------------- naive loops


def _score(q_row: torch.Tensor, key: torch.Tensor, scale: float) -> float:
    """scale * sum_h relu(q[h] . key) in float64; q_row [H, D], key [D]."""
    return scale * sum(max(0.0, float(q_row[h].double() @ key.double())) for h in range(q_row.shape[0]))


def _row_requests(q_idx, cu_seqlens_q, token_to_req, num_requests):
    """[(request or None, local index)] per flattened row, by the agreed semantics."""
    if q_idx.dim() == 4:
        batch, q_len = q_idx.shape[:2]
        return [(b, i) for b in range(batch) for i in range(q_len)]
    rows = q_idx.shape[0]
    if cu_seqlens_q is not None:
        cu = cu_seqlens_q.tolist()
        found = []
        for row in range(rows):
            owners = [r for r in range(len(cu) - 1) if cu[r] <= row < cu[r + 1]]
            found.append((owners[0], row - cu[owners[0]]) if owners else (None, 0))
        return found
    ids = token_to_req.tolist()
    found = []
    for row, r in enumerate(ids):
        if 0 <= r < num_requests:
            found.append((r, row - ids.index(r)))
        else:
            found.append((None, 0))
    return found


def naive_indexer(
    q_idx,
    block_keys,
    *,
    block_table=None,
    cu_seqlens_q=None,
    token_to_req=None,
    num_requests=None,
    query_positions=None,
    seq_lens_q=None,
    block_size=4,
    scale,
):
    """Float64 scores [B, Q, W] / [total_q, W], one element at a time."""
    heads, dim = q_idx.shape[-2:]
    q = q_idx.reshape(-1, heads, dim)
    if block_table is None:
        width = block_keys.shape[1]
    else:
        cache = block_keys.reshape(block_keys.shape[0], block_keys.shape[1], dim)
        page_size = cache.shape[1]
        width = block_table.shape[1] * page_size
    owners = _row_requests(q_idx, cu_seqlens_q, token_to_req, num_requests)
    positions = None if query_positions is None else query_positions.reshape(-1).tolist()
    out = torch.full((q.shape[0], width), NEG_INF, dtype=torch.float64)
    for row, (req, local) in enumerate(owners):
        if req is None or (seq_lens_q is not None and local >= int(seq_lens_q[req])):
            continue
        pos = local if positions is None else positions[row]
        for j in range(width):
            if (j + 1) * block_size - 1 > pos:
                continue
            if block_table is None:
                key = block_keys[req, j]
            else:
                page = int(block_table[req, j // page_size])
                if not 0 <= page < cache.shape[0]:
                    continue
                key = cache[page, j % page_size]
            out[row, j] = _score(q[row], key, scale)
    lead = q_idx.shape[:2] if q_idx.dim() == 4 else q_idx.shape[:1]
    return out.reshape(*lead, width)


def naive_prefill(q, k, row_starts, row_ends, scale):
    keys = k.reshape(k.shape[0], -1)
    out = torch.full((q.shape[0], keys.shape[0]), NEG_INF, dtype=torch.float64)
    for r in range(q.shape[0]):
        for j in range(keys.shape[0]):
            if int(row_starts[r]) <= j < int(row_ends[r]):
                out[r, j] = _score(q[r], keys[j], scale)
    return out


def naive_decode(q, k_cache, page_table, context_lens, max_model_len, scale):
    heads, dim = q.shape[-2:]
    q = q.reshape(q.shape[0], heads, dim)
    cache = k_cache.reshape(k_cache.shape[0], k_cache.shape[1], dim)
    page_size, max_pages = cache.shape[1], page_table.shape[1]
    out = torch.full((q.shape[0], max_model_len), NEG_INF, dtype=torch.float64)
    for b in range(q.shape[0]):
        for j in range(max_model_len):
            if j >= int(context_lens[b]) or j // page_size >= max_pages:
                continue
            page = int(page_table[b, j // page_size])
            if 0 <= page < cache.shape[0]:
                out[b, j] = _score(q[b], cache[page, j % page_size], scale)
    return out


# --------------------------------------------------------------------------- helpers


def assert_scores(got: torch.Tensor, want: torch.Tensor) -> None:
    """FP32 result vs float64 naive: same shape, identical -inf pattern, close elsewhere."""
    got = got.cpu()
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert not torch.isnan(got).any(), "an output element was not written"
    assert torch.equal(torch.isneginf(got), torch.isneginf(want)), "-inf pattern differs"
    finite = ~torch.isneginf(want)
    assert torch.isfinite(got[finite]).all()
    torch.testing.assert_close(got[finite].double(), want[finite], rtol=1e-5, atol=1e-5)


def _run(planner, backend_fn, *args, **kwargs):
    plan = planner(*args, **kwargs, backend="reference")
    plan.out.fill_(math.nan)
    backend_fn(plan)
    return plan


def run_indexer(q_idx, block_keys, **kw):
    return _run(plan_indexer_score, indexer_score, q_idx, block_keys, **kw).result


def _resolved(scale=None, score_scale=None, dim=8):
    return scale if scale is not None else 1 / score_scale if score_scale is not None else 1 / math.sqrt(dim)


def randn(gen, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=gen).to(dtype)


def randint(gen, low, high, *shape, dtype=torch.int32):
    return torch.randint(low, high, shape, generator=gen).to(dtype)


# --------------------------------------------------------------------------- indexer score


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("batch", "q_len", "heads", "blocks", "block_size"),
    [(2, 9, 4, 3, 4), (1, 13, 3, 5, 3), (3, 4, 1, 6, 1), (2, 6, 2, 2, 7)],
)
def test_indexer_padded(gen, device, batch, q_len, heads, blocks, block_size):
    q, k = randn(gen, batch, q_len, heads, 8), randn(gen, batch, blocks, 8)
    got = run_indexer(q.to(device), k.to(device), block_size=block_size)
    assert_scores(got, naive_indexer(q, k, block_size=block_size, scale=_resolved()))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("scale", "score_scale"), [(None, None), (0.3, None), (None, 5.0)])
def test_indexer_dtypes_and_scales(gen, dtype, scale, score_scale):
    q, k = randn(gen, 2, 9, 4, 8, dtype=dtype), randn(gen, 2, 3, 8, dtype=dtype)
    got = run_indexer(q, k, scale=scale, score_scale=score_scale)
    assert_scores(got, naive_indexer(q, k, scale=_resolved(scale, score_scale)))


def test_indexer_positions_and_padded_rows(gen):
    q, k = randn(gen, 3, 6, 4, 8), randn(gen, 3, 5, 8)
    pos = randint(gen, -3, 25, 3, 6, dtype=torch.int64)
    lens = torch.tensor([0, 4, 9], dtype=torch.int32)
    got = run_indexer(q, k, query_positions=pos, seq_lens_q=lens)
    want = naive_indexer(q, k, query_positions=pos, seq_lens_q=lens, scale=_resolved())
    assert_scores(got, want)
    assert torch.isneginf(got[0]).all() and torch.isneginf(got[1, 4:]).all()


def test_indexer_sliced_padded_queries(gen):
    base = randn(gen, 2, 11, 4, 8)
    q, k = base[:, 3:9], randn(gen, 2, 4, 8)
    got = run_indexer(q, k, query_positions=torch.arange(12).view(2, 6) + 3)
    assert_scores(got, naive_indexer(q, k, query_positions=torch.arange(12).view(2, 6) + 3, scale=_resolved()))


@pytest.mark.parametrize("device", DEVICES)
def test_indexer_varlen_cu_seqlens_with_empty_requests(gen, device):
    cu = torch.tensor([0, 0, 5, 5, 13], dtype=torch.int32)
    q, k = randn(gen, 13, 4, 8), randn(gen, 4, 4, 8)
    lens = torch.tensor([2, 3, 0, 6])
    got = run_indexer(q.to(device), k.to(device), cu_seqlens_q=cu.to(device), seq_lens_q=lens.to(device))
    assert_scores(got, naive_indexer(q, k, cu_seqlens_q=cu, seq_lens_q=lens, scale=_resolved()))


def test_indexer_varlen_cu_seqlens_not_covering_rows(gen):
    # Caller error: cu_seqlens_q ends before the last row; those rows belong to no request.
    cu = torch.tensor([1, 4, 6])
    q, k = randn(gen, 8, 4, 8), randn(gen, 2, 3, 8)
    got = run_indexer(q, k, cu_seqlens_q=cu)
    assert_scores(got, naive_indexer(q, k, cu_seqlens_q=cu, scale=_resolved()))
    assert torch.isneginf(got[[0, 6, 7]]).all()


def test_indexer_varlen_token_to_req_with_padded_rows(gen):
    t2r = torch.tensor([-1, 0, 0, 0, 7, 2, 2, 2, 2, 2, -5, 1])
    q, k = randn(gen, 12, 4, 8), randn(gen, 3, 3, 8)
    pos = randint(gen, 0, 14, 12)
    for kw in ({}, {"query_positions": pos}):
        got = run_indexer(q, k, token_to_req=t2r, num_requests=3, **kw)
        assert_scores(got, naive_indexer(q, k, token_to_req=t2r, num_requests=3, scale=_resolved(), **kw))
        assert torch.isneginf(got[[0, 4, 10]]).all()


def test_indexer_zero_requests_and_zero_rows(gen):
    q = randn(gen, 4, 4, 8)
    got = run_indexer(q, randn(gen, 0, 3, 8), token_to_req=torch.zeros(4, dtype=torch.int32), num_requests=0)
    assert got.shape == (4, 3) and torch.isneginf(got).all()
    assert run_indexer(randn(gen, 2, 0, 4, 8), randn(gen, 2, 3, 8)).shape == (2, 0, 3)
    assert run_indexer(randn(gen, 2, 5, 4, 8), randn(gen, 2, 0, 8)).shape == (2, 5, 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("page_size", "head_axis"), [(1, False), (3, True), (4, True), (5, False)])
def test_indexer_paged_padded(gen, device, page_size, head_axis):
    pages, max_pages = 5, 4
    cache = randn(gen, pages, page_size, *([1] if head_axis else []), 8)
    table = torch.tensor([[2, -1, 0, 7], [4, 5, 1, 3]], dtype=torch.int32)  # -1 and >= pages masked
    q = randn(gen, 2, 4 * page_size * max_pages + 2, 4, 8)
    kw = {"block_table": table, "page_size": page_size if head_axis else None}
    got = run_indexer(q.to(device), cache.to(device), **{**kw, "block_table": table.to(device)})
    assert_scores(got, naive_indexer(q, cache, block_table=table, scale=_resolved()))


def test_indexer_paged_varlen_positions_block_size(gen):
    cache, table = randn(gen, 3, 4, 8), torch.tensor([[0, 2], [1, -1], [3, 2]], dtype=torch.int64)
    cu = torch.tensor([0, 3, 3, 9], dtype=torch.int64)
    q, pos = randn(gen, 9, 2, 8), randint(gen, 0, 30, 9)
    for block_size in (1, 2, 4):
        got = run_indexer(q, cache, block_table=table, cu_seqlens_q=cu, query_positions=pos, block_size=block_size)
        want = naive_indexer(
            q, cache, block_table=table, cu_seqlens_q=cu, query_positions=pos, block_size=block_size, scale=_resolved()
        )
        assert_scores(got, want)


def test_indexer_paged_with_no_pages(gen):
    got = run_indexer(randn(gen, 2, 8, 4, 8), randn(gen, 0, 4, 8), block_table=torch.full((2, 2), -1))
    assert got.shape == (2, 8, 8) and torch.isneginf(got).all()


# --------------------------------------------------------------------------- prefill


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k_head_axis", [False, True])
def test_prefill_intervals(gen, device, k_head_axis):
    rows, keys = 9, 7
    q, k = randn(gen, rows, 4, 8), randn(gen, keys, *([1] if k_head_axis else []), 8)
    # empty (start == end, start > end), beyond the keys (clamped), negative start, full, single key
    starts = torch.tensor([0, 3, 5, -2, 0, 6, 9, 2, 4], dtype=torch.int32)
    ends = torch.tensor([7, 3, 2, 3, 50, 7, 12, 3, 6], dtype=torch.int32)
    plan = _run(plan_mqa_prefill, mqa_prefill, q.to(device), k.to(device), starts.to(device), ends.to(device))
    want = naive_prefill(q, k, starts, ends, _resolved())
    assert_scores(plan.out, want)
    assert torch.isneginf(plan.out[[1, 2, 6]]).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_prefill_dtypes_and_positional_score_scale(gen, dtype):
    q, k = randn(gen, 5, 3, 8, dtype=dtype), randn(gen, 6, 8, dtype=dtype)
    starts, ends = randint(gen, 0, 3, 5, dtype=torch.int64), randint(gen, 2, 7, 5, dtype=torch.int64)
    got = mate_reference.qsa_mqa_prefill(q, k, starts, ends, 4.0)
    assert_scores(got, naive_prefill(q, k, starts, ends, 0.25))
    assert torch.equal(mate_reference.qsa_mqa(q, k, starts, ends, scale=0.25), got)


def test_prefill_empty_shapes(gen):
    none = torch.zeros(0, dtype=torch.int32)
    assert mate_reference.qsa_mqa_prefill(randn(gen, 0, 4, 8), randn(gen, 5, 8), none, none).shape == (0, 5)
    idx = torch.zeros(3, dtype=torch.int32)
    assert mate_reference.qsa_mqa_prefill(randn(gen, 3, 4, 8), randn(gen, 0, 8), idx, idx + 1).shape == (3, 0)


# --------------------------------------------------------------------------- decode


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("page_size", [1, 3, 8, 16])
def test_decode_page_sizes(gen, device, page_size):
    batch, pages, max_pages, length = 4, 6, 3, 3 * page_size + 5  # max_model_len past the page table
    q, cache = randn(gen, batch, 4, 8), randn(gen, pages, page_size, 1, 8)
    table = torch.tensor([[0, 1, 2], [5, -1, 3], [9, 4, -7], [2, 2, 0]], dtype=torch.int32)
    # beyond the page table, zero, inside a page, past max_model_len
    lens = torch.tensor([max_pages * page_size + 4, 0, page_size + 1, length + 9], dtype=torch.int32)
    plan = _run(plan_mqa_decode, mqa_decode, q.to(device), cache.to(device), table.to(device), lens.to(device), length)
    assert_scores(plan.out, naive_decode(q, cache, table, lens, length, _resolved()))
    assert torch.isneginf(plan.out[1]).all()


def test_decode_broadcast_q_and_rank4_q(gen):
    q = randn(gen, 1, 1, 4, 8).expand(3, 1, 4, 8)
    cache, table = randn(gen, 4, 5, 8), torch.tensor([[3, 0], [1, 1], [2, -1]], dtype=torch.int64)
    lens = torch.tensor([10, 7, 9])
    got = mate_reference.qsa_mqa_decode(q, cache, table, lens, 12, scale=0.5)
    assert_scores(got, naive_decode(q, cache, table, lens, 12, 0.5))
    assert torch.equal(mate_reference.qsa_mqa_decode(q, cache, table, lens, 12, 2.0), got)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decode_dtypes_short_max_model_len(gen, dtype):
    q, cache = randn(gen, 2, 4, 8, dtype=dtype), randn(gen, 3, 4, 1, 8, dtype=dtype)
    table, lens = torch.tensor([[1, 0, 2], [2, 1, 0]], dtype=torch.int32), torch.tensor([12, 5], dtype=torch.int32)
    for length in (1, 3, 6, 12, 20):  # shorter than, inside, and past the table
        plan = _run(plan_mqa_decode, mqa_decode, q, cache, table, lens, length)
        assert_scores(plan.out, naive_decode(q, cache, table, lens, length, _resolved()))


def test_decode_no_pages_and_empty_table(gen):
    q = randn(gen, 2, 4, 8)
    lens = torch.tensor([5, 5])
    empty_cache = mate_reference.qsa_mqa_decode(q, randn(gen, 0, 4, 8), torch.zeros(2, 2, dtype=torch.int32), lens, 8)
    empty_table = mate_reference.qsa_mqa_decode(q, randn(gen, 3, 4, 8), torch.zeros(2, 0, dtype=torch.int32), lens, 8)
    assert torch.isneginf(empty_cache).all() and torch.isneginf(empty_table).all()


# --------------------------------------------------------------------------- public API


def test_api_returns_plan_result_shapes(gen):
    q, k = randn(gen, 2, 9, 4, 8), randn(gen, 2, 3, 8)
    got = mate_reference.qsa_indexer_mqa_score(q, k, score_scale=2.0)
    assert got.shape == (2, 9, 3) and got.is_contiguous()
    assert_scores(got, naive_indexer(q, k, scale=0.5))


def test_api_validates(gen):
    from mate_core import MateValueError

    with pytest.raises(MateValueError, match="scale"):
        mate_reference.qsa_indexer_mqa_score(randn(gen, 2, 9, 4, 8), randn(gen, 2, 3, 8), scale=1.0, score_scale=1.0)


def test_public_backend_must_be_reference(gen, rejected_backend):
    """Like mate_reference.qsa_sparse_attention: backend defaults to, and only accepts, 'reference'."""
    backend, error, match = rejected_backend
    q, k = randn(gen, 3, 4, 8), randn(gen, 5, 8)
    idx = torch.zeros(3, dtype=torch.int32)
    calls = {
        "qsa_mqa_prefill": lambda b: mate_reference.qsa_mqa_prefill(q, k, idx, idx + 5, backend=b),
        "qsa_mqa_decode": lambda b: mate_reference.qsa_mqa_decode(
            q, randn(gen, 2, 4, 8), torch.zeros(3, 1, dtype=torch.int32), idx + 3, 8, backend=b
        ),
        "qsa_indexer_mqa_score": lambda b: mate_reference.qsa_indexer_mqa_score(
            randn(gen, 2, 3, 4, 8), randn(gen, 2, 2, 8), backend=b
        ),
    }
    for entry, call in calls.items():
        assert call("reference").dtype == torch.float32
        with pytest.raises(error, match=match.format(entry=entry)) as info:
            call(backend)
        if error is ValueError and backend == "tilelang":
            assert f"mate.{entry}" in str(info.value)
