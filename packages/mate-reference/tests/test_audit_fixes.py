"""Audit findings F6 (expand_blocks int32 range), F7 (indexer on meta tensors) and F9 (helper messages)."""

from __future__ import annotations

import hypothesis
import pytest
import torch
from hypothesis import strategies as st

from mate_core import MateTypeError, MateValueError
from mate_reference import expand_blocks, qsa_indexer_mqa_score, qsa_sparse_attention, topk_blocks

INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def naive_expand(blocks: list[list[int]], positions: list[int], block_size: int, include_tail: bool) -> list:
    """Python-int expansion: every token id outside [0, 2**31 - 1] is -1."""

    def keep(t: int) -> int:
        return t if 0 <= t <= INT32_MAX else -1

    out = []
    for row, p in zip(blocks, positions):
        tokens = [keep(b * block_size + o) if b >= 0 else -1 for b in row for o in range(block_size)]
        if include_tail and block_size > 1:
            start = ((p + 1) // block_size) * block_size
            tokens += [keep(start + o) if start + o <= p else -1 for o in range(block_size - 1)]
        out.append(tokens)
    return out


# --------------------------------------------------------------------------- F6: int32 range


def test_expand_int64_ids_past_int32_become_padding():
    # Block 2**30 is tokens 2**32 .. 2**32 + 3; the int32 cast used to wrap them onto 0..3.
    got = expand_blocks(torch.tensor([[2**30, -1]]), torch.tensor([2**32 + 5]))
    assert got.dtype == torch.int32
    assert got.tolist() == [[-1] * 11]


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_expand_int32_boundary(dtype):
    last = INT32_MAX // 4  # block 536870911 holds tokens 2**31 - 4 .. 2**31 - 1, the last valid ones
    blocks = torch.tensor([[last, last + 1, 3]], dtype=dtype)
    got = expand_blocks(blocks, torch.tensor([INT32_MAX - 1], dtype=dtype))
    assert got.tolist() == [[
        INT32_MAX - 3, INT32_MAX - 2, INT32_MAX - 1, INT32_MAX,  # last block fits exactly
        -1, -1, -1, -1,  # the next block would start at 2**31 (it wrapped to -2**31 before)
        12, 13, 14, 15,
        INT32_MAX - 3, INT32_MAX - 2, INT32_MAX - 1,  # tail of p = 2**31 - 2
    ]]  # fmt: skip


def test_expand_partial_block_past_int32():
    # block_size 3: block 715827882 covers 2**31 - 2 .. 2**31: only its last token is past int32.
    block = INT32_MAX // 3
    got = expand_blocks(torch.tensor([[block]]), torch.tensor([2**31 + 1]), block_size=3)
    assert got.tolist() == [[INT32_MAX - 1, INT32_MAX, -1, -1, -1]]  # tail 2**31 .. 2**31 + 1 is past int32 too


def test_expand_extreme_int64_values_do_not_wrap():
    blocks = torch.tensor([[2**62, INT64_MAX, INT64_MIN, 2**61 + 1]])
    for p in (INT64_MAX, INT64_MIN, 2**62 + 1):
        got = expand_blocks(blocks, torch.tensor([p]), block_size=4)
        assert (got == -1).all(), (p, got)


_BOUNDARY = [0, 1, INT32_MAX // 4, INT32_MAX // 3, INT32_MAX - 1, INT32_MAX, 2**31, 2**32, 2**62, INT64_MAX, INT64_MIN]


def _int64_values():
    near = st.sampled_from(_BOUNDARY).flatmap(lambda v: st.integers(max(INT64_MIN, v - 6), min(INT64_MAX, v + 6)))
    return st.integers(-8, 64) | near | st.integers(INT64_MIN, INT64_MAX)


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(
    data=st.data(),
    rows=st.integers(1, 3),
    k=st.integers(1, 4),
    block_size=st.integers(1, 6),
    include_tail=st.booleans(),
)
def test_expand_matches_python_ints(data, rows, k, block_size, include_tail):
    blocks = data.draw(st.lists(st.lists(_int64_values(), min_size=k, max_size=k), min_size=rows, max_size=rows))
    positions = data.draw(st.lists(_int64_values(), min_size=rows, max_size=rows))
    got = expand_blocks(
        torch.tensor(blocks, dtype=torch.int64), torch.tensor(positions, dtype=torch.int64), block_size, include_tail
    )
    assert got.dtype == torch.int32
    assert got.tolist() == naive_expand(blocks, positions, block_size, include_tail)


def test_expand_reads_no_values():
    # The range check is elementwise on the device: meta tensors (no data) work.
    got = expand_blocks(
        torch.empty(2, 3, 512, dtype=torch.int64, device="meta"), torch.empty(2, 3, dtype=torch.int64, device="meta")
    )
    assert got.device.type == "meta" and got.shape == (2, 3, 2051) and got.dtype == torch.int32


def test_expand_documents_the_int32_range():
    assert "Token ids past int32" in expand_blocks.__doc__ and "``-1``" in expand_blocks.__doc__


# --------------------------------------------------------------------------- F7: meta tensors


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device="meta")


@pytest.mark.parametrize(
    ("args", "kwargs", "shape"),
    [
        ((_meta(2, 8, 4, 128), _meta(2, 3, 128)), {}, (2, 8, 3)),
        (
            (_meta(2, 8, 4, 128), _meta(2, 3, 128)),
            {"query_positions": _meta(2, 8, dtype=torch.int64), "seq_lens_q": _meta(2, dtype=torch.int32)},
            (2, 8, 3),
        ),
        ((_meta(7, 4, 16), _meta(3, 5, 16)), {"cu_seqlens_q": _meta(4, dtype=torch.int32)}, (7, 5)),
        (
            (_meta(7, 4, 16), _meta(3, 5, 16)),
            {
                "token_to_req": _meta(7, dtype=torch.int64),
                "num_requests": 3,
                "seq_lens_q": _meta(3, dtype=torch.int64),
                "query_positions": _meta(7, dtype=torch.int32),
            },
            (7, 5),
        ),
        (
            (_meta(7, 4, 16), _meta(6, 4, 1, 16)),
            {
                "block_table": _meta(2, 3, dtype=torch.int32),
                "token_to_req": _meta(7, dtype=torch.int32),
                "num_requests": 2,
            },
            (7, 12),
        ),
        ((_meta(2, 5, 4, 16), _meta(6, 4, 16)), {"block_table": _meta(2, 3, dtype=torch.int64)}, (2, 5, 12)),
    ],
    ids=["padded", "padded-positions-lens", "cu_seqlens_q", "token_to_req", "paged-token_to_req", "paged-padded"],
)
def test_indexer_on_meta_returns_meta(args, kwargs, shape):
    got = qsa_indexer_mqa_score(*args, **kwargs)
    assert got.device.type == "meta" and got.dtype == torch.float32 and got.shape == shape


def test_indexer_padded_split_equals_varlen_grouping_bitwise(gen):
    # The padded path scores each request's rows with a static split, the varlen paths group
    # rows by request: the same rows against the same keys, so the results are bitwise equal.
    batch, q_len, blocks = 3, 11, 5
    q, k = torch.randn(batch, q_len, 4, 16, generator=gen), torch.randn(batch, blocks, 16, generator=gen)
    pos = torch.randint(-2, 4 * blocks + 2, (batch, q_len), generator=gen)
    padded = qsa_indexer_mqa_score(q, k, query_positions=pos)
    flat, flat_pos = q.reshape(batch * q_len, 4, 16), pos.reshape(-1)
    cu = torch.arange(0, batch * q_len + 1, q_len)
    by_cu = qsa_indexer_mqa_score(flat, k, cu_seqlens_q=cu, query_positions=flat_pos)
    t2r = torch.arange(batch).repeat_interleave(q_len)
    by_t2r = qsa_indexer_mqa_score(flat, k, token_to_req=t2r, num_requests=batch, query_positions=flat_pos)
    assert torch.isfinite(padded).any() and torch.isneginf(padded).any()
    assert torch.equal(padded.reshape(batch * q_len, blocks), by_cu) and torch.equal(by_cu, by_t2r)


def test_indexer_token_to_req_local_index_ignores_padded_rows(gen):
    # Rows of no request (ids outside [0, R)) must not shift the first row of any request.
    t2r = torch.tensor([5, 1, 1, -1, 0, 0, 0, 9])
    q, k = torch.randn(8, 2, 8, generator=gen), torch.randn(2, 3, 8, generator=gen)
    got = qsa_indexer_mqa_score(q, k, token_to_req=t2r, num_requests=2, block_size=1)
    assert torch.isneginf(got[[0, 3, 7]]).all()
    # local index = row - first row of the request: request 1 rows 1, 2 -> 0, 1; request 0 rows 4..6 -> 0..2
    visible = ~torch.isneginf(got)
    assert visible.sum(-1).tolist() == [0, 1, 2, 0, 1, 2, 3, 0]


def test_rows_outside_cu_seqlens_are_padded(gen):
    # Request b owns rows cu[b]:cu[b+1]; rows before cu[0] or from cu[R] on belong to no request.
    # The indexer scores them -inf; sparse attention gives zeros and LSE -inf. The extra rows
    # copy a real row's data, so only the row rule can tell them apart.
    q, k = torch.randn(5, 2, 8, generator=gen), torch.randn(2, 3, 8, generator=gen)
    q = torch.cat([q[:1], q[:1], q, q[-1:]])  # rows 0-1 before cu[0] = 2, row 7 at cu[R] = 7
    got = qsa_indexer_mqa_score(q, k, cu_seqlens_q=torch.tensor([2, 4, 7]), block_size=1)
    assert torch.isneginf(got[[0, 1, 7]]).all() and torch.isfinite(got[2:7]).any()
    unshifted = qsa_indexer_mqa_score(q[2:7], k, cu_seqlens_q=torch.tensor([0, 2, 5]), block_size=1)
    assert torch.equal(got[2:7], unshifted)

    query = torch.randn(5, 4, 16, generator=gen)
    query = torch.cat([query[:1], query[:1], query, query[-1:]])
    key, value = torch.randn(2, 8, 2, 16, generator=gen), torch.randn(2, 8, 2, 16, generator=gen)
    ids = torch.randint(0, 8, (8, 5), generator=gen)
    kw = {"key": key, "value": value, "return_lse": True}
    out, lse = qsa_sparse_attention(query, token_indices=ids, cu_seqlens_q=torch.tensor([2, 4, 7]), **kw)
    assert torch.equal(out[[0, 1, 7]], torch.zeros_like(out[[0, 1, 7]])) and torch.isneginf(lse[[0, 1, 7]]).all()
    want, want_lse = qsa_sparse_attention(
        query[2:7], token_indices=ids[2:7], cu_seqlens_q=torch.tensor([0, 2, 5]), **kw
    )
    assert torch.equal(out[2:7], want) and torch.equal(lse[2:7], want_lse) and torch.isfinite(want_lse).any()


# --------------------------------------------------------------------------- F9: messages


def test_expand_rank0_block_indices_names_block_indices():
    with pytest.raises(
        MateValueError,
        match=r"^block_indices: got shape \[\] \(rank 0\); expected .*rank >= 1 "
        r"\[\.\.\., NB\]",
    ):
        expand_blocks(torch.tensor(1, dtype=torch.int32), torch.tensor(1, dtype=torch.int32))


def test_expand_device_mismatch_names_block_indices_device():
    with pytest.raises(
        MateValueError,
        match=r"^query_positions: got a tensor on cpu; expected block_indices's "
        r"device \(meta\)$",
    ):
        expand_blocks(torch.zeros(1, 2, dtype=torch.int32, device="meta"), torch.zeros(1, dtype=torch.int32))


def test_expand_shape_mismatch_still_blames_query_positions():
    with pytest.raises(
        MateValueError,
        match=r"^query_positions: got shape \[4\]; expected block_indices.shape\[:-1\] "
        r"\(\[3\]\)",
    ):
        expand_blocks(torch.zeros(3, 2, dtype=torch.int32), torch.zeros(4, dtype=torch.int32))


def test_expand_dtype_message_lists_the_accepted_dtypes():
    with pytest.raises(
        MateTypeError,
        match=r"^block_indices: got dtype float32; expected an integer dtype \(int32 or "
        r"int64; also int8, int16, uint8\)$",
    ):
        expand_blocks(torch.zeros(3, 2), torch.zeros(3, dtype=torch.int32))


def test_topk_rank0_scores_is_a_value_error():
    with pytest.raises(MateValueError, match=r"^scores: got shape \[\] \(rank 0\); expected rank >= 1 \[\.\.\., N\]"):
        topk_blocks(torch.tensor(1.0), 2)


def test_topk_integer_scores_is_a_type_error():
    with pytest.raises(MateTypeError, match=r"^scores: got dtype int32; expected a floating-point dtype"):
        topk_blocks(torch.zeros(3, 4, dtype=torch.int32), 2)
    with pytest.raises(MateTypeError, match=r"^scores: got dtype int64"):
        topk_blocks(torch.tensor(3), 2)  # wrong dtype and rank: the dtype is reported first
