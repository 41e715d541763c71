"""One-split post-op of the union path: sigmoid gate, output dtype and LSE from FP32 partials.

With one split the merge (:mod:`.sparse_merge_kernel`) reduces to an elementwise pass::

    out = sigmoid(gate) * o  (0 where lse = -inf: the row used nothing)

so this kernel has no max, weights or barrier: one warp per (query row, Q head), lane ``l``
owns features ``l, l + 32, ..``, and a register cap keeps the SMs full of warps. The output
has runtime strides, so its stores are per element; with this layout each store
instruction of a warp writes 64 consecutive bytes (whole 32-byte sectors). Rows of groups the union kernel left to the
paged kernel (union size above ``max_nu``) are skipped: the paged kernel writes them.

Measured on the H200 (2026-11-30, session 7, the 4096-row prefill's ``[1, 4096, 24, 256]``
partials, CUDA-graph medians after an L2 flush, us): the merge kernel took 168 there (one
64-thread CTA per pair); warp-per-pair merges with the split loop still compiled in took
114-155 (113 registers: 16-18 warps per SM); this kernel with lane ``l`` owning features
``8 l .. 8 l + 7`` took 128 at 92% occupancy (ncu): each 2-byte store instruction wrote 2
bytes of each of 16 sectors, 12.6 M L2 sector writes for 1.6 M sectors of output, with the
L2 at 81% and DRAM at 23% of peak; with lane ``l`` owning ``l, l + 32, ..`` (whole-sector
stores) and the loads still behind the ``NU`` test, 83.6 / 83.6. An FP32 -> BF16 ``copy_``
of the same partials takes 36. End to end (90%-overlap prefill, union path): 1898 / 1900 /
1902 against 1983 / 1987 / 1985 with the merge kernel.

Not kept: letting the paged kernel's CTAs of union rows (which skip their gather) do this
instead of a separate pass, 1904 / 1904 / 1912 against 1975 / 1978 / 1974 with the merge
kernel (another process): no better than this kernel, for a larger paged kernel. Two or four
pairs per warp with every load before any store (more bytes in flight; session 8, same
partials, two rounds): 100.4 / 100.5 and 104.2 / 104.2 against 83.3 / 83.2.

The partials are read only after the ``NU`` test (session 14, probe ``.devrun/s14_fin.py``,
same process, three rounds, us): the kernel alone on these partials with every group taken
91.1 / 91.2 / 91.2 against 92.7 / 92.9 / 92.8 with the loads issued before the test, and with
every group left to the paged kernel (uniform selections) 21.4 (x3) against 27.4 / 27.3 /
27.5, where the loads read 100 MB of partials nobody wrote. End to end, same process: uniform
prefill 2746 / 2776 / 2829 against 2819 / 2787 / 2822, 90% overlap and the mixed batch
unchanged (1642-1663 against 1639-1644, 1353-1423 against 1353-1356); outputs bitwise equal.

Gate loads (session 21): the loop used to load, transform and store one feature at a time, so
with a per-head gate (the launcher's ``[rows, Hq]`` gate expanded along D, stride 0) each lane
loaded one address and computed one sigmoid eight times, between its stores. Now every gate load
comes before the first store, and a per-head gate is one load and one sigmoid per lane. Which of
the two changes carries the gain was not measured apart (the benchmark's gate is per head).
Kernel timeline (CUPTI through ``torch.profiler``, 10 graph replays after a read flush, medians,
probe ``.devrun/s21_tl.py``, us): 90%-overlap prefill 81.3 -> 43.4, the mixed batch 43.1 -> 24.5;
whole calls 1642.5 -> 1608.2 and 1353.0 -> 1336.2 (two leases of one session; outputs bitwise
equal to a variant with 16-byte stores, below). Not kept (``.devrun/s21_fin.py``,
``.devrun/s21_fthreads.py``, same process, three rounds, whole calls, us): lanes owning 8
consecutive features with one 16-byte store each (``out`` as 16-byte rows where its layout
allows), 1606-1608 against 1608-1610 (overlap), 1327-1329 against 1328-1329 (mixed), uniform
unchanged: the stores were not what cost; 512 or 1024 threads per CTA (4x fewer CTAs where
nothing is finalized), overlap 1605-1607 / 1609-1611 against 1602-1607, uniform 2721-2727 /
2713-2720 against 2713-2720.

No-work launches (session 22, not kept; patch ``.devrun/s22_finalize_pairs.diff``, probe
``.devrun/s22_ab.py``). Where nothing is finalized the kernel still costs ~20 us: every warp slot
of an SM is taken ~12 times over by a warp that loads one NU and exits. Each warp walked ``P``
consecutive pairs in turn instead (one NU load per pair, the same row's hitting L1), predicted
~-15 us on uniform blocks and a few us more where every pair is finalized. Outputs bitwise equal;
the GPU tests passed with ``P = 4``. Whole calls, same process, three rounds, us (P = 1 / 4 / 12):
90% overlap 1578.5-1582.0 / 1587.2-1589.3 / 1592.8-1596.1, mixed batch 1327.6-1329.3 /
1331.7-1332.1 / 1334.0-1335.8, uniform 2689.6-2711.2 / 2688.8-2710.9 / 2691.2-2712.8: the loss
where pairs are finalized is clear, the gain on uniform blocks is not visible in their spread.
Session 27's kernel timeline of the default uniform call (probe ``.devrun/s27_attr.py``, CUPTI, ten
graph replays, medians) puts a number on that cost: the no-work grid runs from 94 to 118 us,
beside the end of the sort, and the paged kernel starts at 116 instead of right after the sort
(101): ~15 us. A grid of at most one round of the SMs (1056 CTAs of 256 threads, each warp
taking pairs ``(i n_cta + cta) W + warp`` in turn; probe ``.devrun/s27_fin2.py``, same process,
three rounds, us, outputs bitwise equal) took uniform blocks to 2487-2488 against 2493-2495, but
90% overlap to 1553-1557 against 1543-1546 and the mixed batch to 1294-1295 against 1283
(this kernel 52.9 against 44.1 us on the 90%-overlap timeline). Not kept.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.
from typing import Any

from ._sparse_macros import gated_output_strides, sigmoid_gate
from .sparse_paged_kernel import DIM

__all__ = ["sparse_finalize_kernel"]

LANES = 32
MAX_THREADS_PER_SM = 2048


def sparse_finalize_kernel(dtype: str, gate_dtype: str, threads: int) -> Any:
    """Build the prim_func.

    Parameters
    ----------
    dtype : str
        Output dtype ("bfloat16" / "float16").
    gate_dtype : str
        Gate dtype ("float32" or ``dtype``); irrelevant when the call has no gate.
    threads : int
        Threads per CTA, a multiple of 32 dividing 2048 (one warp per (row, head) pair); the
        launch bounds ask for a full SM of such CTAs.

    Kernel arguments
    ----------------
    OP [1, rows, Hq, D] float32 normalized outputs and LP [1, rows, Hq] float32 natural-log
    LSE (-inf: the row used nothing); GATE [rows, Hq, D] gate_dtype, OUT [rows, Hq, D] dtype
    and LSE [rows, Hq] float32, runtime strides (no gate / no LSE: a dummy view and
    ``has_gate = 0`` / ``has_lse = 0``); NU [n_groups] int32 union sizes: row ``r`` is
    written iff ``NU[r // u_rows] <= max_nu`` (``u_rows >= 1``: the group size).
    """
    import tilelang.language as T

    if threads % LANES or MAX_THREADS_PER_SM % threads:
        raise ValueError(f"threads must be a multiple of {LANES} dividing {MAX_THREADS_PER_SM}, got {threads}")
    D = DIM
    V = D // LANES
    W = threads // LANES
    acc = "float32"
    rows, hq, n_grp = T.dynamic("rows, hq, n_grp")
    sg, so, sl = gated_output_strides()

    @T.prim_func
    def main(
        OP: T.Tensor([1, rows, hq, D], acc),
        LP: T.Tensor([1, rows, hq], acc),
        GATE: T.StridedTensor([rows, hq, D], sg, gate_dtype),
        OUT: T.StridedTensor([rows, hq, D], so, dtype),
        LSE: T.StridedTensor([rows, hq], sl, acc),
        NU: T.Tensor([n_grp], "int32"),
        has_gate: T.int32,
        has_lse: T.int32,
        u_rows: T.int32,
        max_nu: T.int32,
    ):
        with T.Kernel(T.ceildiv(rows * hq, W), threads=threads) as bx:
            T.annotate_min_blocks_per_sm(MAX_THREADS_PER_SM // threads)
            tx = T.get_thread_binding()
            lane = tx % LANES
            # Pairs past the end repeat the last one (the same values written twice).
            pair = T.min(bx * W + tx // LANES, rows * hq - 1)
            r = T.alloc_var("int32", init=pair // hq)
            h = T.alloc_var("int32", init=pair % hq)
            o = T.alloc_local([V], acc)
            gate = T.alloc_local([V], acc)
            # The partials are read only for rows the union kernel wrote: rows it left to the
            # paged kernel (every row, on uniform selections) cost one NU load, not 4 KB each.
            take = T.alloc_var("int32", init=T.if_then_else(NU[T.min(r // u_rows, n_grp - 1)] <= max_nu, 1, 0))
            if take != 0:
                lse = T.alloc_var(acc, init=LP[0, r, h])
                for i in T.unroll(V):
                    o[i] = OP[0, r, h, i * LANES + lane]
                # Every gate load before the first store; a per-head gate (expanded along D: stride 0)
                # is one load and one sigmoid, not one per feature (module docstring: Gate loads).
                for i in T.unroll(V):
                    gate[i] = 1
                if has_gate != 0:
                    if sg[2] == 0:
                        g0 = T.alloc_var(acc, init=sigmoid_gate(GATE[r, h, 0]))
                        for i in T.unroll(V):
                            gate[i] = g0
                    else:
                        for i in T.unroll(V):
                            gate[i] = sigmoid_gate(GATE[r, h, i * LANES + lane])
                for i in T.unroll(V):
                    OUT[r, h, i * LANES + lane] = T.cast(
                        T.if_then_else(lse > -T.infinity(acc), o[i] * gate[i], 0), dtype
                    )
                if has_lse != 0 and lane == 0:
                    LSE[r, h] = lse

    return main
