"""Hypothesis fuzzing of MQA metadata: the reference never crashes on valid input and keeps its invariants.

Each case is generated from a ground truth (which request and local index every row has),
then encoded as padded, ``cu_seqlens_q`` or ``token_to_req`` metadata; the expected ``-inf``
pattern is computed from that truth, not from the encoding.
"""

from __future__ import annotations

import math

import pytest
import torch

from mate_core import plan_indexer_score, plan_mqa_decode, plan_mqa_prefill
from mate_reference import indexer_score, mqa_decode, mqa_prefill

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

FUZZ = hypothesis.settings(max_examples=40, deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow])
DIM = 4
META = st.sampled_from([torch.int32, torch.int64])


def _run(planner, backend_fn, *args, **kwargs):
    plan = planner(*args, **kwargs, backend="reference")
    plan.out.fill_(math.nan)
    backend_fn(plan)
    return plan


def _check(got: torch.Tensor, visible: torch.Tensor) -> None:
    assert got.dtype == torch.float32 and got.shape == visible.shape
    assert torch.equal(torch.isneginf(got), ~visible)
    assert torch.isfinite(got[visible]).all()


def _randn(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- indexer score


@st.composite
def _rows(draw, requests: int):
    """(layout, per-row truth [(req | None, local)], metadata kwargs)."""
    layout = draw(st.sampled_from(["padded", "cu_seqlens_q", "token_to_req"]))
    meta = draw(META)
    if layout == "padded":
        q_len = draw(st.integers(0, 6))
        return layout, [(b, i) for b in range(requests) for i in range(q_len)], {"q_len": q_len}
    counts = draw(st.lists(st.integers(0, 5), min_size=requests, max_size=requests))
    truth = [(r, i) for r in range(requests) for i in range(counts[r])]
    if layout == "cu_seqlens_q":
        cu = torch.tensor([0, *torch.tensor(counts, dtype=torch.long).cumsum(0).tolist()], dtype=meta)
        return layout, truth, {"cu_seqlens_q": cu}
    # token_to_req: padded rows (ids outside [0, R)) anywhere between requests
    bad_ids = st.sampled_from([-1, -9, requests, requests + 4])
    rows, ids = [], []
    for r in range(requests + 1):
        for _ in range(draw(st.integers(0, 2))):
            rows.append((None, 0))
            ids.append(draw(bad_ids))
        if r < requests:
            rows += [(r, i) for i in range(counts[r])]
            ids += [r] * counts[r]
    return layout, rows, {"token_to_req": torch.tensor(ids, dtype=meta), "num_requests": requests}


@st.composite
def _keys(draw, requests: int):
    """(block_keys shape, kwargs, validity(req, j) -> bool, width)."""
    if not draw(st.booleans()):
        blocks = draw(st.integers(0, 6))
        return (requests, blocks, DIM), {}, (lambda r, j: True), blocks
    pages, page_size, max_pages = draw(st.integers(0, 4)), draw(st.integers(1, 5)), draw(st.integers(0, 3))
    table = [
        draw(st.lists(st.integers(-2, pages + 2), min_size=max_pages, max_size=max_pages)) for _ in range(requests)
    ]
    shape = (pages, page_size, 1, DIM) if draw(st.booleans()) else (pages, page_size, DIM)
    kwargs = {"block_table": torch.tensor(table, dtype=draw(META)).reshape(requests, max_pages)}

    def valid(r: int, j: int) -> bool:
        return 0 <= table[r][j // page_size] < pages

    return shape, kwargs, valid, max_pages * page_size


@FUZZ
@hypothesis.given(
    data=st.data(),
    requests=st.integers(0, 3),
    heads=st.integers(1, 3),
    block_size=st.integers(1, 5),
    seed=st.integers(0, 2**31),
)
def test_indexer_metadata_fuzz(data, requests, heads, block_size, seed):
    layout, truth, meta = data.draw(_rows(requests))
    keys_shape, key_kwargs, key_valid, width = data.draw(_keys(requests))
    q_len = meta.pop("q_len", None)
    q = _randn(seed, requests, q_len, heads, DIM) if layout == "padded" else _randn(seed, len(truth), heads, DIM)
    positions = data.draw(st.none() | st.lists(st.integers(-3, 30), min_size=len(truth), max_size=len(truth)))
    lens = data.draw(st.none() | st.lists(st.integers(0, 7), min_size=requests, max_size=requests))
    kwargs = {**meta, **key_kwargs, "block_size": block_size}
    if positions is not None:
        kwargs["query_positions"] = torch.tensor(positions, dtype=torch.long).reshape(q.shape[:-2])
    if lens is not None:
        kwargs["seq_lens_q"] = torch.tensor(lens, dtype=torch.int32)

    got = _run(plan_indexer_score, indexer_score, q, _randn(seed + 1, *keys_shape), **kwargs).out

    visible = torch.zeros(len(truth), width, dtype=torch.bool)
    for row, (req, local) in enumerate(truth):
        if req is None or (lens is not None and local >= lens[req]):
            continue
        pos = local if positions is None else positions[row]
        for j in range(width):
            visible[row, j] = (j + 1) * block_size - 1 <= pos and key_valid(req, j)
    _check(got, visible)


# --------------------------------------------------------------------------- prefill / decode


@FUZZ
@hypothesis.given(
    data=st.data(),
    rows=st.integers(0, 6),
    keys=st.integers(0, 7),
    heads=st.integers(1, 4),
    seed=st.integers(0, 2**31),
    meta=META,
)
def test_prefill_interval_fuzz(data, rows, keys, heads, seed, meta):
    starts = data.draw(st.lists(st.integers(-3, 10), min_size=rows, max_size=rows))
    ends = data.draw(st.lists(st.integers(-3, 10), min_size=rows, max_size=rows))
    k = _randn(seed + 1, keys, 1, DIM) if data.draw(st.booleans()) else _randn(seed + 1, keys, DIM)
    plan = _run(
        plan_mqa_prefill,
        mqa_prefill,
        _randn(seed, rows, heads, DIM),
        k,
        torch.tensor(starts, dtype=meta),
        torch.tensor(ends, dtype=meta),
    )
    j = torch.arange(keys)
    visible = (j >= torch.tensor(starts, dtype=torch.long)[:, None]) & (
        j < torch.tensor(ends, dtype=torch.long)[:, None]
    )
    _check(plan.out, visible.reshape(rows, keys))


@FUZZ
@hypothesis.given(
    data=st.data(),
    batch=st.integers(0, 3),
    pages=st.integers(0, 4),
    page_size=st.integers(1, 6),
    max_pages=st.integers(0, 3),
    length=st.integers(1, 20),
    seed=st.integers(0, 2**31),
    meta=META,
)
def test_decode_page_table_fuzz(data, batch, pages, page_size, max_pages, length, seed, meta):
    table = [
        data.draw(st.lists(st.integers(-2, pages + 2), min_size=max_pages, max_size=max_pages)) for _ in range(batch)
    ]
    lens = data.draw(st.lists(st.integers(0, 25), min_size=batch, max_size=batch))
    q = _randn(seed, 1, 1, 4, DIM).expand(batch, 1, 4, DIM) if data.draw(st.booleans()) else _randn(seed, batch, 4, DIM)
    cache = _randn(seed + 1, pages, page_size, *([1] if data.draw(st.booleans()) else []), DIM)
    plan = _run(
        plan_mqa_decode,
        mqa_decode,
        q,
        cache,
        torch.tensor(table, dtype=meta).reshape(batch, max_pages),
        torch.tensor(lens, dtype=meta),
        length,
    )
    visible = torch.zeros(batch, length, dtype=torch.bool)
    for b in range(batch):
        for j in range(min(lens[b], length)):
            visible[b, j] = j // page_size < max_pages and 0 <= table[b][j // page_size] < pages
    _check(plan.out, visible)
