"""Schedules of the paged sparse-attention kernel and the ``num_splits=None`` heuristic.

A schedule is a compile-time tile of :mod:`.sparse_paged_kernel` plus the runtime split
count. The production tile ``W4`` is 4 warps on a 16 x 32 score tile (mma m16n8k16,
Q heads padded 12 -> 16 on chip; the features of QK split over the warps, each holding its
quarter of Q in registers: ``split_qk``, :mod:`._sparse_qk`; one-split schedules load it there
straight from global memory, ``q_regs``), 512 slots
resolved per chunk, launch bounds capping registers for 4 CTAs per SM, the ``eager``
prologue (first token ids loaded before the request search, a parallel ``cu_seqlens_q``
search, each chunk's ids loaded one chunk ahead), one gather pipeline per split
(``Schedule.one_pipe``: the next chunk's slots are resolved inside the pipeline into a
second offset buffer, so the gather does not drain at chunk boundaries) and PDL (the merge
kernel launches while the paged kernel runs and waits on it with ``griddepcontrol.wait``).

One pipeline per split against one per chunk, same kernel (H200, 2026-11-29, session 3,
``.devrun``-style probe: CUDA-graph medians after a read flush, median of 3 interleaved
rounds, one run, us; old W4 = the previous kernel, per-chunk pipeline without the
next-chunk id load, from two other runs):

=====================  =========  ==========  ==========
case                   per chunk  one pipe    old W4
=====================  =========  ==========  ==========
decode 64 x 1 (4 spl)       96.3        90.6   91.1-92.0
decode 64 x 4 (1 spl)      292.3       281.4  282.9-286.8
prefill 4096, overlap       3230        3082   3178-3181
prefill 4096, uniform       3556        3368   3390-3582
=====================  =========  ==========  ==========

A kernel with only the one-pipeline loop measured no better than old W4 on the prefill
(3203 vs 3178 us in one run) and ~1% faster on decode; the shipped kernel keeps both
loops behind the runtime switch (one specialization) and the benchmark sweep times both.

Selection order (H200, 2026-11-29, session 4, probe, two rounds, us): the same prefill
selections sorted ascending per row (so CTAs that run side by side walk the context in step
and share more of it through L2) take 3157 / 3178 instead of 3290 / 3306 on uniform blocks
and 3105 / 3103 instead of 3088 / 3081 with 90% overlap; sorting the ``[4096, 2051]`` ids
with ``torch.sort`` costs 412 us, so the launcher keeps the caller's order. Session 9 (same
process, three interleaved rounds, us): uniform blocks sorted per row by logical id 2930 /
2982 / 3134 and by physical cache row 2932 / 2977 / 2957 against 3180 / 3193 / 3250 as given
(paged kernel alone), 3078-3127 against 3285-3593 through the default union path; 90% overlap
unchanged (2925-2927 alone, 1649-1651 by default). The union prep already buckets every
row's slots; with a monotone bucket function it could emit each paged-kernel row's slots in
physical order (as validated physical ids for the paged kernel's ``PHYSICAL`` row mode over an
identity block table). Not built: rows the prep leaves unmeasured (decode rows of a mixed
batch) would need the same, and the kernel runs one row mode per call.

What bounds the uniform prefill (H200, session 10, CUDA-graph medians after a read flush,
paged kernel alone, same process, us). Removing every cache miss would gain at most ~7%:

* The same call with the block table folded into 256 pages, so all K/V reads come from a
  16 MiB pool that stays in L2, took 2905-2929. As given it took 3089-3214.
* Selections split by logical region into ``S`` sub-rows (ids in ``[s * CTX / S, (s + 1) *
  CTX / S)``, -1 padded), given as ``S x 4096`` rows with explicit positions. Region-major
  row order (the CTAs running together read one 256/S MiB slice of the context) and
  row-major order (same work, no shared slice) took the same time:
  ``S = 4``: 4365 / 4408 against 4391 / 4324; ``S = 8``: 5185 / 5190 against 5208 / 5209;
  ``S = 16``: 7234 / 7239 against 7263 / 7252.
* A Triton kernel that only gathers and sums the same K/V rows (one program per
  (row, KV head), 64 slots a step) took 2125 from the 16 MiB pool and 3945 from the
  given one.

Nsight Compute on the same call (one replay, SM clock ~1.8 GHz under the profiler) shows
which unit limits each case:

==========================  ===========  ===========
metric                      as given     16 MiB pool
==========================  ===========  ===========
duration (ms)               3.10         2.90
L2 hit rate                 21.9%        98.2%
DRAM throughput             82%          1.7%
L2 throughput               95.7%        58%
L1TEX / shared throughput   73%          78%
issue slots busy            38%          41%
==========================  ===========  ===========

Both cases ran 16 warps per SM (4 CTAs, limited by registers and shared memory). About 40%
of the cycles between a warp's instructions are short-scoreboard stalls, i.e. waits on
shared memory.

As given, the L2 (its hits plus its fills from DRAM) limits. Without misses, the shared-memory
pipe of the SMs limits at ~2.9 ms, i.e. ~0.71x of the no-reuse floor (4076 us in the suite).
The L2-resident gather alone is ~0.52x. The issue's 0.6x (2.4 ms) therefore needs both
fewer L2 transactions per selected slot (shared gathers, which uniform selections do not
offer to groups of 4 rows) and less shared-memory traffic per slot than the gather ->
mma m16 -> online softmax -> PV on a 16-row tile. (Per-token TMA loads, the lead named here
then, were measured in session 15: :mod:`.sparse_paged_kernel`. Session 23 measured the QK
operand traffic and cut its Q part: the same module, "Score tile with the features split".)

Session 12, after the lazy-max softmax (:mod:`.sparse_paged_kernel`), the same profile
(``.devrun/s12_ncu.sh``, one replay each, SM clock 1.79 GHz, paged kernel alone):

==========================  ===========  ===========  ============
metric                      as given     16 MiB pool  90% overlap
==========================  ===========  ===========  ============
duration (ms)               3.04         2.54         2.54
L2 hit rate                 21.8%        98.3%        85.2%
DRAM throughput             84%          1.9%         12%
L2 throughput               96.8%        66%          63%
L1TEX / shared throughput   65%          79%          79%
issue slots busy            36%          43%          43%
==========================  ===========  ===========  ============

The L2-resident call went from 2.90 to 2.54 ms (0.62x of the floor); the 90%-overlap rows now
run at exactly that rate, so their misses no longer cost anything. As given, uniform blocks
are held by the L2 (96.8%), 0.5 ms above the resident rate: the 0.6x target now rests mostly
on the L2 traffic (locality, e.g. the sorted selections above), then on a last ~5% of the
per-slot pipeline (short-scoreboard waits on shared memory are still ~37% of the cycles
between a warp's instructions).

What locality is left (session 13, probe ``.devrun/s13_order.py``, paged kernel alone, ids
reordered in torch outside the timing, three rounds, us): as given 3275 / 3085 / 3067; the sort
kernel's 64-region order 2730 / 2789 / 2864; 256 regions 2759 / 2754 / 2687; fully ascending
2728 / 2704 / 2745; 64 regions walked backwards on every other wave of 528 CTAs 2679 / 3145 /
2822; rotated by the row's place in its wave 2772 / 2954 / 2811; the 64-region order over a
16 MiB pool (L2-resident) 2599 / 2665 / 2622. The region order is within ~5% of the
L2-resident time, so no order will take the uniform prefill to 0.6x: the per-slot pipeline
itself is 0.64x of the floor.

Ways of cutting that work, all measured or tried in the same session:

* Q held in registers for the QK mma, loaded once per CTA; the production kernel reads it
  from shared memory every block. Results were bitwise identical, and it was slower everywhere:

  ==================  ===============  ====================  ====================
  case                production       Q in registers,       Q in registers,
                                       4 CTAs/SM (spills)    3 CTAs/SM
  ==================  ===============  ====================  ====================
  decode 64 x 1       80.3-80.9        102.8-103.3           106.4-106.8
  decode 64 x 4       261-264          339-343               352-353
  overlap prefill     2902-2929        3127-3155             2972-2994
  uniform prefill     3108-3214        4169-4541             3211-3407
  ==================  ===============  ====================  ====================

* Transposed tiles on wgmma (session 12, probe ``.devrun/tpaged_s12.py``, not kept): ``S^T = K
  Q^T`` (``m64n16k16``, the 64 slots of a block on M) and ``O^T += V^T P^T`` (``D = 256`` on M),
  so the warpgroup reads Q once per block from shared memory instead of once per warp, and
  no ``ldmatrix`` feeds the MMAs. The 64-slot K and V tiles (72 KB with Q) leave room for two
  CTAs per SM instead of four. The softmax then reduces over slots, i.e. across the four
  warps. Results agreed with the production kernel (rel. L2 0.0051 against the PyTorch path,
  same LSE error). Same process, two interleaved rounds, CUDA-graph medians after a read
  flush, paged kernel alone, us (``T`` = cross-warp max and sum per block, ``T+sum`` = the
  sum kept per thread and reduced once at the end):

  ========================  ===============  ===============  ===============
  case                      production       T                T+sum
  ========================  ===============  ===============  ===============
  decode 64 x 1             82.3 / 82.3      101.8 / 102.0    102.0 / 102.3
  decode 64 x 4             268.7 / 267.5    297.4 / 297.4    294.5 / 294.5
  uniform prefill           3314 / 3121      3693 / 3752      3327 / 3303
  uniform, ids sorted       2913 / 2953      3687 / 3682      3230 / 3219
  90%-overlap prefill       2903 / 2923      3601 / 3615      3159 / 3181
  ========================  ===============  ===============  ===============

  With half the CTAs, every barrier of the block step stalls more of the SM. Dropping the
  four per-block sum reductions gained 10-12%; the same lesson, applied to the production
  tile, became the lazy-max softmax of :mod:`.sparse_paged_kernel`.

  Session 14 measured the transposed tile again with that softmax (its cross-warp max now
  only on the rare rescale; patch ``.devrun/s14_wg.diff``: a ``keys_on_m`` flag of the paged
  kernel and a 64-slot, 128-thread tile; 116 registers, 83 KB of shared memory, two CTAs per
  SM). It agreed with the PyTorch path (rel. L2 0.0052, the same LSE error as ``W4``,
  bitwise repeatable) and was still slower everywhere (probe ``.devrun/s14_wg.py``, same
  process, three rounds, us, ``W4`` first): default call, uniform blocks 2738 / 2913 / 2915
  against 3086 / 3062 / 3066; paged kernel alone, uniform 3074 / 3068 / 3776 against
  3244 / 3257 / 3524, 90% overlap 2538 / 2518 / 2538 against 2812 / 2831 / 2833; decode
  64 x 1 81.0-81.1 against 99.7-99.9; 64 x 4 266.7-267.1 against 288.2-288.5. Halving the
  shared-memory operand traffic does not make up for half the resident CTAs.

  With that softmax the candidate tiles stay behind ``W4`` (same process, two rounds, paged
  kernel alone, us; probe ``.devrun/s12_tiles.py``): decode 64 x 1 81.2 / 81.3 against W2
  89.6 / 89.7, N64 98.8 / 98.9, W4_C32 105.0 / 105.1; decode 64 x 4 266.8 / 267.1 against
  281.6, 293.5, 352.4; uniform prefill 3276 / 3079 against 3767 / 3789, 3278 / 3308,
  3261 / 3238; 90%-overlap prefill 2547 / 2538 against 3421, 3149, 2857 / 2852.
  Session 21 (probe ``.devrun/s21_w8.py``, paged kernel alone on sorted ids, same process,
  three rounds, us): 8 warps on a 16 x 64 tile (256 threads, two CTAs and so the same 16 warps
  per SM, half the barriers per slot; 128 registers, no spills; outputs within 2.3e-3 of W4's)
  took 2944-2945 against W4's 2579-2582 on uniform blocks and 2926-2927 against 2529-2530 with
  90% overlap.
* A two-stage gather pipeline, or 16-slot blocks that would let two stages fit at 4 CTAs
  per SM, does not compile with TileLang 0.1.15:

  - ``num_stages=2`` in the per-chunk loop fails in layout inference:
    ``Layout::Reshape``, ``(32, 256)`` vs ``(2, 32, 256)``;
  - ``block_n=16`` with 4 warps has no valid warp partition for ``M=16, N=16``.

  Session 18 (probe ``.devrun/s18_deep.py``, patched kernel ``.devrun/s18_spk.py``; not
  kept). With the runtime trip counts in place, ``num_stages >= 2`` fails later, in CUDA
  code generation (``Downcast from tirx.Sub to ir.IntImm``: the pipeline's closing waits get
  a runtime group count). It compiles when the per-chunk loop runs a constant
  ``chunk_blocks`` steps (slots past the split's end are masked; their copies are zero
  fills, no reads). The idea: fewer, longer CTAs with more copies in flight each, and at
  one split no partials and no merge. Outputs were bitwise equal to the shipped path.
  H200, same process, three rounds, CUDA-graph medians after a read flush, us:

  ===================================================  ======================
  variant (``chunk_blocks``, stages, launch-bound
  minimum CTAs per SM, splits)                         time
  ===================================================  ======================
  decode 64 x 1, shipped ``W4``, 4 splits              80.9 / 81.4 / 81.4
  68, 2 stages, 1 CTA per SM, 1 split (no merge)       116.2 / 116.2 / 115.9
  68, 3 stages, same                                   117.5 / 117.4 / 117.3
  68, 4 stages, same                                   120.4 / 120.3 / 120.1
  36, 2 stages, 2 per SM, 2 splits                     89.6 / 89.9 / 89.7
  36, 3 stages, 2 per SM, 2 splits                     117.1 / 117.0 / 117.0
  20, 2 stages, 3 per SM, 3 splits                     156.7 / 157.0 / 157.1
  decode 64 x 4, shipped ``W4``, 1 split               264.8 / 265.1 / 265.4
  16, 2 stages, 2 per SM                               335.3 / 335.1 / 335.6
  16, 3 stages, 2 per SM                               436.2 / 436.2 / 436.3
  ===================================================  ======================

  One CTA per SM walks its 65 blocks at ~1.6 us a block (the gather wait, then QK, the
  softmax barriers and PV in turn): the per-block chain of one CTA, not the copies in
  flight, is the limit. Deeper pipelines also take shared memory and with it resident CTAs:
  the 36-block 3-stage variant (~124 KB) holds one CTA per SM, the 20-block one (~83 KB) two,
  not three. Four one-stage CTAs per SM overlap four such chains and keep the gather at the
  copy rate.
Next chunk's pages a block ahead (same day, probe, two interleaved rounds, us): loading the
next chunk's block-table entries into registers during the chunk's first block and writing
the offsets during its second (so the page loads no longer stall the resolution) measured
slower everywhere: 64 x 1 92.0 / 92.0 vs 90.1 / 90.8, 64 x 4 283 / 283 vs 281 / 281, prefill
3150 / 3170 vs 3100 / 3100 (overlap) and 3580 / 3600 vs 3480 / 3490 (uniform); not kept.

Alternatives, measured on the issue-4 shapes (H200, ``benchmarks/bench_sparse.py`` and the
probes behind the tables below, 2026-11-29, us):

=====================  =======  =======  =======  =======  =======
tile                   W4       W2       N64      W4_LAZY  W4_C32
=====================  =======  =======  =======  =======  =======
decode 64 x 1 (4 spl)  98.8     120      108      102.5    98.6
decode 64 x 4 (1 spl)  298.3             301      306.1    301.9
prefill 4096, overlap  3257     3614     3877     3361     3251
=====================  =======  =======  =======  =======  =======

(write-flushed L2; W2/N64 from an earlier run of the lazy prologue.) ``W4_LAZY`` is W4
without the eager prologue and PDL (the previous production tile); ``W4_C32`` resolves
1024 slots per chunk (one chunk per decode split), which gained nothing measurable.

Heuristic for ``num_splits=None`` (plan value 0), with ``work = rows * Hkv`` (CTAs of
one split) and ``sms`` the device's multiprocessor count:

* ``work >= PREFILL_MIN_WAVES * sms`` -> the prefill schedule: no split, one CTA per
  (row, KV head); neighbouring rows run in neighbouring CTAs and share blocks through L2.
  When some request may hold ``UNION_MIN_ROWS_PER_REQUEST`` rows (``sparse_launch.union_enabled``;
  the environment ``MATE_SPARSE_UNION`` forces it on with ``1`` or off with ``0``), with
  ``T <= UNION_MAX_WIDTH`` the rows are also grouped by ``UNION_ROWS``: a one-kernel
  prep measures the union of selected cache rows of each group whose rows all belong to
  requests of at least that many rows (the others, e.g. the decode rows of a mixed batch,
  are left to the paged kernel at once), and groups whose union holds at
  most ``UNION_MAX_FILL`` of their ``R * T`` slots go to the union kernel, which gathers
  each union token once for the group (:mod:`.sparse_union`); the paged kernel skips them.
  Measured on the 4096-row shapes (R = 4): the union kernel takes 1823 us where the rows
  share ~90% of their blocks (union fill 0.32; the paged kernel 3209 us) and 4323 us with
  uniform blocks (fill 0.98; paged 3418 us), i.e. it breaks even near a fill of 0.7; 0.6
  keeps a margin. The prep is paid whichever path the groups take. End to end (H200,
  session 8, suite at the final kernels, us): 90%-overlap prefill 1654 against 2927 for
  the paged kernel alone, uniform blocks 3354 against 3222 (the prep, ~0.16 ms there with
  the U/C pass skipped, is most of the difference). Earlier, with a 0.4 ms prep (suite at
  d98a86f): 1902 against 2906 and 3584 against 3257, when the path was opt-in. Neighbouring
  rows of a prefill chunk select overlapping blocks (their queries are close and the
  recent context is shared), so the path is the default for prefill chunks; decode rows
  (a few per request, unrelated selections) keep the paged kernel. Mixed batches (H200,
  session 9, same process, 131072-token contexts, us): a 2048-row chunk (90% overlap) + 512
  one-row decode requests 1333 against 1917 for the paged kernel alone (the session-8 rule,
  requests averaging 16 rows, did not take the path: 1905); a 1024-row chunk + 1024 decode
  rows 1406 against 1668; 256 requests x 4 rows, all left to the paged kernel by the prep,
  994 against 973 (the prep's early exit 7.6 us, the union and finalize launches 13.7; the
  prep measuring every group instead 35.6); 1024 one-row requests do not take the path.
  The union kernel and the paged kernel write disjoint rows, so they can run side by side.
  Session 13 (probe ``.devrun/s13_fork.py``, same process, three rounds, us) put the union and
  finalize kernels on a side stream forked after the prep and joined at the end of the call,
  against the single-stream order: mixed batch 1382 / 1316 / 1308 against 1359 / 1350 / 1350,
  90% overlap 1621 / 1600 / 1599 against 1640 / 1633 / 1633, uniform 2758 / 2790 / 2792
  against 2720 / 2840 / 2840 (results bitwise equal), and kept one stream: the kernels barely
  overlap (the union kernel holds the SMs), and 2-3% did not seem to pay for a second stream.
  Session 24 measured it again with the kernels of then (``.devrun/s24_cc.py``): 90% overlap
  1553-1555 against 1590-1592, mixed 1311-1314 against 1334-1335, uniform 2603-2610 against
  2607-2622, with spreads well below the gains, and the launcher now forks (``sparse_launch``;
  the fork and join are two event waits, capturable, and a GPU test replays the forked call
  in a CUDA graph).
  Session 25 (probe ``.devrun/s25_sf.py``, same process, three rounds, us, results bitwise
  equal) tried to hide the union path's no-work grids on uniform blocks. Launching the sort
  before the fork, so that they queue behind it, was slower: uniform 2604-2616 against
  2583-2597, 90% overlap 1567-1571 against 1557-1560, mixed 1300-1302 against 1304-1306. With
  the union path's stream at high priority: uniform 2603-2618 against 2594-2600, overlap
  unchanged, mixed 1312-1314 against 1306-1307. With the sort, paged and merge kernels on a
  high-priority stream instead, uniform gained (2572-2591 against 2594-2600), but 90% overlap
  took 1621-1623 against 1560-1564 and mixed 1345-1346 against 1306-1307, presumably because
  the sort's and the paged kernel's skipping CTAs then went ahead of the union kernel (not
  measured apart). A third stream for the finalize kernel alone, at normal priority after the
  union kernel, with the union kernel and the sort, paged and merge kernels at high priority:
  uniform 2568-2585 against 2587-2589, 90% overlap 1549-1558 against 1552-1565, mixed
  1301-1306 against 1301-1306. That is ~12 us (0.5%) on uniform blocks, within the spread of its
  rounds. The kernels would also run at high priority beside the caller's other streams (a
  serving engine's communication, for one). Equal priorities stay.
  Session 29 moved the union prep onto that stream too, beside the sort, which now orders every row
  whose group the prep has not taken by the time it reads its ``NU`` (the paged kernel waits for the
  prep through an event): uniform 2444-2455 against 2459-2487 us, 90% overlap and the mixed batch
  unchanged (:mod:`.sparse_sort_kernel`). A split tail (the last round of CTAs' rows in several
  splits, merged) was slower everywhere (docs/performance-notes.md).
  Per-request row counts are device data, so the host can only bound the largest request;
  The prefill schedule also orders the token ids of the rows the paged kernel computes by
  context region (``sort``, :mod:`.sparse_sort_kernel`) while ``T <= SORT_CAP``, with
  or without the union path (measured there: 11-17% faster on uniform blocks, 1-2% slower on
  90%-overlap rows that the union path does not take);
* otherwise the decode schedule: the smallest split count giving at least
  ``DECODE_TARGET_WAVES * sms`` CTAs, capped so that each split keeps at least
  ``MIN_SLOTS_PER_SPLIT`` slots (below that the per-CTA cost of loading Q and writing a
  partial dominates). Four splits (decode 64 x 1, and any forced ``num_splits=4``) run as the
  thread groups of one CTA that merge there (``Schedule.groups``, :mod:`.sparse_groups`): no
  partial stores, no merge kernel; 74.05-74.66 us against 75.42-75.76 for the same split with the
  merge kernel on decode 64 x 1 (H200, session 44, same process, bitwise-equal outputs). The
  launcher keeps the merge kernel for int64 K/V offsets.

Measured with the then-production W4_LAZY tile (us, 2051-slot selections, median of
CUDA-graph replays after a write flush; prefill columns 3..8 from a first run):

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
floor: the per-call fixed cost (launch, the dependent metadata loads before the first
gather, the merge) is what small batches pay, not bandwidth. Width probe (64 x 1, 4
splits, W4): 32 slots per row take 27.8 us after a write flush, 26.6 after a read flush
and 19.3 with warm caches; from 1024 to 2051 slots the time grows at ~4.0 TB/s, i.e. the
gather itself runs near the copy ceiling and the fixed cost is what separates 64 x 1
from its floor. With W4, 1 x 1 takes 27.0 us, 8 x 1 35.8, 16 x 1 47.3, 32 x 1 66.0 at
the rule's split counts. With 3 target waves and 64 slots per split the rule picks 32 splits
for 1 x 1 (was 8: 39 us), 25 for 8 x 1, 13 for 16 x 1, 7 for 32 x 1, 4 for 64 x 1 (was 3:
102-110 us), 1 for 64 x 4 (work 512 < 4 * 132) and 1 for prefill. A positive
``num_splits`` is used as given (1 = no SplitKV). Session 21 (probe ``.devrun/s21_ps.py``,
W4, three rounds, us): 64 x 1 at 3 splits 81.5 / 81.5 / 81.6 against 81.0 / 81.4 / 81.3 at 4.
The same probe found no cost in vLLM's page size 16 against 64: decode 64 x 1 80.9-81.0
against 81.0-81.4, 64 x 4 266.3-267.1 against 266.2-266.6, uniform prefill 2705-2707 against
2700-2703, 90% overlap 1641-1643 against 1640-1642.
"""

