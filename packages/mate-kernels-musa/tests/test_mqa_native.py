"""Native MQA kernels (sm_90a) against the FP32 reference on the same GPU.

Every check plans the call through ``mate_core.plan_*`` (tilelang and reference plans of
the same inputs), poisons the native output with NaN, runs both backends and compares:
identical ``-inf`` pattern, no NaN left, relative L2 error < 1e-2 on the finite scores, as a whole
and in each row.
Inputs are fresh random normals (never zeros); metadata covers ragged and empty intervals,
rows past the last key, -1 and out-of-range pages, sliced views and broadcast queries.
"""

from __future__ import annotations

import mate_kernels_musa_tests_sparse_cases as cases  # registered by conftest.py (rel_l2_rows)
import pytest
import torch

import mate_kernels_musa as native
from mate_core import LayoutError, plan_indexer_score, plan_mqa_decode, plan_mqa_prefill
from mate_kernels_musa import mqa_launch, mqa_score_kernel

pytestmark = pytest.mark.gpu

DTYPES = [torch.bfloat16, torch.float16]
H, D = 4, 128


def _reference():
    # mate-reference is not a dependency of this package's CPU session: import lazily.
    import mate_reference

    return mate_reference


def _randn(gen: torch.Generator, *shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, generator=gen).to(dtype).cuda()


def assert_scores_match(got: torch.Tensor, want: torch.Tensor) -> None:
    """Same -inf pattern, nothing unwritten, relative L2 error < 1e-2 on the finite entries, as a
    whole and in each row (last axis: one query row's keys), so that one wrong row of a large
    output cannot hide in the total."""
    assert got.shape == want.shape
    assert not torch.isnan(got).any(), "unwritten (NaN-poisoned) or NaN scores"
    got_inf, want_inf = torch.isneginf(got), torch.isneginf(want)
    assert torch.equal(got_inf, want_inf), f"-inf pattern differs at {(got_inf != want_inf).sum().item()} entries"
    finite = ~want_inf
    if finite.any():
        g, w = got[finite].double(), want[finite].double()
        err = (torch.linalg.vector_norm(g - w) / torch.linalg.vector_norm(w).clamp_min(1e-30)).item()
        assert err < 1e-2, f"relative L2 error {err:.3g}"
        zero = torch.zeros((), dtype=got.dtype, device=got.device)
        row_err = cases.rel_l2_rows(torch.where(finite, got, zero), torch.where(finite, want, zero))
        assert row_err < 1e-2, f"relative L2 error {row_err:.3g} in one row"


