"""Union of a row group's selections by hash buckets in shared memory, one group of ``R`` rows per CTA.

Input: the resolve kernel's physical rows ``PH [n_groups * R, T]`` (unused slots negative),
unsorted. No sort: the CTA counts its ``R * T`` used entries per bucket ``b(x)`` (``NB``
buckets of mixed low bits, shared-memory atomics), scans the counts, scatters the entries
into bucket ranges (the order inside a bucket depends on atomics, nothing else does) and
then, per entry, looks only at its own bucket (a few entries on QSA selections):

* the entry is canonical iff no entry of its bucket holds the same token with a smaller
  element index ``e = i * T + p`` (row ``i``, slot ``p``);
* canonical entries are counted per bucket and scanned: the union slot of token ``x`` is
  ``u = (distinct tokens of buckets < b(x)) + (distinct tokens of bucket b(x) below x)``,
  so the union is ordered by ``(b(x), x)``: independent of the atomics' order (bitwise
  deterministic results) and near-sorted by token (4-token runs stay adjacent);
* the canonical entry writes ``U[g, u] = x`` and, for every row ``j``, ``C[g, j, u]`` = the
  number of entries of its bucket with token ``x`` in row ``j`` (duplicates included).

Every slot ``u < NU[g]`` of ``U`` and ``C`` is written, nothing else: neither output is
zero-filled. Cost per entry is linear in its bucket's size (quadratic in the worst case of
one token selected thousands of times, still correct).
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.
from typing import Any

__all__ = ["sparse_union_hash_kernel"]


def sparse_union_hash_kernel(rows_per_cta: int, t_cap: int, threads: int, buckets: int, count_dtype: str) -> Any:
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
    PH [n_groups * R, T] int32 physical rows (negative = unused); U [n_groups, W] int32,
    C [n_groups, R, W] count_dtype and NU [n_groups] int32 outputs (``W >= R * T``).
    """
    import tilelang.language as T

    R = rows_per_cta
    NMAX = R * t_cap
    NB = buckets
    log_nb = NB.bit_length() - 1
    NBR = threads // 32  # the bucket scans run as NBR rows of NBC, one warp per row
    NBC = NB // NBR
    per_thread = -(-NMAX // threads)
    if NB & (NB - 1) or NB % threads or NBC < 32:
        raise ValueError(f"buckets ({NB}) must be a power of two, a multiple of threads ({threads}) and >= 32 per warp")

    rows_pad, n_tok, n_grp, width = T.dynamic("rows_pad, n_tok, n_grp, width")

    def bucket(x):
        return (x ^ (x >> log_nb)) & (NB - 1)

    @T.macro
    def span(sx, cnt, off, q):
        """(token, bucket, first entry, entries) of entry ``q``'s bucket, as local values."""
        x = T.alloc_var("int32", init=sx[q])
        b = T.alloc_var("int32", init=bucket(x))
        beg = T.alloc_var("int32", init=0)
        if b > 0:
            beg = off[0, (b - 1) // NBC] + cnt[(b - 1) // NBC, (b - 1) % NBC]
        size = T.alloc_var("int32", init=off[0, b // NBC] + cnt[b // NBC, b % NBC] - beg)
        return x, b, beg, size

    @T.prim_func
    def main(
        PH: T.Tensor([rows_pad, n_tok], "int32"),
        U: T.Tensor([n_grp, width], "int32"),
        C: T.Tensor([n_grp, R, width], count_dtype),
        NU: T.Tensor([n_grp], "int32"),
    ):
        with T.Kernel(n_grp, threads=threads) as g:
            sx = T.alloc_shared([NMAX], "int32")
            se = T.alloc_shared([NMAX], "int16")
            canon = T.alloc_shared([NMAX], "int8")
            cnt = T.alloc_shared([NBR, NBC], "int32")  # entries per bucket, then their inclusive scan
            fill = T.alloc_shared([NB], "int32")
            dist = T.alloc_shared([NBR, NBC], "int32")  # distinct tokens per bucket, then their scan
            off = T.alloc_shared([2, NBR], "int32")  # row offsets of the two scans
            tx = T.get_thread_binding()
            n_el = R * n_tok

            for k in T.serial(NB // threads):
                b = k * threads + tx
                cnt[b // NBC, b % NBC] = 0
                dist[b // NBC, b % NBC] = 0
                fill[b] = 0
            T.sync_threads()
            for k in T.serial(per_thread):
                e = k * threads + tx
                if e < n_el:
                    x = PH[g * R + e // n_tok, e % n_tok]
                    if x >= 0:
                        T.atomic_add(cnt[bucket(x) // NBC, bucket(x) % NBC], 1)
            T.sync_threads()
            T.cumsum(src=cnt, dim=1)
            T.sync_threads()
            if tx == 0:
                off[0, 0] = 0
                for r in T.serial(NBR - 1):
                    off[0, r + 1] = off[0, r] + cnt[r, NBC - 1]
            T.sync_threads()
            n_valid = off[0, NBR - 1] + cnt[NBR - 1, NBC - 1]
            for k in T.serial(per_thread):
                e = k * threads + tx
                if e < n_el:
                    x = PH[g * R + e // n_tok, e % n_tok]
                    if x >= 0:
                        b = bucket(x)
                        beg = T.if_then_else(b > 0, off[0, (b - 1) // NBC] + cnt[(b - 1) // NBC, (b - 1) % NBC], 0)
                        pos = beg + T.atomic_add(fill[b], 1, return_prev=True)
                        sx[pos] = x
                        se[pos] = T.cast(e, "int16")
            T.sync_threads()
            for k in T.serial(per_thread):
                q = k * threads + tx
                if q < n_valid:
                    x, b, beg, size = span(sx, cnt, off, q)
                    me = T.alloc_var("int16", init=se[q])
                    first = T.alloc_var("int32", init=1)
                    for t in T.serial(size):
                        if sx[beg + t] == x and se[beg + t] < me:
                            first = 0
                    canon[q] = T.cast(first, "int8")
                    if first != 0:
                        T.atomic_add(dist[b // NBC, b % NBC], 1)
            T.sync_threads()
            T.cumsum(src=dist, dim=1)
            T.sync_threads()
            if tx == 0:
                off[1, 0] = 0
                for r in T.serial(NBR - 1):
                    off[1, r + 1] = off[1, r] + dist[r, NBC - 1]
                NU[g] = off[1, NBR - 1] + dist[NBR - 1, NBC - 1]
            T.sync_threads()
            for k in T.serial(per_thread):
                q = k * threads + tx
                if q < n_valid:
                    if canon[q] != 0:
                        x, b, beg, size = span(sx, cnt, off, q)
                        u = T.alloc_var("int32", init=0)
                        if b > 0:
                            u = off[1, (b - 1) // NBC] + dist[(b - 1) // NBC, (b - 1) % NBC]
                        for t in T.serial(size):
                            if sx[beg + t] < x and canon[beg + t] != 0:
                                u = u + 1
                        U[g, T.min(u, width - 1)] = x
                        for j in T.serial(R):
                            c = T.alloc_var("int32", init=0)
                            for t in T.serial(size):
                                if sx[beg + t] == x and T.cast(se[beg + t], "int32") // n_tok == j:
                                    c = c + 1
                            C[g, j, T.min(u, width - 1)] = T.cast(c, count_dtype)

    return main