from __future__ import annotations

from dataclasses import dataclass

from .sparse_groups import GROUPS
from .sparse_sort_kernel import SORT_CAP

__all__ = [
    "Tile", "Schedule", "W4", "W2", "N64", "W4_LAZY", "W4_C32", "TILES", "CANDIDATES", "choose_schedule",
    "UNION_ROWS", "UNION_MAX_WIDTH", "UNION_MAX_FILL", "UNION_MIN_ROWS_PER_REQUEST",
]  # fmt: skip


@dataclass(frozen=True)
class Tile:
    """Compile-time tile shape of the paged kernel (arguments of ``sparse_paged_kernel``)."""

    name: str
    block_n: int
    threads: int
    chunk_blocks: int
    num_stages: int
    min_blocks: int
    pdl: bool = False  # programmatic dependent launch of the merge kernel
    # Token ids loaded before the request search and one chunk ahead; parallel cu_seqlens
    # search; the runtime one-pipeline mode (Schedule.one_pipe).
    eager: bool = False
    # Score tile with the features split over the warps (_sparse_qk; PTX, like pdl).
    split_qk: bool = False
    # Split builds gather K/V with an L2 evict-first policy (_l2_hints; PTX, like pdl).
    kv_evict_first: bool = False


@dataclass(frozen=True)
class Schedule:
    tile: Tile
    splits: int
    union_rows: int = 0  # > 0: row groups of this size whose selections overlap take the union path
    # Eager tiles: one software pipeline over each split (the next chunk resolved inside it);
    # False = one pipeline per chunk (kept for the benchmark sweep; lazy tiles always do that).
    one_pipe: bool = True
    # Order each row's token ids by context region before the paged kernel (sparse_sort_kernel):
    # the rows it computes, after the union path when that runs, else every row.
    sort: bool = False
    # > 1: the splits of a (row, KV head) run as this many thread groups of one CTA and merge there
    # (sparse_groups): no partials in global memory, no merge grid. Only with splits == groups.
    groups: int = 1

    @property
    def label(self) -> str:
        return (f"{self.tile.name}/splits={self.splits}" + (f"/union={self.union_rows}" if self.union_rows else "")
                + ("/sort" if self.sort else "") + ("" if self.one_pipe else "/per-chunk")
                + (f"/groups={self.groups}" if self.groups > 1 else ""))  # fmt: skip


