"""Slot resolution + hash-bucket union of a row group in one kernel (the ``"fused"`` union prep).

One group of ``R`` consecutive rows per CTA. The CTA resolves its rows' limits once
(threads ``0..R-1``, :func:`._sparse_macros.resolve_row_limit`) and each slot's physical
cache row ``page * page_size + slot`` by the paged kernel's rule (:func:`._sparse_macros.slot_rule`;
unused slots drop out; the page size divides by a magic multiply, :func:`._sparse_macros.fast_div`),
a row at a time: its token ids, then their pages, each batch of loads in flight together;
each thread keeps the physical rows of its slots in local memory between passes. No sort:
the CTA counts its used entries per bucket ``b(x)`` (``NB`` buckets of mixed low bits,
shared-memory atomics), scans the counts and scatters the entries into bucket ranges by
counting each bucket's end down (the order inside a bucket depends on the atomics), each
entry carrying its row index (an ``int8``), and then, per entry, looks only at its own bucket
(a few entries on QSA selections):

* the entry is canonical iff no earlier entry of its bucket holds the same token (its row
  byte gets a flag bit); which copy that is depends on the atomics, nothing below does;
* canonical entries are counted per bucket and scanned: the union slot of token ``x`` is
  ``u = (distinct tokens of buckets < b(x)) + (distinct tokens of bucket b(x) below x)``,
  so the union is ordered by ``(b(x), x)``: independent of the atomics' order (bitwise
  deterministic results) and near-sorted by token (4-token runs stay adjacent);
* the canonical entry writes ``U[g, u] = x`` and, for every row ``j``, ``C[g, j, u]`` = the
  number of entries of its bucket with token ``x`` in row ``j`` (duplicates included), both
  from one pass over the bucket (the row counts as 16-bit fields of int64 registers).

With ``min_rows > 0`` (the launcher's default rule) a group with a row of a request of fewer
rows (the decode rows of a mixed batch) writes ``NU[g] = UNMEASURED`` right after resolving its
rows and stops: no token id is read, no bucket touched, and every consumer leaves the group to
the paged kernel.

Early exit (``max_nu``): the loading pass also sets bit :func:`seen_bit` of each used entry in
a ``SEEN_BITS``-bit map; its popcount ``lb`` is a lower bound of the union (rows that share a
bit collapse). A group with ``lb > max_nu`` goes to the paged kernel whatever its exact union, so
it writes ``NU[g] = lb`` and stops before the bucket passes. The bitmap is counted after each row
``i`` once the rows so far could hold more than ``max_nu`` entries (``(i + 1) T > max_nu``) and
after the last row; the first count above ``max_nu`` stops the group, and the rows after it are
not read. So ``NU[g]`` is the union size where it is ``<= max_nu``, and otherwise a value in
``(max_nu, union]``: every consumer only compares it with ``max_nu`` (and ``UNMEASURED``).

Every slot ``u < NU[g]`` of ``U`` and ``C`` is written (of groups with ``NU[g] <= max_nu``),
nothing else: neither output is zero-filled. Cost per entry is linear in its bucket's size
(quadratic in the worst case of one token selected thousands of times, still correct).

Measured (H200, 4096-row prefill shapes, R = 4, CUDA-graph medians, us): 213 with 90%
neighbour overlap and 192-199 with uniform blocks (155-160 there when the launcher's
``max_nu`` skips the U/C pass of groups left to the paged kernel). It replaced a resolve
kernel + hash-only kernel pair (130 + ~900) and a sorted-rows prep (~1100). Session 8
(2026-11-30, three interleaved rounds each), from 407 / 370 (overlap / uniform):

* ncu put the kernel at 70% of SM issue with 297 M warp instructions, 16 active threads per
  warp, most of them in the per-bucket loops (a warp runs each loop to its lanes' largest
  bucket, 17-26 entries where the mean is 5-8). The slot and count search took ``1 + R``
  passes over the bucket, now one: 252 / 232-243, outputs identical.
* TileLang's sync planner had put two to four barriers in each slot iteration (it cannot
  tell the data-dependent shared indices apart); the kernel places its phase barriers
  itself (8 then; 10 with the early exit below, 13 since session 22) (376 / 342 on their own).
* The canonical test scanned the whole bucket against a per-entry tie-break key (``int16``
  in shared memory, written by the scatter); scanning only the earlier entries needs no key:
  255 -> 213 / 236 -> 196 (U, C and NU identical), whole union call 1694 -> 1650 / 3295 ->
  3270. With 4096 buckets (fewer entries per bucket, 84 KB of shared memory) 220 / 204.
* Not kept: every token id, then every page entry, loaded in two batched passes before
  the bucket counts (484 / 452).

The bitmap early exit (session 13, same process, three interleaved rounds, CUDA-graph medians
after a read flush, us; the prep alone at the launcher's ``max_nu`` = 4922, then the default
call; HEAD's prep in the other column, probe ``.devrun/s13_prep_ab.py``):

=================  =====================  =====================
case               with the early exit    without
=================  =====================  =====================
prep, uniform      64.7 / 67.1 / 68.7     116.3 / 119.5 / 120.4
prep, 90% overlap  221.3 / 218.5 / 218.5  215.6 / 215.3 / 215.7
prep, mixed batch  117.6 / 117.5 / 117.4  115.8 / 115.7 / 115.4
call, uniform      2784 / 2812 / 2841     2857 / 2881 / 2844
call, 90% overlap  1663 / 1641 / 1637     1638 / 1637 / 1633
call, mixed batch  1424 / 1358 / 1355     1355 / 1357 / 1354
=================  =====================  =====================

Every uniform group exits (its union holds nearly all of its 8204 slots); the groups that take the
union path pay the bitmap's atomics and popcount, ~2% of their prep.

Session 21 (probe ``.devrun/s21_prep.py``, HEAD's kernel loaded from a copy beside this one; U, NU
and C identical on the three shapes): a row's token ids, then their pages, loaded in batches
(every page read, as the paged kernel's eager path does) instead of one id -> page chain per slot,
and a launch bound of three CTAs per SM (40 registers under its cap of 42, against 52-54
without it, which left room for two; the 80-byte ``xl`` array is in local memory either way).
Default calls, same process, three rounds, us (HEAD / batched loads / both): 90% overlap 1608-1610 / 1604-1606 / 1590-1592, mixed
batch 1327-1328 / 1326-1327 / 1323-1324, uniform 2702-2704 / 2698-2699 / 2694-2696. Kernel
timeline of the batched loads alone (CUPTI, medians): 211.6 / 112.2 / 56.7 us against 216.2 /
114.0 / 61.0.

Session 22 (probe ``.devrun/s22_tl.py``, HEAD's kernel from a copy; NU of every group, U and C of
accepted groups and the whole calls' outputs identical on the three shapes): the bitmap counted
after each row once the rows so far could exceed ``max_nu``, not only after the last. At the
launcher's ``max_nu`` = 4922 (``T`` = 2051) a uniform group now stops after three of its four
rows (its NU there 5515 and up). Predicted 57 -> ~45 us on uniform blocks and no change elsewhere
(one more count and three barriers per group). Kernel timeline (CUPTI, 10 graph replays after a
read flush, medians, two interleaved rounds, us, new / HEAD): uniform 40.4, 40.1 / 52.0, 51.9
(whole call 2675.5, 2674.6 / 2687.1, 2688.4); 90% overlap 198.8, 204.6 / 197.6, 198.8; mixed
batch 109.7, 110.8 / 109.6, 110.4.

Session 27. A kernel timeline of the default uniform call (probe ``.devrun/s27_attr.py``) has the
prep first, 40.3 us, then the sort from 47 us and the paged kernel from 116 us; with the union
path off the sort starts the call and the paged kernel follows at 52 us. Nsight Compute on the
prep alone (uniform blocks, SM clock 1.49 GHz under the profiler): 43.9 us, SM throughput 65%,
memory 38% (DRAM 12%), 42.8 of 48 warps active, 15.1 cycles between a warp's instructions,
three CTAs per SM (40 registers and 72 KB each), 2.59 waves. No unit is saturated:

* Kept: the slot resolution divides by the page size with a magic multiply
  (:func:`._sparse_macros.fast_div`); it was one ``div.s32`` and two ``rem.s32`` per slot, each
  ~20 instructions (a reciprocal and its correction). Probe ``.devrun/s27_fd.py`` (this kernel
  and the paged kernel's eager resolution changed together; HEAD's from copies; same process,
  three rounds, us; results bitwise equal): prep on the timeline 40.4 -> 34.4 (uniform), 203.3
  -> 192.6 (90% overlap), 110.5 -> 104.7 (mixed); whole calls 2497-2504 against 2500-2508,
  1546-1548 against 1554-1559, 1285-1286 against 1295-1298.
* Not kept: the bitmap early exit in a kernel of its own (256 threads, 4 KB of shared memory,
  eight CTAs per SM: the 1024 groups in one wave, writing ``NU`` = ``UNMEASURED``, the bound or
  a candidate mark), this kernel then building only the candidates (patch
  ``.devrun/s27_measure.diff`` and kernel ``.devrun/s27_measure_kernel.py``, probe
  ``.devrun/s27_meas.py``, before the magic division; NU and outputs identical). The one-wave kernel took 37.5 us against this kernel's 40.2 on uniform
  blocks, and the split cost the 90% overlap 1596-1598 against 1551-1552 us and the mixed batch
  1317-1318 against 1290-1292 (uniform 2489-2491 against 2490-2499): with every SM full of warps
  either way, the waves were not what the search waited on.

Session 28, not kept (probe ``.devrun/s28_prep.py``, this kernel from a copy ``.devrun/s28_prep_old.py``;
NU, U and C identical on the three shapes): the bucket counts (one shared-memory atomic per used
slot) and the zeroing of the two bucket tables moved after the early-exit test, so that a group that
stops pays only the bitmap. Predicted 34 -> 26-31 us on uniform blocks; the timeline had 33.3 against
34.3, the calls within noise (uniform 2487-2497 against 2489-2497, 90% overlap 1539-1541 against
1538-1541): the atomics were not what the search waits on either.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.
from typing import Any

from ._sparse_macros import cta_sum, page_column, resolve_row_limit, row_mode, slot_rule

__all__ = ["sparse_union_fused_kernel", "UNMEASURED", "SEEN_BITS", "seen_bit"]

UNMEASURED = 2**31 - 1  # NU of a group left to the paged kernel without measuring its union (min_rows)
SEEN_SHIFT = 15
SEEN_BITS = 1 << SEEN_SHIFT  # bits (4 KiB) of the shared-memory bitmap whose popcount bounds a group's union from below


def seen_bit(x: Any) -> Any:
    """Bit of physical cache row ``x >= 0`` in the group's bitmap (a Python int or a TIR expression).

    Distinct rows may share a bit, never the reverse, so the bitmap's popcount is a lower bound
    of the union size whatever the rows are; the fold only keeps it tight on pools past
    ``SEEN_BITS`` rows.
    """
    return (x ^ (x >> SEEN_SHIFT)) & (SEEN_BITS - 1)


def sparse_union_fused_kernel(rows_per_cta: int, t_cap: int, threads: int, buckets: int, count_dtype: str) -> Any:
    """Build the prim_func.

    Parameters
    ----------
    rows_per_cta : int
        ``R``, rows per group.
    t_cap : int
        Largest selection width ``T`` the shared-memory arrays hold.
    threads : int
        Threads per CTA (a multiple of 32 dividing ``buckets``).
    buckets : int
        ``NB``, a power of two.
    count_dtype : str
        dtype of ``C`` ("int16" or "int32").

    Kernel arguments
    ----------------
    TI [rows, T] int32 token ids (runtime strides, ``T <= t_cap``); BT [R, max_pages] int32
    block table; U [n_groups, W] int32, C [n_groups, R, W] count_dtype, NU [n_groups] int32
    outputs (``n_groups = ceil(rows / R)``, ``W >= min(R * T, max_nu)``); CU, R3, SLQ, SLK, QP and the
    scalars mode, q_len, n_iter, cap, has_slq, has_slk, has_qp: the row metadata of
    ``sparse_paged_kernel``; pages, page_size; max_nu: groups whose union exceeds it write
    ``NU[g]`` only, the union size or a bitmap lower bound above ``max_nu`` (the launcher sends
    them to the paged kernel); min_rows: a group with a
    row of a request of fewer rows (``PHYSICAL`` mode: none) reads no token id and writes
    ``NU[g] = UNMEASURED`` only, right after resolving its rows (0 = measure every group;
    needs ``max_nu < UNMEASURED``); ps_magic, ps_shift: ``_sparse_macros.page_divisor(page_size)``.
    """
    import tilelang.language as T

    R = rows_per_cta
    TC = t_cap
    NMAX = R * TC
    NB = buckets
    log_nb = NB.bit_length() - 1
    NBR = threads // 32  # the bucket scans run as NBR rows of NBC, one warp per row
    NBC = NB // NBR
    KP = -(-TC // threads)  # slots of one row per thread
    per_thread = -(-NMAX // threads)
    NPK = -(-R // 4)  # int64 packs of 4 16-bit row counts
    SEEN_WORDS = SEEN_BITS // 32
    CANON = 64  # flag bit in an entry's row byte (rows < 64)
    # Three CTAs per SM where their shared arrays fit in the 228 KB of an sm_90 SM (R = 4 at the
    # launcher's t_cap: ~71 KB each): the launch bound caps registers at 42 (52-54 uncapped: two CTAs).
    smem = (NMAX + 1) * 5 + 2 * NB * 4 + SEEN_WORDS * 4 + 1024
    min_blocks = 3 if 3 * smem <= 228 * 1024 else 1
    if (
        NB & (NB - 1)
        or NB % threads
        or SEEN_WORDS % threads
        or NBC < 32
        or NMAX >= 2**31 - 1
        or TC >= 2**16
        or R > min(threads, CANON - 1)
    ):
        raise ValueError(f"unsupported fused prep shape: R={R}, t_cap={TC}, threads={threads}, buckets={NB}")
    resolve = resolve_row_limit(with_count=True)
    rule = slot_rule(fast=True)  # the page size's magic division, not two runtime divisions per slot
    popcount_sum = cta_sum(threads)

    rows, n_tok, n_req, max_pages, n_grp, width = T.dynamic("rows, n_tok, n_req, max_pages, n_grp, width")
    n_cu, n_r3, n_slq, n_slk, n_qp = T.dynamic("n_cu, n_r3, n_slq, n_slk, n_qp")
    st = T.dynamic("st0, st1", "int64")
    sb = T.dynamic("sb0, sb1", "int64")
    s_cu, s_slq, s_slk, s_qp = T.dynamic("s_cu, s_slq, s_slk, s_qp", "int64")

    def bucket(x):
        return (x ^ (x >> log_nb)) & (NB - 1)

    def canonical(r):  # bit 6 of an entry's row byte: the first copy of its token in its bucket
        return T.bitwise_and(T.cast(r, "int32"), CANON) != 0

    @T.macro
    def span(sx, cnt, off, n_valid, q):
        """(token, bucket, first entry, entries) of entry ``q``'s bucket, as local values."""
        x = T.alloc_var("int32", init=sx[q])
        b = T.alloc_var("int32", init=bucket(x))
        beg = T.alloc_var("int32", init=off[0, b // NBC] + cnt[b // NBC, b % NBC])
        end = T.alloc_var("int32", init=n_valid)
        if b + 1 < NB:
            end = off[0, (b + 1) // NBC] + cnt[(b + 1) // NBC, (b + 1) % NBC]
        return x, b, beg, end - beg

    @T.macro
    def bitmap_share(seen, tx):
        """This thread's words of the bitmap, popcounted."""
        mine = T.alloc_var("int32", init=0)
        for k in T.serial(SEEN_WORDS // threads):
            mine = mine + T.cast(T.popcount(seen[k * threads + tx]), "int32")
        return mine

    @T.macro
    def scan(counts, off, j, tx):
        """Per-bucket ``counts`` (complete: the caller's barrier precedes) -> their inclusive scan
        along each row; ``off[j]`` the row offsets (thread 0 only; the caller's barrier publishes them)."""
        T.cumsum(src=counts, dim=1)
        T.sync_threads()
        if tx == 0:
            off[j, 0] = 0
            for r in T.serial(NBR):
                off[j, r + 1] = off[j, r] + counts[r, NBC - 1]

    @T.prim_func
    def main(
        TI: T.StridedTensor([rows, n_tok], st, "int32"),
        BT: T.StridedTensor([n_req, max_pages], sb, "int32"),
        U: T.Tensor([n_grp, width], "int32"),
        C: T.Tensor([n_grp, R, width], count_dtype),
        NU: T.Tensor([n_grp], "int32"),
        CU: T.StridedTensor([n_cu], [s_cu], "int32"),
        R3: T.Tensor([3, n_r3], "int32"),
        SLQ: T.StridedTensor([n_slq], [s_slq], "int32"),
        SLK: T.StridedTensor([n_slk], [s_slk], "int32"),
        QP: T.StridedTensor([n_qp], [s_qp], "int32"),
        mode: T.int32,
        q_len: T.int32,
        n_iter: T.int32,
        cap: T.int32,
        has_slq: T.int32,
        has_slk: T.int32,
        has_qp: T.int32,
        pages: T.int32,
        page_size: T.int32,
        max_nu: T.int32,
        min_rows: T.int32,
        ps_magic: T.int64,
        ps_shift: T.int32,
    ):
        with T.Kernel(n_grp, threads=threads) as g:
            if min_blocks > 1:
                T.annotate_min_blocks_per_sm(min_blocks)
            sx = T.alloc_shared([NMAX + 1], "int32")  # entry NMAX: scratch for unused slots
            sr = T.alloc_shared([NMAX + 1], "int8")  # row of the entry, | CANON once found canonical
            cnt = T.alloc_shared([NBR, NBC], "int32")  # entries per bucket, then their scan
            dist = T.alloc_shared([NBR, NBC], "int32")  # distinct tokens per bucket, then their scan
            off = T.alloc_shared([2, NBR + 1], "int32")  # row offsets of the two scans, then their totals
            req_s = T.alloc_shared([R], "int32")
            lim_s = T.alloc_shared([R], "int32")
            small_s = T.alloc_shared([R], "int32")
            seen = T.alloc_shared([SEEN_WORDS], "uint32")  # the lower-bound bitmap (early exit)
            pop_s = T.alloc_shared([threads // 32], "int32")  # per-warp popcounts of the bitmap
            xl = T.alloc_local([R * KP], "int32")
            tv = T.alloc_local([KP], "int32")  # one row's token ids, then
            pv = T.alloc_local([KP], "int32")  # their pages
            tx = T.get_thread_binding()

            if tx < R:
                req, lim, n_rows = resolve(T.min(g * R + tx, rows - 1), mode, q_len, n_iter, n_req, cap, CU, R3,
                                           SLQ, SLK, QP, has_slq, has_slk, has_qp)  # fmt: skip
                req_s[tx] = req
                lim_s[tx] = T.if_then_else(g * R + tx < rows, lim, -1)
                # A row of a short request (a decode row of a mixed batch): its group is left unmeasured.
                small_s[tx] = T.if_then_else(
                    (g * R + tx < rows) & (mode != row_mode.PHYSICAL) & (n_rows < min_rows), 1, 0
                )
            T.sync_threads()
            small = T.alloc_var("int32", init=0)
            for i in T.unroll(R):
                small = T.max(small, small_s[i])
            if small != 0:
                if tx == 0:
                    NU[g] = UNMEASURED
            else:
                for k in T.serial(NB // threads):
                    b = k * threads + tx
                    cnt[b // NBC, b % NBC] = 0
                    dist[b // NBC, b % NBC] = 0
                for k in T.serial(SEEN_WORDS // threads):
                    seen[k * threads + tx] = T.uint32(0)
                T.sync_threads()
                lb = T.alloc_var("int32", init=0)  # the bitmap's popcount, once counted
                stop = T.alloc_var("int32", init=0)  # an early count passed max_nu: the later rows are not read
                for i in T.serial(R):
                    if stop == 0:
                        # A row's token ids, then their pages, each batch of loads issued together (the
                        # page column is clamped, so every slot's page is read, used or not), then the
                        # slot rule and the bucket counts.
                        for k in T.unroll(KP):
                            tv[k] = T.if_then_else(
                                k * threads + tx < n_tok,
                                TI[T.min(g * R + i, rows - 1), T.min(k * threads + tx, n_tok - 1)],
                                -1,
                            )
                        for k in T.unroll(KP):
                            pv[k] = BT[req_s[i], page_column(tv[k], page_size, max_pages, (ps_magic, ps_shift))]
                        for k in T.unroll(KP):
                            good, sl = rule(tv[k], lim_s[i], pv[k], pages, page_size, ps_magic, ps_shift)
                            x = T.alloc_var("int32", init=T.if_then_else(good, pv[k] * page_size + sl, -1))
                            xl[i * KP + k] = x
                            if x >= 0:
                                T.atomic_add(cnt[bucket(x) // NBC, bucket(x) % NBC], 1)
                                # CUDA's atomicOr (TileLang's atomic_or emits a global-space red).
                                h = seen_bit(x)
                                T.call_extern(
                                    "uint32",
                                    "atomicOr",
                                    T.address_of(seen[h >> 5]),
                                    T.shift_left(T.uint32(1), T.cast(h & 31, "uint32")),
                                )
                        # Early exit after the rows so far (CTA-uniform test): once they could hold more
                        # than max_nu entries, their bitmap may already bound the union above it.
                        if (i + 1 < R) & ((i + 1) * n_tok > max_nu):
                            T.sync_threads()
                            lb = popcount_sum(bitmap_share(seen, tx), pop_s, tx)
                            stop = T.if_then_else(lb > max_nu, 1, 0)
                            T.sync_threads()  # pop_s is written again by the next count
                if stop == 0:
                    T.sync_threads()
                    lb = popcount_sum(bitmap_share(seen, tx), pop_s, tx)
                if lb > max_nu:
                    # The union is at least lb: the paged kernel takes the group, no bucket pass.
                    if tx == 0:
                        NU[g] = lb
                else:
                    scan(cnt, off, 0, tx)  # the counts are complete: the barrier above
                    T.sync_threads()
                    n_valid = off[0, NBR]
                    for i in T.unroll(R):  # unrolled: xl stays in registers
                        for k in T.unroll(KP):
                            # Counting-sort scatter: the bucket's inclusive end counts down, so cnt ends as
                            # each bucket's first entry. Unused slots write to the spare entry NMAX (no
                            # shared store under a data-dependent `if`).
                            x = T.alloc_var("int32", init=xl[i * KP + k])
                            b = T.alloc_var("int32", init=bucket(T.max(x, 0)))
                            pos = T.alloc_var("int32", init=NMAX)
                            if x >= 0:
                                pos = off[0, b // NBC] + T.atomic_add(cnt[b // NBC, b % NBC], -1, return_prev=True) - 1
                            sx[pos] = x
                            sr[pos] = T.cast(i, "int8")
                    T.sync_threads()
                    for k in T.serial(per_thread):
                        q = k * threads + tx
                        if q < n_valid:
                            # Canonical: no earlier entry of the bucket holds the token. Which copy that is
                            # depends on the atomics; U, C and NU do not.
                            x, b, beg, size = span(sx, cnt, off, n_valid, q)
                            first = T.alloc_var("int32", init=1)
                            for t in T.serial(q - beg):
                                if sx[beg + t] == x:
                                    first = 0
                            if first != 0:
                                sr[q] = T.cast(T.bitwise_or(T.cast(sr[q], "int32"), CANON), "int8")
                                T.atomic_add(dist[b // NBC, b % NBC], 1)
                    T.sync_threads()
                    scan(dist, off, 1, tx)
                    if tx == 0:
                        NU[g] = off[1, NBR]
                    T.sync_threads()
                    # A group whose union exceeds max_nu goes to the paged kernel: U and C are not read.
                    keep = T.if_then_else(off[1, NBR] <= max_nu, 1, 0)
                    for k in T.serial(per_thread * keep):
                        q = k * threads + tx
                        if q < n_valid:
                            if canonical(sr[q]):
                                x, b, beg, size = span(sx, cnt, off, n_valid, q)
                                u = T.alloc_var("int32", init=0)
                                if b > 0:
                                    u = off[1, (b - 1) // NBC] + dist[(b - 1) // NBC, (b - 1) % NBC]
                                # One pass over the bucket for the slot and every row's count: row j's
                                # count in bits 16 (j % 4) of pack j // 4 (a count is at most T < 2^16).
                                cp = T.alloc_local([NPK], "int64")
                                for p in T.unroll(NPK):
                                    cp[p] = 0
                                for t in T.serial(size):
                                    y = sx[beg + t]
                                    rb = sr[beg + t]
                                    j = T.bitwise_and(T.cast(rb, "int32"), CANON - 1)
                                    if y < x and canonical(rb):
                                        u = u + 1
                                    for p in T.unroll(NPK):
                                        if y == x and j // 4 == p:
                                            cp[p] = cp[p] + T.shift_left(T.int64(1), 16 * (j % 4))
                                U[g, T.min(u, width - 1)] = x
                                for j in T.unroll(R):
                                    c = T.shift_right(cp[j // 4], 16 * (j % 4)) & 0xFFFF
                                    C[g, j, T.min(u, width - 1)] = T.cast(c, count_dtype)

    return main


# Every barrier of the kernel is one of its explicit T.sync_threads between phases (phases
# share no shared-memory words except through those barriers and atomics). Verified with
# TileLang 0.1.15 for CUDA only; other toolchains keep the sync planner (more barriers, same results).
sparse_union_fused_kernel.pass_configs = {"cuda": {"tl.disable_thread_storage_sync": True}}  # type: ignore[attr-defined]
