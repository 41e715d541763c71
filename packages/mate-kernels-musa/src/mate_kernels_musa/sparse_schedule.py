"""Schedules of the paged sparse-attention kernel and the ``num_splits=None`` heuristic.

A schedule is a compile-time tile of :mod:`.sparse_paged_kernel` plus the runtime split
count. The production tile ``W4`` is 4 warps on a 16 x 32 score tile (mma m16n8k16,
Q heads padded 12 -> 16 in shared memory), 512 slots resolved per chunk, launch bounds
capping registers for 4 CTAs per SM. Two alternatives were measured and lost on every
issue-4 shape (H200, ``benchmarks/bench_sparse.py`` sweep, 2026-11-29): ``W2`` (2 warps:
decode 64 x 1 120 vs 102 us, prefill 3614 vs 3249 us) and ``N64`` (64-slot tiles, 2 CTAs
per SM: 108 vs 102 us, 3877 vs 3249 us); they stay in ``CANDIDATES`` for the sweep only.

Heuristic for ``num_splits=None`` (plan value 0), with ``work = rows * Hkv`` (CTAs of
one split) and ``sms`` the device's multiprocessor count:

* ``work >= PREFILL_MIN_WAVES * sms`` -> the prefill schedule: no split, one CTA per
  (row, KV head); neighbouring rows run in neighbouring CTAs and share blocks through L2;
* otherwise the decode schedule: the smallest split count giving at least
  ``DECODE_TARGET_WAVES * sms`` CTAs, capped so that each split keeps at least
  ``MIN_SLOTS_PER_SPLIT`` slots (below that the per-CTA cost of loading Q and writing a
  partial dominates).

Measured (us, W4 tile, 2051-slot selections, median of CUDA-graph replays; prefill
columns 3..8 from a first run of the same kernel):

=====================  =====  =====  =====  =====  =====  =====
splits                     1      2      3      4      6      8
=====================  =====  =====  =====  =====  =====  =====
decode 64 x 1            143    108    102    102    125    117
decode 64 x 4            301    318    332    348    374    392
prefill 4096, overlap   3249   3343   3538   3676   4057   4537
prefill 4096, uniform   3671   3729
=====================  =====  =====  =====  =====  =====  =====

Small batches (second sweep, same day: 131072-token context, 2051 or 515 slots,
CUDA-graph replay medians in us; ``*`` = what the rule now picks):

=====================  =====  =====  =====  =====  =====  =====
splits                     2      4      8     16     32     64
=====================  =====  =====  =====  =====  =====  =====
1 x 1, 2051 slots         82     52     38     32    30*     31
8 x 1, 2051 slots         83     53     41    37*     38     48
16 x 1, 2051 slots        82     58    48*     49     64     80
32 x 1, 2051 slots        88     70    68*     83    102    146
64 x 1, 2051 slots       108   101*    118    151    189    267
1 x 1, 515 slots          39     31    27*     26     26     29
8 x 1, 515 slots          39     32    28*     28     30     40
=====================  =====  =====  =====  =====  =====  =====

Even at 64 splits of one 32-slot step each, one row costs ~30 us against a ~1 us memory
floor: the per-call fixed cost (slot resolution, the merge launch) is what small batches
pay, not bandwidth. With 3 target waves and 64 slots per split the rule picks 32 splits
for 1 x 1 (was 8: 39 us), 25 for 8 x 1, 13 for 16 x 1, 7 for 32 x 1, 4 for 64 x 1 (was 3:
102-110 us), 1 for 64 x 4 (work 512 < 4 * 132) and 1 for prefill. A positive
``num_splits`` is used as given (1 = no SplitKV).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Tile", "Schedule", "W4", "W2", "N64", "TILES", "CANDIDATES", "choose_schedule"]


@dataclass(frozen=True)
class Tile:
    """Compile-time tile shape of the paged kernel (arguments of ``sparse_paged_kernel``)."""

    name: str
    block_n: int
    threads: int
    chunk_blocks: int
    num_stages: int
    min_blocks: int


@dataclass(frozen=True)
class Schedule:
    tile: Tile
    splits: int


W4 = Tile("w4", block_n=32, threads=128, chunk_blocks=16, num_stages=1, min_blocks=4)
W2 = Tile("w2", block_n=32, threads=64, chunk_blocks=16, num_stages=1, min_blocks=4)
N64 = Tile("n64", block_n=64, threads=128, chunk_blocks=8, num_stages=1, min_blocks=2)
TILES = {t.name: t for t in (W4,)}  # what the launcher uses (and CI compiles)
CANDIDATES = {t.name: t for t in (W2, N64)}  # measured alternatives (benchmark sweep only)

PREFILL_MIN_WAVES = 4
DECODE_TARGET_WAVES = 3
MIN_SLOTS_PER_SPLIT = 64


def choose_schedule(rows: int, hkv: int, n_tok: int, num_splits: int, sms: int) -> Schedule:
    """Pick the tile and split count of one call.

    Parameters
    ----------
    rows, hkv, n_tok : int
        Query rows, KV heads, selection width T.
    num_splits : int
        The plan's value: 0 = choose, else the forced split count.
    sms : int
        Multiprocessors of the device.
    """
    work = max(rows * hkv, 1)
    if num_splits > 0:
        return Schedule(W4, num_splits)
    if work >= PREFILL_MIN_WAVES * sms:
        return Schedule(W4, 1)
    wanted = -(-DECODE_TARGET_WAVES * sms // work)
    cap = max(1, n_tok // MIN_SLOTS_PER_SPLIT)
    return Schedule(W4, max(1, min(wanted, cap)))
