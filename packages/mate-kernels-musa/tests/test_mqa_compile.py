"""Every MQA kernel specialization compiles for sm_90a (no GPU needed: tilelang + nvcc).

Specializations: score kernel x {bf16, fp16} x {TMA store (keys % 4 == 0), plain store} (the
default schedule turns on every epilogue refinement, each checked in the generated source),
plus every other score schedule in ``mqa_score_kernel.VARIANTS`` whose code paths (epilogue
refinements, launch orders) no other compiled schedule covers (bf16, one tile count each;
tiles per CTA is a trip count); decode kernel x {bf16, fp16} x page size {8, 16, 32, 64} on
the vector path. The element-load decode path (unaligned k_cache) differs only in its load
code, so two of its specializations (both dtypes, both page-size extremes) are compiled to
keep the CPU suite short.
"""

from __future__ import annotations

import pytest

from mate_kernels_musa import mqa_score_kernel

pytestmark = pytest.mark.compile

DTYPES = ("bfloat16", "float16")
PAGE_SIZES = (8, 16, 32, 64)


def _source(kernel) -> str:
    src = kernel.get_kernel_source()
    assert "__global__" in src
    return src


def _check_schedule(src: str, schedule) -> None:
    # Keys on M: one m64n256 wgmma per k-step covers the four heads; rows on M: m64n64 per head.
    assert (", 64, 256, 16," in src) == schedule.keys_on_m
    assert (", 64, 64, 16," in src) != schedule.keys_on_m
    # Overlapped epilogue: the GEMM is committed without an inline wait, waited on explicitly.
    assert ("tl::wait_wgmma<0>" in src) == schedule.overlap
    # Whole-tile fast path: the latest row start / earliest row end gate an unmasked staging loop.
    assert ("warp_reduce_max(lo_s[" in src) == schedule.full
    # Trim: three copies of the tile loop (a quarter, half or all of the CTA's tiles).
    assert (src.count("for (int it") > 2) == schedule.trim
    assert ("EVICT_FIRST" in src) == schedule.evict_first
    # Chunk-major grid: row block and key chunk are the folded grid x divided by / modulo the
    # chunk count; mirror takes row blocks from both ends by the parity of that quotient.
    assert ("% ((nk + " in src) == schedule.chunk_major
    assert ("((rb % 2) == 0)" in src) == schedule.mirror
    # Spread: the computing CTAs store -inf 4-key groups straight from registers.
    assert ("*(float4*)(out4 + " in src) == schedule.spread
    # Unguarded: one bounds test per blind tile (its row and key origin held in variables).
    assert ("(r0v + 64) <= nq" in src) == schedule.unguarded
    if schedule.late_wait:
        # The in-loop store is left in flight past the wgmma wait (waited before the barrier).
        loop = src[src.index("for (int it") :]
        assert loop.index("tma_store_arrive") < loop.index("tl::wait_wgmma<0>") < loop.index("tma_store_wait")


@pytest.mark.parametrize(
    ("tma_out", "rows_per_key"),
    [(True, 0), (True, 4), (False, 0)],
    ids=["tma-store", "tma-store-causal", "plain-store"],
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_score_kernel_compiles(dtype: str, tma_out: bool, rows_per_key: int) -> None:
    """The launcher's default specializations: keys on M with every refinement, chunk-major
    mirrored order and spread -inf stores for bulk stores (whole causal prompts: with unguarded
    whole blind tiles), rows on M with plain stores."""
    from mate_kernels_musa._build import build

    schedule = mqa_score_kernel.default_schedule(tma_out, rows_per_key * 1000, 1000)
    consts = (dtype, *mqa_score_kernel.default_tiles(tma_out), tma_out, *schedule)
    src = _source(build(mqa_score_kernel.score_kernel, "cuda-sm90a", *consts))
    # Hopper path: warpgroup MMA and 16-byte cp.async loads of Q and K; bulk tensor stores.
    assert "wgmma" in src
    assert "cp_async_gs_conditional<16>" in src
    assert ("tma_store" in src) == tma_out
    _check_schedule(src, schedule)


# Independent code paths of the overlapped schedule: epilogue refinements and launch orders.
FEATURES = mqa_score_kernel.REFINEMENTS + tuple(name for name, _ in mqa_score_kernel.ORDERS)


def _covered(schedule, others) -> bool:
    """Whether another schedule of the same base turns on a strict superset of ``schedule``'s
    refinements and launch orders (each is an independent code path: compiling the superset
    exercises it)."""
    on = {r for r in FEATURES if getattr(schedule, r)}
    return any(o[:2] == schedule[:2] and on < {r for r in FEATURES if getattr(o, r)} for o in others if o != schedule)


# One variant per schedule the launcher never picks (tiles per CTA is only a trip count; each
# compile costs the 2-core CI several seconds), skipping schedules whose code paths a compiled
# schedule (the launcher's included) turns on too.
_DEFAULTS = (mqa_score_kernel.BULK_SCHEDULE, mqa_score_kernel.CAUSAL_SCHEDULE)
_SCHEDULES = {s: (t, s) for t, s in reversed(mqa_score_kernel.VARIANTS) if s not in _DEFAULTS}
OTHER_VARIANTS = [v for s, v in _SCHEDULES.items() if not _covered(s, [*_SCHEDULES, *_DEFAULTS])]


@pytest.mark.parametrize(
    ("tiles", "schedule"), OTHER_VARIANTS, ids=[mqa_score_kernel.variant_label(*v) for v in OTHER_VARIANTS]
)
def test_score_schedule_variants_compile(tiles, schedule) -> None:
    from mate_kernels_musa._build import build

    src = _source(build(mqa_score_kernel.score_kernel, "cuda-sm90a", "bfloat16", *tiles, True, *schedule))
    assert "tma_store" in src
    _check_schedule(src, schedule)


DECODE_SPECS = [(d, ps, True) for d in DTYPES for ps in PAGE_SIZES] + [("bfloat16", 8, False), ("float16", 64, False)]


@pytest.mark.parametrize(("dtype", "page_size", "k_vec"), DECODE_SPECS)
def test_decode_kernel_compiles(dtype: str, page_size: int, k_vec: bool) -> None:
    from mate_kernels_musa import mqa_decode_kernel
    from mate_kernels_musa._build import build

    block_keys = mqa_decode_kernel.BLOCK_KEYS
    src = _source(build(mqa_decode_kernel.decode_kernel, "cuda-sm90a", dtype, page_size, k_vec, block_keys))
    assert ("cp_async_gs_conditional<16>" in src) == k_vec
