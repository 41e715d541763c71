"""topk_blocks and expand_blocks against naive Python loops."""

from __future__ import annotations

import math

import pytest
import torch

from mate_core import MateTypeError, MateValueError
from mate_reference import expand_blocks, qsa_indexer_mqa_score, topk_blocks

NEG_INF = float("-inf")


def naive_topk(scores: torch.Tensor, k: int) -> torch.Tensor:
    rows = scores.reshape(math.prod(scores.shape[:-1]), scores.shape[-1]).tolist()
    out = []
    for row in rows:
        ranked = sorted((-s, j) for j, s in enumerate(row) if s == s and s != NEG_INF)  # s == s drops NaN
        ids = [j for _, j in ranked[:k]]
        out.append(ids + [-1] * (k - len(ids)))
    return torch.tensor(out, dtype=torch.int32).reshape(*scores.shape[:-1], k)


def naive_expand(blocks: torch.Tensor, positions: torch.Tensor, block_size: int, include_tail: bool) -> torch.Tensor:
    rows = blocks.reshape(-1, blocks.shape[-1]).tolist()
    out = []
    for row, p in zip(rows, positions.reshape(-1).tolist()):
        tokens = []
        for b in row:
            tokens += [b * block_size + t if b >= 0 else -1 for t in range(block_size)]
        if include_tail:
            tail = list(range(max(0, ((p + 1) // block_size) * block_size), p + 1))
            tokens += tail + [-1] * (block_size - 1 - len(tail))
        out.append(tokens)
    return torch.tensor(out, dtype=torch.int32).reshape(*blocks.shape[:-1], -1)


def _scores(gen, *shape, masked=0.3, nan=0.0):
    """Integer-valued scores (many ties) with some -inf and optional NaN."""
    s = torch.randint(-3, 4, shape, generator=gen).float()
    s[torch.rand(shape, generator=gen) < masked] = NEG_INF
    s[torch.rand(shape, generator=gen) < nan] = float("nan")
    return s


@pytest.mark.parametrize(("shape", "k"), [((5, 12), 4), ((2, 3, 9), 9), ((7, 6), 10), ((4, 8), 0), ((3, 0), 2)])
def test_topk_matches_naive(gen, shape, k):
    scores = _scores(gen, *shape, nan=0.1)
    got = topk_blocks(scores, k)
    assert got.dtype == torch.int32 and got.shape == (*shape[:-1], k)
    assert torch.equal(got, naive_topk(scores, k))


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_topk_dtypes_and_fully_masked_rows(gen, dtype):
    scores = _scores(gen, 6, 10).to(dtype)
    scores[2] = NEG_INF
    got = topk_blocks(scores, 5)
    assert torch.equal(got, naive_topk(scores.float(), 5)) and (got[2] == -1).all()


def test_topk_of_indexer_scores_selects_only_visible_blocks(gen):
    scores = qsa_indexer_mqa_score(torch.randn(2, 16, 4, 8, generator=gen), torch.randn(2, 4, 8, generator=gen))
    got = topk_blocks(scores, 3)
    visible = (torch.arange(16) + 1) // 4  # blocks visible at position p
    assert torch.equal((got >= 0).sum(-1), visible.clamp(max=3).expand(2, 16).int())


@pytest.mark.parametrize("block_size", [1, 2, 4, 5])
@pytest.mark.parametrize("include_tail", [True, False])
def test_expand_matches_naive(gen, block_size, include_tail):
    blocks = torch.randint(-1, 9, (3, 4, 6), generator=gen, dtype=torch.int32)
    positions = torch.randint(-6, 40, (3, 4), generator=gen)
    got = expand_blocks(blocks, positions, block_size, include_tail)
    width = 6 * block_size + (block_size - 1 if include_tail else 0)
    assert got.dtype == torch.int32 and got.shape == (3, 4, width)
    assert torch.equal(got, naive_expand(blocks, positions, block_size, include_tail))


def test_expand_canonical_2051_slots(gen):
    positions = torch.tensor([4 * 600 + 2, 4 * 512 - 1, 2])
    blocks = topk_blocks(torch.rand(3, 600, generator=gen).masked_fill(torch.arange(600) > 520, NEG_INF), 512)
    got = expand_blocks(blocks, positions)
    assert got.shape == (3, 2051)
    assert got[0, -3:].tolist() == [2400, 2401, 2402] and got[1, -3:].tolist() == [-1, -1, -1]
    assert got[2, -3:].tolist() == [0, 1, 2]
    assert torch.equal(got, naive_expand(blocks, positions, 4, True))


def test_expand_keeps_only_visible_tokens_for_visible_blocks(gen):
    q, k = torch.randn(1, 23, 4, 8, generator=gen), torch.randn(1, 6, 8, generator=gen)
    positions = torch.arange(23).view(1, 23)
    tokens = expand_blocks(topk_blocks(qsa_indexer_mqa_score(q, k), 6), positions)
    assert ((tokens <= positions[..., None]) | (tokens == -1)).all()
    # every visible token 0..p appears exactly once (all blocks were kept)
    for p in range(23):
        row = tokens[0, p]
        assert sorted(row[row >= 0].tolist()) == list(range(p + 1))


@pytest.mark.parametrize(
    ("call", "exc", "name"),
    [
        (lambda: topk_blocks(torch.zeros(3, 4, dtype=torch.int32), 2), MateTypeError, "scores"),
        (lambda: topk_blocks(torch.zeros(3, 4), -1), MateValueError, "k"),
        (lambda: topk_blocks(torch.zeros(3, 4), 2.0), MateTypeError, "k"),
        (lambda: expand_blocks(torch.zeros(3, 4), torch.zeros(3, dtype=torch.int32)), MateTypeError, "block_indices"),
        (
            lambda: expand_blocks(torch.zeros(3, 4, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)),
            MateValueError,
            "query_positions",
        ),
        (lambda: expand_blocks(torch.zeros(3, 4, dtype=torch.int32), torch.zeros(3)), MateTypeError, "query_positions"),
        (
            lambda: expand_blocks(torch.zeros(3, 4, dtype=torch.int32), torch.zeros(3, dtype=torch.int32), 0),
            MateValueError,
            "block_size",
        ),
        (
            lambda: expand_blocks(torch.zeros(3, 4, dtype=torch.int32), torch.zeros(3, dtype=torch.int32), 4, 1),
            MateTypeError,
            "include_tail",
        ),
    ],
)
def test_helpers_reject_bad_arguments(call, exc, name):
    with pytest.raises(exc, match=rf"^{name}: "):
        call()
