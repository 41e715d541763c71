"""Per-row ordering of the selected token ids before the paged kernel (the prefill schedule).

One CTA per query row: a counting sort of the row's ``T`` token ids by context region
(``REGIONS`` regions of ``2^shift`` request-local ids; ids below 0 go to the first, ids past
the last region to the last), written to ``SO[r, :T]``. The paged kernel then walks every
row's selection region by region, so the CTAs that run side by side on one request read the
same part of its cache at about the same time and share it through the L2: the uniform-block
prefill of issue 4 is held by L2 traffic (96.8% busy in Nsight Compute, 21.8% hit rate), not
by the SMs. Softmax and gate do not depend on the order of a row's slots: the result changes
only by FP32 summation order, and the order is a function of the ids alone, so results stay
bitwise repeatable.

Thread ``t`` holds slots ``t, t + threads, ...`` (coalesced loads). Pass 1 counts its slots
per region into column ``t`` of a ``[REGIONS, threads]`` int16 table; one exclusive scan of the
table in region-major order gives every (region, thread) its first output slot (each thread
scans a chunk of 64 consecutive entries with 16-byte loads and stores; the chunks are padded by
16 bytes, so eight neighbouring threads' accesses fall on distinct bank groups); pass 2 puts
each thread's slots there (within a region: by thread, then by slot) in shared memory, and the
row is stored coalesced.

The launcher runs it on every prefill-schedule call with ``T <= SORT_CAP``: beside the union
prep on the union path, and without it (``MATE_SPARSE_UNION=0``, selections wider than the union
prep holds) on every row, as one group whose ``NU`` exceeds ``max_nu``
(:func:`.sparse_union.sorted_ids`). Beside the prep, a CTA reads its group's ``NU`` (one thread,
through shared memory: the whole CTA takes one decision) while the prep may still be writing it.
The launcher fills ``NU`` with ``UNMEASURED`` first, so the CTA sees either that or the prep's
final value. Rows of groups already taken for the union kernel (``NU[r // u_rows] <= max_nu``)
are skipped: the paged kernel does not read their ids, and ``SO`` keeps whatever it held there.
Every other row is ordered: rejected groups, unmeasured ones (the decode rows of a mixed batch)
and those not measured yet, so the ids the paged kernel reads do not depend on the timing.

Beside the prep instead of after it (session 29, probe ``.devrun/s29_sortfork.py``, HEAD's kernel
from a copy, same process, three rounds, CUDA-graph medians after a read flush, us): uniform
blocks 2444-2455 against 2459-2487, 90% overlap 1537-1541 against 1533-1538, the mixed batch
1266-1267 against 1268-1271 (its decode rows now ordered: results within 1.4e-3 of the given
order's). On the kernel timeline (CUPTI) the paged kernel of the uniform call starts at 84 us
instead of 109: the sort runs from 25 to 81 us, filling the prep's tail (the prep 1-37).
Ordering every row beside the prep, without reading ``NU`` (no fill): uniform 2435-2470, but
90% overlap 1578-1581 and mixed 1288-1290. A first build read ``NU`` in every thread: CTAs that
saw both values parted at the barriers and shuffles, and graph replays under the profiler died
with illegal-instruction and illegal-address errors (``.devrun/s29_repro.py``).
Not kept (same session, probe ``.devrun/s29_sortg.py``): skipping the unrolled steps past the row's
width for the whole CTA (9 of 16 steps on 2051-slot rows; same output): the sort alone 60.7-61.1
against 52.1-52.6 us, the uniform call 2439-2445 against 2420-2429. The guarded loads no longer
issue together.

Measured (H200, session 12, the 4096-row prefill of ``benchmarks.bench_sparse``, 2051-slot
selections, CUDA-graph medians after a read flush, us): the paged kernel alone on uniform
blocks took 2641 / 2800 with each row fully sorted beforehand, 3070 / 3276 as given. Sorts
that cost more than they gain: a bitonic sort in shared memory (one CTA per row, 78 stages)
800 for the 4096 rows, ``torch.sort`` 407, Triton's ``tl.sort`` 1970; a first version of
this kernel with contiguous per-thread slots (strided loads, scattered 4-byte global stores)
116. Session 13 (same process, three rounds, probe ``.devrun/s13_sort_ab.py``): the table scans
with 16-byte accesses (and 64 registers instead of 72, so four CTAs per SM instead of three)
55-59 against 65-67 with one 2-byte access per entry, the same output.

Without the union path (session 14, probe ``.devrun/s14_sort.py``, the paged kernel on the
ids as given against this sort + the paged kernel, same process, three rounds, us): T = 2051
uniform blocks 3244 / 3060 / 3057 against 2631 / 2743 / 2718, 90% overlap 2564 / 2519 / 2521
against 2573 / 2574 / 2571, the mixed batch 1757 / 1697 / 1698 against 1731 / 1730 / 1731;
T = 4095 (1023 blocks + tail, past the union prep's width) uniform 6350 / 5966 / 5970
against 4966 / 5017 / 5259, 90% overlap 4833 / 4791 / 4792 against 4884 / 4846 / 4845. The
order pays 11-17% where rows share little and costs ~1-2% (mostly the sort itself) where
neighbouring rows already read the same blocks, so the prefill schedule always sorts.

Not kept (session 24, probe ``.devrun/s24_ab.py`` against this kernel's copy
``.devrun/s24_sort_old.py``): a warp multisplit. Each warp ranked its slots within their region
with ``match.any`` step by step and advanced a per-warp count (a 64 x 8 table instead of 64 x
256, one scan entry pair per thread), the order (region, warp, step, lane). Output equal to that order on the uniform prefill's ids. Sorting all 4096 rows alone,
same process, three rounds, us: 65.3-65.4 (51 registers), 57.2-57.3 capped at 40 registers (six
CTAs per SM, 20 bytes of spill), against 54.2-54.6 for this kernel: the per-step chain (match,
shared load, ``__syncwarp``, store) costs more than the table scans it saves.

Not kept either (session 25, probe ``.devrun/s25_sort.py``): 128 threads per row instead of 256
(half the count table to zero and scan per row; 128 registers, so still four CTAs per SM, now
limited by registers instead of shared memory). Its output equalled its order (``threads = 128``).
Same process, three rounds, us, 256 / 128: the sort alone 54.2-54.7 / 52.0-52.2; whole calls,
uniform prefill 2586-2593 / 2583-2596, uniform with the union path off 2507-2521 / 2505-2523, the
mixed batch 1308-1315 / 1311-1317. The table passes are not what the sort waits on.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.
from typing import Any

__all__ = ["sparse_sort_kernel", "SORT_CAP", "REGIONS", "region_shift"]

SORT_CAP = 4096  # largest selection width one CTA orders
REGIONS = 64  # NBK: context regions per request


def region_shift(capacity: int) -> int:
    """``shift`` such that ``REGIONS`` regions of ``2^shift`` ids cover ``capacity`` request-local ids."""
    return max(0, (max(capacity, 1) - 1).bit_length() - (REGIONS - 1).bit_length())


def sparse_sort_kernel(threads: int) -> Any:
    """Build the prim_func.

    Parameters
    ----------
    threads : int
        Threads per CTA (a multiple of 32 dividing ``SORT_CAP``).

    Kernel arguments
    ----------------
    TI [rows, T] int32 token ids (runtime strides, ``T <= SORT_CAP``); NU [n_groups] int32
    union sizes from the union prep; SO [rows, T] int32 output (contiguous); scalars
    ``shift`` (:func:`region_shift` of the K/V capacity), ``u_rows`` (rows per group) and
    ``max_nu`` (groups with ``NU <= max_nu`` are skipped).
    """
    import tilelang.language as T

    NBK = REGIONS
    S = SORT_CAP // threads  # slots per thread
    CPT = NBK  # table entries each thread scans (the table has NBK * threads of them)
    W = threads // 32
    VEC = 8  # int16 per 16-byte access
    # Each thread's scan chunk is padded by 16 bytes, so the 16-byte accesses of 8 neighbouring
    # threads (one shared-memory wavefront) start on distinct bank groups.
    CHUNK = CPT + VEC
    if threads % 32 or SORT_CAP % threads or CPT % VEC:
        raise ValueError(f"unsupported sort shape: threads={threads}")

    ROLLED = {"pragma_unroll_factor": 1}

    def at(e):
        return e + VEC * (e // CPT)

    rows, n_tok, n_grp = T.dynamic("rows, n_tok, n_grp")
    st = T.dynamic("st0, st1", "int64")

    @T.prim_func
    def main(
        TI: T.StridedTensor([rows, n_tok], st, "int32"),
        NU: T.Tensor([n_grp], "int32"),
        SO: T.Tensor([rows, n_tok], "int32"),
        shift: T.int32,
        u_rows: T.int32,
        max_nu: T.int32,
    ):
        with T.Kernel(rows, threads=threads) as r:
            cnt = T.alloc_shared([CHUNK * threads], "int16", scope="shared")  # entry b * threads + t at at(.)
            out_s = T.alloc_shared([SORT_CAP], "int32", scope="shared")
            wsum = T.alloc_shared([W], "int32", scope="shared")
            ids = T.alloc_local([S], "int32")
            reg = T.alloc_local([S], "int32")
            # 16 bytes of this thread's scan chunk (at(tx * CPT + c) = tx * CHUNK + c)
            part = T.alloc_local([VEC], "int16")
            nu_s = T.alloc_shared([1], "int32", scope="shared")
            tx = T.get_thread_binding()
            # The union prep may be writing NU while this CTA reads it (the launcher runs the two side
            # by side; a group not yet measured holds the launcher's fill, UNMEASURED, and is ordered).
            # One thread reads it for the CTA: threads that read it apart could see both values and
            # part at the barriers and shuffles below.
            if tx == 0:
                nu_s[0] = NU[r // u_rows]
            T.sync_threads()
            nu = T.alloc_var("int32", init=nu_s[0])
            if nu > max_nu:
                for c in T.vectorized(CPT):  # the table is zeroed chunk by chunk (16-byte stores)
                    cnt[tx * CHUNK + c] = T.int16(0)
                T.sync_threads()
                for k in T.unroll(S):
                    ids[k] = TI[r, T.min(k * threads + tx, n_tok - 1)]
                    reg[k] = T.min(T.max(ids[k], 0) >> shift, NBK - 1)
                for k in T.unroll(S):
                    if k * threads + tx < n_tok:  # the thread's own column: no other thread touches it
                        cnt[at(reg[k] * threads + tx)] = cnt[at(reg[k] * threads + tx)] + T.int16(1)
                T.sync_threads()
                # Exclusive scan of the table in region-major order: each thread its CPT entries,
                # then the threads' totals across the CTA.
                tot = T.alloc_var("int32", init=0)
                # Both chunk loops stay rolled (#pragma unroll 1): unrolled, nvcc hoists all eight
                # 16-byte loads and the kernel needs 117 registers (2 CTAs per SM) instead of 64 (4).
                for v in T.unroll(CPT // VEC, annotations=ROLLED):
                    for c in T.vectorized(VEC):
                        part[c] = cnt[tx * CHUNK + v * VEC + c]
                    for c in T.unroll(VEC):
                        tot = tot + T.cast(part[c], "int32")
                inc = T.alloc_var("int32", init=tot)
                for o in T.unroll(5):
                    up = T.shfl_up(inc, 1 << o)
                    if tx % 32 >= (1 << o):
                        inc = inc + up
                if tx % 32 == 31:
                    wsum[tx // 32] = inc
                T.sync_threads()
                base = T.alloc_var("int32", init=inc - tot)
                for w in T.serial(W):
                    if w < tx // 32:
                        base = base + wsum[w]
                for v in T.unroll(CPT // VEC, annotations=ROLLED):
                    for c in T.vectorized(VEC):
                        part[c] = cnt[tx * CHUNK + v * VEC + c]
                    for c in T.unroll(VEC):
                        n = T.cast(part[c], "int32")
                        part[c] = T.cast(base, "int16")
                        base = base + n
                    for c in T.vectorized(VEC):
                        cnt[tx * CHUNK + v * VEC + c] = part[c]
                T.sync_threads()
                for k in T.unroll(S):
                    if k * threads + tx < n_tok:
                        pos = T.cast(cnt[at(reg[k] * threads + tx)], "int32")
                        cnt[at(reg[k] * threads + tx)] = T.cast(pos + 1, "int16")
                        out_s[pos] = ids[k]
                T.sync_threads()
                for k in T.unroll(S):
                    if k * threads + tx < n_tok:
                        SO[r, k * threads + tx] = out_s[k * threads + tx]

    return main


# The kernel places its own barriers: TileLang's planner cannot tell the data-dependent shared
# indices of the passes apart and would add more.
sparse_sort_kernel.pass_configs = {"cuda": {"tl.disable_thread_storage_sync": True}}  # type: ignore[attr-defined]
