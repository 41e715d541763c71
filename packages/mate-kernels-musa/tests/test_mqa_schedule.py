"""The launcher's default score-kernel tiles and schedules, and the factory's precondition errors.

Plain Python, kept out of the ``compile``-marked module so that they run where nvcc is absent.
"""

from __future__ import annotations

import pytest

from mate_kernels_musa import mqa_score_kernel


def test_default_tiles_and_schedule() -> None:
    """Bulk stores: 32 tiles per CTA, every refinement, chunk-major with mirrored row blocks and
    spread -inf stores (a variant the GPU tests check); plain stores: 64 tiles, rows on M."""
    m = mqa_score_kernel
    assert m.default_tiles(True)[3] == 32
    assert m.default_schedule(True) == m.DEFAULT_SCHEDULE._replace(chunk_major=True, mirror=True, spread=True)
    assert (m.default_tiles(True), m.default_schedule(True)) in m.VARIANTS
    assert m.default_tiles(False) == m.DEFAULT_TILES
    assert m.default_schedule(False) == m.Schedule()


@pytest.mark.parametrize(
    ("tma_out", "rows", "keys", "causal"),
    [
        (True, 32768, 8192, True),  # a whole causal prompt: 4 rows per key
        (True, 32767, 8192, False),
        (True, 4096, 32768, False),  # a prefill chunk late in a long context
        (True, 8192, 4096, False),  # a chunk as long as the context before it
        (True, 5, 0, False),  # no keys
        (False, 32768, 8192, False),  # plain stores: rows on M whatever the shape
    ],
)
def test_causal_prompt_schedule(tma_out: bool, rows: int, keys: int, causal: bool) -> None:
    """Bulk stores with at least 4 rows per key (a whole causal prompt) take the schedule whose
    blind tiles wholly inside the output skip the per-group bounds tests; nothing else does."""
    m = mqa_score_kernel
    assert m.CAUSAL_SCHEDULE == m.BULK_SCHEDULE._replace(unguarded=True)
    assert (m.default_tiles(True), m.CAUSAL_SCHEDULE) in m.VARIANTS
    want = m.CAUSAL_SCHEDULE if causal else m.default_schedule(tma_out)
    assert m.default_schedule(tma_out, rows, keys) == want


def test_schedule_preconditions_raise() -> None:
    pytest.importorskip("tilelang")  # the factory builds TileLang macros before the checks
    with pytest.raises(ValueError, match="keys-on-M"):
        mqa_score_kernel.score_kernel("bfloat16", *mqa_score_kernel.DEFAULT_TILES, False, True)
    with pytest.raises(ValueError, match="overlapped epilogue"):
        mqa_score_kernel.score_kernel("bfloat16", *mqa_score_kernel.DEFAULT_TILES, True, False, True)
    with pytest.raises(ValueError, match="refine the overlapped epilogue"):
        mqa_score_kernel.score_kernel("bfloat16", *mqa_score_kernel.DEFAULT_TILES, True, True, False, trim=True)
    with pytest.raises(ValueError, match="chunk_major=True"):
        mqa_score_kernel.score_kernel("bfloat16", *mqa_score_kernel.DEFAULT_TILES, True, True, mirror=True)
    with pytest.raises(ValueError, match="spread needs the overlapped epilogue"):
        mqa_score_kernel.score_kernel("bfloat16", *mqa_score_kernel.DEFAULT_TILES, True, True, False, spread=True)
    with pytest.raises(ValueError, match="unguarded refines the spread"):
        mqa_score_kernel.score_kernel("bfloat16", *mqa_score_kernel.DEFAULT_TILES, True, True, True, unguarded=True)


def test_validation_key_bound_matches_the_grid() -> None:
    """mate_core bounds native key counts by the plain-store grid: 65535 chunks of the CTA's keys."""
    from mate_core._mqa_common import NATIVE_KEYS_PER_CHUNK, NATIVE_MAX_KEYS
    from mate_core.checks import NATIVE_MAX_GRID_YZ

    m = mqa_score_kernel
    assert m.default_tiles(False) == m.DEFAULT_TILES  # the plain-store path: grid y = key chunks
    assert NATIVE_KEYS_PER_CHUNK == m.BLOCK_KEYS * m.TILES_PER_CTA
    assert NATIVE_MAX_KEYS == NATIVE_MAX_GRID_YZ * NATIVE_KEYS_PER_CHUNK
