"""Schedules of the paged sparse-attention kernel and the ``num_splits=None`` heuristic.

A schedule fixes the compile-time tile shape of :mod:`.sparse_paged_kernel` plus the
runtime split count. Two tile shapes exist (QSA-DESIGN.md section 6 and the sweep in
``benchmarks/bench_sparse.py``):

* ``DECODE`` - 4 warps on a 16 x 32 score tile; more threads per CTA hide the gather
  latency when there are few CTAs;
* ``PREFILL`` - 2 warps on the same tile; smaller CTAs keep more rows resident per SM,
  which is what matters once the grid is many waves deep.

Heuristic for ``num_splits=None`` (plan value 0), with ``work = rows * Hkv`` (CTAs of
one split) and ``sms`` the device's multiprocessor count:

* ``work >= PREFILL_MIN_WAVES * sms``: the prefill tile, no split (enough CTAs to fill
  the GPU several times over; a split would only add merge traffic);
* otherwise the decode tile, with the smallest split count that gives at least
  ``DECODE_TARGET_WAVES * sms`` CTAs, capped so that each split keeps at least
  ``MIN_SLOTS_PER_SPLIT`` selection slots (below that the fixed per-CTA cost of loading
  Q and writing a partial dominates).

The constants were measured on the H200 (132 SMs) with the issue-4 shapes (decode
64 x 1 and 64 x 4 rows, 2051-token selections; prefill 4096 rows): see the sweep
section of the benchmark JSON. A positive ``num_splits`` is used as given (1 = no
SplitKV); the tile is then still chosen from ``work``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Tile", "Schedule", "DECODE", "PREFILL", "TILES", "choose_schedule"]


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


DECODE = Tile("decode", block_n=32, threads=128, chunk_blocks=16, num_stages=1, min_blocks=4)
PREFILL = Tile("prefill", block_n=32, threads=64, chunk_blocks=16, num_stages=1, min_blocks=4)
TILES = {t.name: t for t in (DECODE, PREFILL)}

PREFILL_MIN_WAVES = 4
DECODE_TARGET_WAVES = 2
MIN_SLOTS_PER_SPLIT = 256


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
    tile = PREFILL if work >= PREFILL_MIN_WAVES * sms else DECODE
    if num_splits > 0:
        return Schedule(tile, num_splits)
    if tile is PREFILL:
        return Schedule(tile, 1)
    wanted = -(-DECODE_TARGET_WAVES * sms // work)
    cap = max(1, n_tok // MIN_SLOTS_PER_SPLIT)
    return Schedule(tile, max(1, min(wanted, cap)))