def _run_both(plan_fn, backend_fn: str, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Run native and reference backends on plans of the same call; return (native, reference)."""
    plan = plan_fn(*args, **kwargs)
    out = plan.result if hasattr(plan, "result") else plan.out
    out.fill_(float("nan"))
    getattr(native, backend_fn)(plan)
    ref_plan = plan_fn(*args, **kwargs, backend="reference")
    getattr(_reference(), backend_fn)(ref_plan)
    ref = ref_plan.result if hasattr(ref_plan, "result") else ref_plan.out
    torch.cuda.synchronize()
    return out, ref


# --------------------------------------------------------------------------- prefill


def _intervals(gen: torch.Generator, rows: int, keys: int, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    if kind == "causal":
        pos = torch.arange(rows) + max(4 * keys - rows, 0)
        return torch.zeros(rows, dtype=torch.int32), ((pos + 1) // 4).to(torch.int32)
    if kind == "prefix":  # every row ends within the first 200 keys: later key chunks are blind
        return torch.zeros(rows, dtype=torch.int32), torch.randint(0, 200, (rows,), generator=gen, dtype=torch.int32)
    if kind == "stretch":
        # Row r sees [0, r * keys / rows), so early row blocks see one key chunk and late ones
        # all; rows 0..129 and 448..575 see nothing (with 950 rows: row blocks 0, 1, 7 and 8 are
        # empty, 7 is the middle of 15 and pairs with itself, 8 pairs with the partly seen 6).
        ends = torch.arange(rows) * keys // rows
        ends[:130] = 0
        ends[448:576] = 0
        return torch.zeros(rows, dtype=torch.int32), ends.to(torch.int32)
    # Ragged: some empty (start >= end), some negative starts, ends past the last key.
    a = torch.randint(-8, keys + 8, (rows,), generator=gen)
    b = torch.randint(-8, keys + 16, (rows,), generator=gen)
    return a.to(torch.int32), b.to(torch.int32)


PREFILL_CASES = [
    # rows, keys, interval kind
    (1, 1, "ragged"),
    (5, 3, "ragged"),
    (200, 1000, "ragged"),
    (333, 129, "causal"),
    (64, 65536, "ragged"),
    (700, 4100, "causal"),
    (2100, 520, "causal"),  # a whole causal prompt (rows >= 4 * keys): the launcher's causal schedule
]


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize(("rows", "keys", "kind"), PREFILL_CASES)
def test_prefill_matches_reference(gen, dtype, rows, keys, kind) -> None:
    q = _randn(gen, rows, H, D, dtype=dtype)
    k = _randn(gen, keys, D, dtype=dtype)
    starts, ends = (t.cuda() for t in _intervals(gen, rows, keys, kind))
    got, want = _run_both(plan_mqa_prefill, "mqa_prefill", q, k, starts, ends, scale=0.37)
    assert_scores_match(got, want)


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
def test_prefill_sliced_views(gen, dtype) -> None:
    """Storage offsets and padded outer strides (vector-rule compliant), [keys, 1, D] keys."""
    rows, keys = 150, 777
    q_store = _randn(gen, rows + 3, H + 2, D + 8, dtype=dtype)
    q = q_store[2 : 2 + rows, 1 : 1 + H, 8 : 8 + D]  # offset 2*(6*136) + 136 + 8 elements
    k_store = _randn(gen, keys + 1, 1, 2 * D, dtype=dtype)
    k = k_store[1:, :, D:]
    starts_store = torch.randint(0, keys, (2 * rows,), generator=gen, dtype=torch.int32).cuda()
    starts = starts_store[::2]  # strided metadata
    ends = torch.randint(0, keys + 5, (rows,), generator=gen, dtype=torch.int32).cuda()
    got, want = _run_both(plan_mqa_prefill, "mqa_prefill", q, k, starts, ends, score_scale=3.0)
    assert_scores_match(got, want)


VARIANT_CASES = [
    (200, 1000, "ragged"),  # keys % 4 == 0: bulk-tensor stores; empty rows (no whole tiles)
    (333, 129, "causal"),  # plain stores, partial tiles on both axes
    (700, 4100, "causal"),  # several key chunks per row block; whole tiles; trim to a quarter chunk
    (64, 2000, "causal"),  # trim to half a chunk (64 tiles per CTA), then -inf tiles
    (96, 9000, "prefix"),  # CTAs that see none of their keys (bulk-store -inf stream)
    (96, 9001, "prefix"),  # the same with plain stores
    (950, 5000, "stretch"),  # -inf chunks spread over the computing CTAs of row-block pairs
    (2100, 520, "causal"),  # whole and partial blind tiles of a causal prompt (unguarded stores)
]


BULK_CASES = [c for c in VARIANT_CASES if c[1] % 4 == 0]
PLAIN_CASES = [c for c in VARIANT_CASES if c[1] % 4]


def _plain_variants() -> list[tuple]:
    """The distinct (tiles, schedule) the plain-store path compiles: it runs every keys-on-M
    schedule as ``Schedule()`` (rows on M), so those variants would only repeat one kernel."""
    effective = {}
    for tiles, schedule in mqa_score_kernel.VARIANTS:
        plain = mqa_score_kernel.Schedule() if schedule.keys_on_m else schedule
        effective.setdefault((tiles, plain), (tiles, plain))
    return list(effective)


PLAIN_VARIANTS = _plain_variants()


def _check_variant(gen, tiles, schedule, rows, keys, kind, dtype, tma_out: bool) -> None:
    # The launcher compiles exactly the requested schedule (no silent fallback to another one).
    assert mqa_launch.score_consts(dtype, tma_out, tiles, schedule) == (dtype, *tiles, tma_out, *schedule)
    q = _randn(gen, rows, H, D, dtype=dtype)
    k = _randn(gen, keys, D, dtype=dtype)
    starts, ends = (t.cuda() for t in _intervals(gen, rows, keys, kind))
    plan = plan_mqa_prefill(q, k, starts, ends, scale=0.37)
    plan.out.fill_(float("nan"))
    mqa_launch.launch_score(q[None], k[None], starts[None], ends[None], plan.out[None], 0.37, tiles, schedule)
    ref = plan_mqa_prefill(q, k, starts, ends, scale=0.37, backend="reference")
    _reference().mqa_prefill(ref)
    torch.cuda.synchronize()
    assert_scores_match(plan.out, ref.out)


@pytest.mark.parametrize(("rows", "keys", "kind"), BULK_CASES)
@pytest.mark.parametrize(
    ("tiles", "schedule"),
    mqa_score_kernel.VARIANTS,
    ids=[mqa_score_kernel.variant_label(*v) for v in mqa_score_kernel.VARIANTS],
)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
def test_score_variants_match_reference(gen, tiles, schedule, rows, keys, kind, dtype) -> None:
    """Every compiled schedule of the score kernel (not only the default) against the reference,
    on the bulk-store path (keys % 4 == 0)."""
    _check_variant(gen, tiles, schedule, rows, keys, kind, dtype, tma_out=True)


@pytest.mark.parametrize(("rows", "keys", "kind"), PLAIN_CASES)
@pytest.mark.parametrize(
    ("tiles", "schedule"), PLAIN_VARIANTS, ids=[mqa_score_kernel.variant_label(*v) for v in PLAIN_VARIANTS]
)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
def test_plain_store_variants_match_reference(gen, tiles, schedule, rows, keys, kind, dtype) -> None:
    """Each distinct kernel of the plain-store path (keys % 4 != 0) against the reference."""
    _check_variant(gen, tiles, schedule, rows, keys, kind, dtype, tma_out=False)


def test_prefill_layout_violation_raises(gen) -> None:
    q_store = _randn(gen, 10 * H * D + 1, dtype=torch.bfloat16)
    q = q_store[1:].view(10, H, D)  # data_ptr 2 bytes past a 16-byte boundary
    k = _randn(gen, 20, D, dtype=torch.bfloat16)
    meta = torch.zeros(10, dtype=torch.int32, device="cuda")
    with pytest.raises(LayoutError, match="vector loads require unit feature stride and 16-byte alignment"):
        plan_mqa_prefill(q, k, meta, meta)


# --------------------------------------------------------------------------- indexer score


INDEXER_CASES = [
    # B, Q, N_B, with query_positions, with seq_lens_q
    (1, 1, 1, False, False),
    (3, 37, 50, False, False),
    (2, 100, 9, False, True),  # rows beyond the last block, padded rows
    (4, 70, 300, True, True),
    (2, 300, 4400, True, True),  # several key chunks: the spread -inf stores across requests
    (2, 600, 148, True, True),  # rows >= 4 * keys: the causal schedule across requests
]


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize(("batch", "q_len", "blocks", "with_pos", "with_lens"), INDEXER_CASES)
def test_indexer_score_matches_reference(gen, dtype, batch, q_len, blocks, with_pos, with_lens) -> None:
    q = _randn(gen, batch, q_len, H, D, dtype=dtype)
    k = _randn(gen, batch, blocks, D, dtype=dtype)
    kwargs = {}
    if with_pos:
        kwargs["query_positions"] = torch.randint(
            -3, 4 * blocks + 8, (batch, q_len), generator=gen, dtype=torch.int32
        ).cuda()
    if with_lens:
        kwargs["seq_lens_q"] = torch.randint(0, q_len + 1, (batch,), generator=gen, dtype=torch.int32).cuda()
    got, want = _run_both(plan_indexer_score, "indexer_score", q, k, **kwargs)
    assert_scores_match(got, want)


def test_indexer_score_sliced_views(gen) -> None:
    batch, q_len, blocks = 2, 33, 40
    q = _randn(gen, batch, q_len + 1, H, D + 16, dtype=torch.bfloat16)[:, 1:, :, 16:]
    k = _randn(gen, batch, blocks * 2, D, dtype=torch.bfloat16)[:, ::2]
    got, want = _run_both(plan_indexer_score, "indexer_score", q, k, scale=0.11)
    assert_scores_match(got, want)
    # [B, Q] positions sliced from a wider table: no [rows] view without a copy.
    pos = torch.randint(0, 4 * blocks + 8, (batch, q_len + 5), generator=gen, dtype=torch.int32).cuda()[
        :, 2 : q_len + 2
    ]
    got, want = _run_both(plan_indexer_score, "indexer_score", q, k, query_positions=pos)
    assert_scores_match(got, want)


# --------------------------------------------------------------------------- decode


def _decode_inputs(gen, dtype, batch, page_size, pages, max_pages, max_len, ctx_max=None):
    """Shuffled pages, ragged lengths (0, full, past the table), -1 and out-of-range ids."""
    k_cache = _randn(gen, pages, page_size, 1, D, dtype=dtype)
    table = torch.randperm(max(pages, batch * max_pages), generator=gen)[: batch * max_pages] % max(pages, 1)
    table = table.view(batch, max_pages).to(torch.int32)
    table[0, -1] = -1
    if max_pages > 1:
        table[-1, 0] = pages + 5  # out of range
        table[-1, 1] = -1
    ctx_max = max_pages * page_size + 7 if ctx_max is None else ctx_max
    lens = torch.randint(0, ctx_max + 1, (batch,), generator=gen, dtype=torch.int32)
    lens[0] = ctx_max
    if batch > 1:
        lens[1] = 0
    q = _randn(gen, batch, H, D, dtype=dtype)
    return q, k_cache, table.cuda(), lens.cuda()


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("page_size", [8, 16, 32, 64])
def test_decode_matches_reference(gen, dtype, page_size) -> None:
    max_pages = 700 // page_size + 2
    q, k_cache, table, lens = _decode_inputs(gen, dtype, 5, page_size, 3 * max_pages, max_pages, 900)
    got, want = _run_both(plan_mqa_decode, "mqa_decode", q, k_cache, table, lens, 900, scale=0.2)
    assert_scores_match(got, want)


@pytest.mark.parametrize("page_size", [16, 64])
def test_decode_64k_keys(gen, page_size) -> None:
    max_pages = 65536 // page_size
    q, k_cache, table, lens = _decode_inputs(gen, torch.bfloat16, 2, page_size, 2 * max_pages, max_pages, 65536, 65536)
    got, want = _run_both(plan_mqa_decode, "mqa_decode", q, k_cache, table, lens, 65536)
    assert_scores_match(got, want)


def test_decode_broadcast_and_4d_query(gen) -> None:
    batch, page_size, max_pages = 6, 32, 9
    _, k_cache, table, lens = _decode_inputs(gen, torch.float16, batch, page_size, 20, max_pages, 300)
    q_one = _randn(gen, 1, 1, H, D, dtype=torch.float16)
    q = q_one.expand(batch, 1, H, D)  # stride 0 on the batch axis
    got, want = _run_both(plan_mqa_decode, "mqa_decode", q, k_cache, table, lens, 300)
    assert_scores_match(got, want)


@pytest.mark.parametrize(("dtype", "page_size"), [(torch.bfloat16, 8), (torch.float16, 64)])
def test_decode_unaligned_cache_element_path(gen, dtype, page_size) -> None:
    """A k_cache view that breaks the 16-byte rule (decode has none) takes the element-load path."""
    pages, max_pages = 12, 5
    _, _, table, lens = _decode_inputs(gen, dtype, 3, page_size, pages, max_pages, 200)
    store = _randn(gen, pages * page_size * D + 3, dtype=dtype)
    k_cache = store[3:].view(pages, page_size, D)
    q = _randn(gen, 3, H, D + 1, dtype=dtype)[:, :, 1:]
    got, want = _run_both(plan_mqa_decode, "mqa_decode", q, k_cache, table, lens, 200)
    assert_scores_match(got, want)


# --------------------------------------------------------------------------- CUDA graphs


def _graph_of(fn) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # warm-up: compile and load outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def test_decode_graph_replay_reads_current_metadata(gen) -> None:
    q, k_cache, table, lens = _decode_inputs(gen, torch.bfloat16, 4, 16, 40, 10, 150)
    plan = plan_mqa_decode(q, k_cache, table, lens, 150)
    graph = _graph_of(lambda: native.mqa_decode(plan))
    for _ in range(2):
        _, _, new_table, new_lens = _decode_inputs(gen, torch.bfloat16, 4, 16, 40, 10, 150)
        table.copy_(new_table)
        lens.copy_(new_lens)
        q.copy_(_randn(gen, *q.shape, dtype=q.dtype))
        plan.out.fill_(float("nan"))
        graph.replay()
        ref = plan_mqa_decode(q, k_cache, table, lens, 150, backend="reference")
        _reference().mqa_decode(ref)
        torch.cuda.synchronize()
        assert_scores_match(plan.out, ref.out)


def test_prefill_and_indexer_graph_replay_read_current_metadata(gen) -> None:
    rows, keys = 90, 300
    q = _randn(gen, rows, H, D, dtype=torch.float16)
    k = _randn(gen, keys, D, dtype=torch.float16)
    starts, ends = (t.cuda() for t in _intervals(gen, rows, keys, "ragged"))
    pplan = plan_mqa_prefill(q, k, starts, ends)
    qi = _randn(gen, 2, 45, H, D, dtype=torch.float16)
    ki = _randn(gen, 2, 30, D, dtype=torch.float16)
    pos = torch.randint(0, 130, (2, 45), generator=gen, dtype=torch.int32).cuda()
    lens = torch.tensor([45, 20], dtype=torch.int32, device="cuda")
    iplan = plan_indexer_score(qi, ki, query_positions=pos, seq_lens_q=lens)
    graph = _graph_of(lambda: (native.mqa_prefill(pplan), native.indexer_score(iplan)))
    for _ in range(2):
        new_starts, new_ends = _intervals(gen, rows, keys, "ragged")
        starts.copy_(new_starts)
        ends.copy_(new_ends)
        pos.copy_(torch.randint(0, 130, (2, 45), generator=gen, dtype=torch.int32))
        lens.copy_(torch.randint(0, 46, (2,), generator=gen, dtype=torch.int32))
        pplan.out.fill_(float("nan"))
        iplan.result.fill_(float("nan"))
        graph.replay()
        pref = plan_mqa_prefill(q, k, starts, ends, backend="reference")
        _reference().mqa_prefill(pref)
        iref = plan_indexer_score(qi, ki, query_positions=pos, seq_lens_q=lens, backend="reference")
        _reference().indexer_score(iref)
        torch.cuda.synchronize()
        assert_scores_match(pplan.out, pref.out)
        assert_scores_match(iplan.result, iref.result)