W4 = Tile("w4", block_n=32, threads=128, chunk_blocks=16, num_stages=1, min_blocks=4, pdl=True, eager=True,
          split_qk=True, kv_evict_first=True)  # fmt: skip
W2 = Tile("w2", block_n=32, threads=64, chunk_blocks=16, num_stages=1, min_blocks=4, pdl=True, eager=True)
N64 = Tile("n64", block_n=64, threads=128, chunk_blocks=8, num_stages=1, min_blocks=2, pdl=True, eager=True)
W4_LAZY = Tile("w4-lazy", block_n=32, threads=128, chunk_blocks=16, num_stages=1, min_blocks=4)
W4_C32 = Tile("w4-c32", block_n=32, threads=128, chunk_blocks=32, num_stages=1, min_blocks=4, pdl=True, eager=True)
TILES = {t.name: t for t in (W4,)}  # what the launcher uses (and CI compiles)
CANDIDATES = {t.name: t for t in (W2, N64, W4_LAZY, W4_C32)}  # measured alternatives (benchmark sweep only)

PREFILL_MIN_WAVES = 4
DECODE_TARGET_WAVES = 3
MIN_SLOTS_PER_SPLIT = 64
UNION_ROWS = 4  # rows per group of the union path (the union kernel's 64-row tile)
UNION_MAX_WIDTH = 2560  # selection width the one-kernel union prep holds (sparse_union.PREP_T_CAP)
UNION_MAX_FILL = 0.6  # a group takes the union path iff its union has <= this share of R * T slots
UNION_MIN_ROWS_PER_REQUEST = 16  # default union path: row groups of requests with this many rows (prefill chunks)


def choose_schedule(rows: int, hkv: int, n_tok: int, num_splits: int, sms: int, union: bool = False) -> Schedule:
    """Pick the tile and split count of one call.

    Parameters
    ----------
    rows, hkv, n_tok : int
        Query rows, KV heads, selection width T.
    num_splits : int
        The plan's value: 0 = choose, else the forced split count.
    sms : int
        Multiprocessors of the device.
    union : bool
        Allow the prefill schedule's row-group union path (``sparse_launch.union_enabled``).
    """
    work = max(rows * hkv, 1)
    if num_splits > 0:
        return _split(num_splits)
    if work >= PREFILL_MIN_WAVES * sms:
        return Schedule(W4, 1, UNION_ROWS if union and n_tok <= UNION_MAX_WIDTH else 0, sort=n_tok <= SORT_CAP)
    wanted = -(-DECODE_TARGET_WAVES * sms // work)
    cap = max(1, n_tok // MIN_SLOTS_PER_SPLIT)
    return _split(max(1, min(wanted, cap)))


def _split(splits: int) -> Schedule:
    # GROUPS splits run as the thread groups of one CTA (sparse_groups), merged there.
    return Schedule(W4, splits, groups=GROUPS if splits == GROUPS else 1)
