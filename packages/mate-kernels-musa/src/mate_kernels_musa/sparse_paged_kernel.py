"""Paged sparse attention, one (query row, KV head, split) per CTA.

Each CTA takes one query row, one KV head (its ``group`` Q heads, padded to a
16-row tile on chip only, in shared memory or, with ``q_regs``, in the QK fragments: global
Q/O use the logical heads) and one
contiguous share of the row's selection slots, and runs
gather -> QK (mma m16; with ``split_qk`` each warp takes a quarter of the features,
:mod:`._sparse_qk`) -> online softmax (exp2, FP32) -> PV. With several splits it
writes the normalized FP32 partial output and its natural-log LSE, and the merge kernel
(:mod:`.sparse_merge_kernel`) combines the splits, applies the sigmoid gate and writes
``out``/``lse``; with one split (runtime ``direct``) it applies the gate and writes
``out``/``lse`` itself. That epilogue first scales the accumulator by the gate in a
branch-free loop (a per-head gate: by the sigmoids the CTA took at its start), then stores
(through shared memory as whole 16-byte rows where ``out``'s layout allows). Rows the union
path took (``u_rows``) skip the Q and token-id loads as well as the gather (end-to-end times
in :mod:`.sparse_schedule`).

Score tile with the features split over the warps (session 23, :mod:`._sparse_qk`; the
launcher's ``W4`` tile, ``split_qk``). With ``T.gemm`` each of the four warps computed 8 of the
32 score columns over all 256 features, so it read the whole 16 x 256 Q tile from shared memory
on every block: of a CTA's shared-memory wavefronts per block (~816, counted from the
generated instructions: QK 384, of which Q 256; PV 160; the cp.async fill 256; P 16), Q was
almost a third. A probe whose QK read only the
first ``QD`` features (wrong results by design, the rest of the block unchanged; probe
``.devrun/s23_qk.py``, paged kernel alone on sorted ids, H200, same process, three rounds, us)
measured what that traffic costs: uniform blocks folded into a 128-page pool that stays in L2
2567 (all 256) / 2221 (128) / 2052 (64) / 2012 (16); as given 2592 / 2432 / 2360 / 2390 (the L2
misses bound it below ~2350); 90% overlap 2569 / 2221 / 2001 / 1927; decode 64 x 1 81.9 /
81.0 / 80.4 / 80.3. Now each warp holds its 64 features of Q in registers (loaded once per CTA)
and reads only its quarter of K, for all 32 columns; the four FP32 partial tiles are summed
through a padded 10 KB shared buffer (~688 wavefronts a block, counted the same way). Same probe, split QK against
the ``T.gemm`` tile (results within 1.7e-4 relative L2 of each other): pool 2409 / 2586, as
given 2532-2546 / 2611-2625, 90% overlap 2421 / 2588, decode 64 x 1 82.2 / 82.2. Through the
launcher's default path (probe ``.devrun/s23_ab.py``, same process, three rounds, us, split /
``T.gemm``): uniform prefill 2593-2595 / 2681-2691, 90% overlap 1592-1593 / 1591-1592 (its
rows take the union kernel), mixed batch 1324-1326 / 1323-1325, decode 64 x 1 80.2-80.6 /
79.8-80.4, 64 x 4 260.7-261.0 / 260.2-260.7; the split results repeat bitwise. The first
build, with the partials as plain shared-memory stores and loads, let TileLang's sync planner
put two more barriers into each block: pool 2482-2502, but as given 2794-2809 (7% slower than
``T.gemm``) and decode 64 x 1 84.7; :mod:`._sparse_qk` has how the shipped build keeps them
out. The kernel uses all 128 registers (``ptxas -v``: 8 bytes of spill at group 12 until session
26, none since; none at groups 1 and 16; none with ``T.gemm``).

Five barriers per block (session 26, probe ``.devrun/s26_bar.py``, the previous kernel in
``.devrun/s26_spk_old.py``). The block step waits for K and syncs, sums the QK partials after a
barrier, takes the softmax's ``__syncthreads_or``, waits for V and syncs, and syncs after PV before
the next V gather overwrites ``v_s``. TileLang's sync planner also put a sixth, unconditional
barrier before the next chunk's offset stores, which only the chunk's first block makes. It cannot
tell the two offset buffers apart. The eager resolution now stores the offsets through an inline
function the planner does not see (``kv_offsets(..., unseen=True)``, :data:`._sparse_macros.UNSEEN_STORE_IO`).
The kernel places the barrier that orders chunk 0's offsets before the first gather itself, and the
same after each chunk's resolution on the per-chunk path. No other barrier is needed: the stores of
chunk ``c + 1`` (buffer ``(c + 1) % 2``, made during chunk ``c``'s first block) come after every read
of that buffer by chunk ``c - 1`` (its last gathers are issued a block earlier and its last mask
reads precede the current block's barriers). They reach their readers, the gathers of chunk
``c + 1``, through the barriers of the blocks between. Predicted from session 23's two extra
barriers (+7% as given, +3-4% over the pool, +2.5 us on decode): uniform blocks -1.5..3.5%, the pool
-1..2%, decode 64 x 1 -0.5..1.2 us.

Four barriers per block (the same session, the split-QK tiles; probe ``.devrun/s26_flag.py``, its
kernel copy ``.devrun/s26_spk_flag.py``). The softmax's ``__syncthreads_or`` is gone
(:func:`._sparse_macros.online_softmax_step_flagged`). A thread whose score exceeds the max by
more than the slack sets a shared flag, and every thread stores P against the current max. The
flag is read after the barrier the pipeline already places before PV: the read takes a ``v_s``
element, so the pipeliner puts V's wait and barrier before it. Only when the flag is set (the
first block, and rarely after) is the max raised and P recomputed, then stored again behind a
barrier of its own. Predicted: -0.5..2% on the prefill shapes, -0.3..1.5 us on decode 64 x 1.

Both steps gave bitwise-equal outputs on every case. H200, same process, three rounds (alternating
order), CUDA-graph medians after a read flush, us; six against five barriers on one lease, five
against four on another; ``paged`` = the kernel alone on sorted ids, ``pool`` = uniform ids over a
128-page pool that stays in L2, ``default`` = the launcher's path:

=====================  ===========  ===========  ===========  ===========
case                   six          five         five         four
=====================  ===========  ===========  ===========  ===========
uniform, paged         2520-2533    2476-2514    2444-2446    2427-2436
uniform, pool          2393-2403    2353-2355    2373-2374    2352
90% overlap, paged     2405         2360         2379-2380    2358
decode 64 x 1          80.8         79.1-79.6    78.7-78.8    78.2-78.4
decode 64 x 4          266.0-266.2  264.4-264.6  259.7-259.8  259.2-259.5
uniform, default       2599-2619    2527-2589    2524-2531    2499-2510
90% overlap, default   1544-1554    1543-1594    1556-1561    1557-1595
mixed batch, default   1306-1307    1289-1290    1287-1288    1285-1287
=====================  ===========  ===========  ===========  ===========

Per-element guards (H200, 2026-11-30, same-process A/B, interleaved rounds, us). The Q and
gate loads index heads ``hk * G + g``, which the compiler cannot bound by ``hq``, so each
load used to carry its own branch. Both now clamp the head index to the group and to
``hq - 1`` and have no per-element condition (padding rows ``g >= G`` repeat head ``G - 1``;
their results are never stored), so their loads issue together.

* Gate, first clamped to the group only (then the ``< hq`` guard was still there), against
  the older guarded load-scale-store loop: 90%-overlap prefill 3078 / 3069 against
  3104 / 3102, decode 64 x 4 277 / 276 against 277 / 276, uniform prefill 3425 / 3267
  against 3280 / 3289 (noise). With the ``hq - 1`` clamp: decode 64 x 4 278.9 / 278.5 /
  278.9 against 281.4 / 281.4 / 281.6; 90%-overlap prefill 3039 / 3036 / 3034 against
  3068 / 3065 / 3069; 64 x 1 in one split with 32-slot selections 35.5 / 36.0 / 36.1
  against 42.0 (x3), 28.8 without a gate. An L2 prefetch of the CTA's gate rows at the
  kernel start changed nothing on top (36.0 against 35.9).
* Q (the loads sat behind ``g < G and not skip`` and ``< hq``): decode 64 x 1 83.6 / 83.5
  against 91.1 / 91.0; 1 x 1 (32 splits) 21.1 / 20.9 against 27.9 / 28.2; 64 x 4 271.4 /
  271.9 against 278.8 / 279.5; 90%-overlap prefill 2941 / 2938 against 3031 / 3031;
  uniform prefill 3425 / 3436 against 3409 / 3456.
* A per-head gate branch (session 21, not kept): where the gate's feature stride is 0 (the
  launcher's expanded ``[rows, Hq]`` gate), one load and one ``exp`` per row into a scratch
  ``[H]`` fragment, then the same division (bitwise equal to the expanded gate). What the gate
  costs as shipped (probe ``.devrun/s21_gate.py``, same process, three rounds, us; per-head /
  none / per-element gate): decode 64 x 4 265.2-265.8 / 262.8-263.4 / 268.2-269.0, uniform
  prefill 2702-2720 / 2667-2677 / 2726-2730. With the branch (another lease): 272.2-274.0 /
  264.2-265.5 / 276.9-277.5 and 2769-2787 / 2645 / 2842-2848, so both gate paths slower.

Early Q loads (H200, session 9, same process, three interleaved rounds, us; not kept): the
eager path loading each thread's 32 Q elements into registers first (before the token ids)
and storing them to shared memory after the first chunk's resolution, so that the Q latency
overlaps the metadata chain instead of preceding the page loads: decode 64 x 1 83.7 / 83.6 /
83.5 against 82.0 / 82.4 / 82.2, 64 x 4 271.7 / 272.0 / 269.3 against 267.4 / 268.1 / 267.3,
32 x 1 51.7 against 50.3, 8 x 1 27.0 against 26.1, 1 x 1 19.9-20.1 against 20.5-20.6, and the
90%-overlap prefill (paged kernel alone) 2994 against 2902-2924 (results bitwise identical).

Q by cp.async (session 18, patch ``.devrun/s18_q.py``, probe ``.devrun/s18_qprobe.py``; not kept):
the eager path issued Q as four 16-byte ``cp.async`` per thread (a flat 16-byte-row view of Q
beside the strided one, its row and head strides in 16-byte units) right after the token-id
loads, before the request search, and the gather's first wait covered it. No registers are
held (128, no spills, as shipped). Results were bitwise equal on all six cases. H200, same
process, three interleaved rounds, CUDA-graph medians after a read flush, us, shipped first:
decode 64 x 1 80.9 / 81.3 / 81.6 against 81.2 / 81.1 / 81.0; 64 x 4 265.8 / 265.6 / 266.0
against 265.0 / 265.2 / 265.9; 1 x 1 20.1 / 20.2 / 20.4 against 19.5 / 19.7 / 19.7; 8 x 1
25.9 / 25.7 / 26.0 against 25.9 / 25.5 / 25.9; uniform prefill 2700 / 2699 / 2700 against
2707 / 2691 / 2691; 90% overlap 1642 / 1642 / 1641 against 1644 / 1642 / 1642. The Q phase of
the stamps below (1.28 us) is not on the path to the first gather: only one-row calls gain,
~0.5 us, which does not pay for a second Q view and a strided-Q fallback.

Q straight into the QK fragments (session 33, ``q_regs``, probe ``.devrun/s33_q.py``, HEAD's kernel from a
copy ``.devrun/s33_sparse_paged_kernel_old.py``). With ``split_qk`` each thread needs only its warp's Q
fragment (16 registers). It was loaded through ``q_s``: every thread waited for its Q loads to store
them, then a barrier, then ``ldmatrix``. Loaded straight into the fragment registers
(:meth:`._sparse_qk.FeatureSplitQK.q_element`), nothing waits for Q before the first QK, and the
prologue has one barrier less. Outputs and LSE were bitwise equal on all six cases. H200, same
process, three interleaved rounds, CUDA-graph medians after a read flush, us, new against HEAD:

* uniform prefill 2288-2302 against 2468-2483;
* 90% overlap 1544-1547 against 1543-1545;
* decode 64 x 4 (one split) 253.6-254.5 against 254.0-255.5;
* but split decode was slower: 64 x 1 77.0-77.4 against 76.4-76.7, 8 x 1 23.9-24.6 against
  23.0-23.8, 1 x 1 17.7-17.8 against 16.8-16.9.

A build with both paths behind the runtime ``direct`` flag (``q_s`` for split schedules) was as slow
on split decode (64 x 1 77.7-78.1 against 76.7-76.9, 1 x 1 18.3-18.6 against 17.2-17.3) and as fast on
uniform prefill (2282-2293 against 2470-2479). So the register path is a compile-time variant that
the launcher builds for one-split schedules (``sparse_launch.paged_consts``). Split decode runs the
previous kernel, whose generated code is unchanged. Both builds use 128 registers with no spills. The
stamps below show part of why split decode is slower with Q in registers: each thread's 32 two-byte
fragment loads (eight heads a warp instruction, against 32 consecutive features through ``q_s``) took
~1.9 us to issue when all 512 CTAs start together. Chunk 0 resolved 0.3-0.6 us later in eager calls
(0.5 us earlier in the graph replay), and the call took 78.24-78.46 us against 77.76-77.87.

Where decode 64 x 1's CTAs spend their time (session 34, probe ``.devrun/s34_stamp.py``; the kernel with
``%globaltimer`` stamps of thread 0 of every CTA, made by ``.devrun/s34_mkstamp.py``, 0.3-0.9 us slower
than shipped). Medians over the 512 CTAs, us since each CTA's start, from eager calls after a read flush
(a CUDA-graph replay in brackets): past the request resolution 1.95 (2.88), Q in its fragments 3.3 (4.3),
chunk 0's page reads arrived and its offsets stored 4.5 (5.5), block 0 done 9.9-10.0 (11.0). All CTAs
start within 0.3 us of each other, and the last one ends 68-70 us after the first started (the median one
at 64; the last split of each row, 14 blocks against 17, ends 6-7 us earlier than the other three).
So the first gather waits ~4.5 us for three dependent rounds of cold loads: the token ids, the request,
then the page reads. A build that held Q in registers until chunk 0 had resolved (``late_q``, patch
``.devrun/s34_late_q.diff``, probe ``.devrun/s34_lq.py``; not kept) let the page reads overlap the Q loads.
Outputs were bitwise equal, and it was not faster (same process, three rounds, us, HEAD first): 64 x 1
77.65-77.9 against 78.06-78.08, 32 x 1 47.42-47.5 against 47.47-47.66, 8 x 1 22.85-23.55 against
23.65-23.84, 1 x 1 16.9-17.04 against 16.9-17.02. The Q loads are not on the path to the first gather.
Nor is the kernels' code, which the read flush evicts from the L2 too: a one-row call of the same kernels
on other inputs between the flush and the timed replay (session 36, probe ``.devrun/s36_ifetch.py``) left
64 x 1 at 76.85-76.96 against 76.29-76.37 behind a trivial kernel, and 8 x 1 and 1 x 1 within 0.5 us.

Page-size division (session 27, probe ``.devrun/s27_fd.py``, HEAD's kernel from a copy, same
process, three rounds, us; results bitwise equal on all six cases). The eager chunk resolution
divides each slot's token id by the runtime page size, for the page column and the slot, with a
magic multiply (:func:`._sparse_macros.fast_div`, the launcher passes
:func:`._sparse_macros.page_divisor`): ``umulhi``, an add and a shift where ``div.s32`` /
``rem.s32`` cost ~20 instructions each. Chunk 0's resolution lies on the path to the first
gather: decode 64 x 1 78.3-78.6 against 79.6-79.9, 64 x 4 265.0-265.8 against 265.6-266.2; the
paged kernel alone on uniform blocks 2435.5-2439.7 against 2435.8-2437.1 (its later chunks'
resolutions are hidden under the gathers). 128 registers, no spills.

Epilogue products (session 27, probe ``.devrun/s27_ep.py``, the previous kernel from a copy, same
process, three rounds, us). Both epilogues divided every element of the CTA's ``16 x 256`` tile
by its row sum, and the direct one also by ``1 + exp(-gate)``: 32 or 64 IEEE ``div.rn.f32`` per
thread (~10 instructions each) at the end of every CTA, i.e. on the path of the last CTAs of a
decode wave. They now multiply by one reciprocal per row (``alpha``, free after the last block)
and by ``rcp(1 + exp(-gate))``: decode 64 x 1 77.2-77.5 against 78.3-78.5, 64 x 4 262.1-263.0
against 262.9-264.4, the mixed batch 1279-1282 against 1282-1284, the prefill shapes within
noise. Outputs within rel. L2 2.4e-5 of the dividing kernel (a last-bit difference before the
cast on a small fraction of elements), LSE identical; 128 registers, no spills.

Per-head gate at the CTA start (session 28, probe ``.devrun/s28_gate.py``, the previous kernel from
a copy ``.devrun/s28_spk_old.py``, same process, three rounds, us; outputs and LSE bitwise equal
on all six cases). Where the gate's feature stride is 0 (the launcher's expanded ``[rows, Hq]``
gate) the direct epilogue loaded the same gate element 32 times per thread and took 32
sigmoids, at the end of the CTA, where nothing of the CTA is left to overlap the load's
latency. Now the CTA's 16 sigmoids are taken right after the Q loads (``gate_s``, 64 bytes of
shared memory; the barrier before Q's first read already orders them) and the epilogue multiplies
by them; a per-element gate keeps the epilogue's loads. Predicted: uniform blocks -15..-35 us,
decode unchanged (its splits' gate is the merge kernel's). On a lease ~4% slower than the
previous one, new against old: paged kernel alone on uniform blocks 2519-2529 against 2545-2550,
with a per-element gate 2551-2556 against 2562-2571, the default uniform call 2570-2572 against
2601-2605, 90% overlap 1548-1556 against 1547-1559, mixed batch 1284-1314 against 1290-1294,
decode 64 x 1 77.9-78.2 against 77.7-78.1. 128 registers, no spills.

Whole-sector output stores (session 28, probe ``.devrun/s28_vec.py``, the previous kernel from a
copy, same process, three rounds, us; outputs and LSE bitwise equal on all six cases). The direct
epilogue stored each thread's 32 fragment elements one by one: ``OUT`` has runtime strides, so
every store was 2 bytes, and one warp instruction wrote 2 bytes into each of 32 byte pairs of 8
heads: each 32-byte sector of the output arrived in four partial writes (~8 M L2 sector writes on
the 4096-row prefill, against ~2 M whole ones). Where ``out`` allows it (``sparse_launch._out_rows``:
unit feature stride, 16-byte aligned rows) the tile now goes through ``k_s`` (free after the last
block; staging in ``q_s`` kept ``q_s`` live, 8 KB more shared memory per CTA and two more barriers
in the block loop: decode 64 x 1 92.9 against 76.6 us) and each warp stores one head's 512 bytes
as 16-byte rows through a flat view (``OUTF``). Predicted: uniform blocks -0..-25 us (the
partial writes are ~1.2% of the gather's sector traffic on an L2-bound kernel). Measured, new
against old: paged kernel alone on uniform blocks 2399-2405 against 2444-2460, the default uniform
call 2446-2464 against 2499-2513, with an ``out`` view one element into its buffer (element
stores, as before) 2422-2427 against 2435-2453; 90% overlap 1547-1557 against 1547-1550, mixed
batch 1274-1310 against 1277-1278, decode 64 x 1 78.0-78.2 against 77.9-78.2 (its splits write
FP32 partials, whole sectors already). So the partial writes cost twice their share of the
sector count. 128 registers, no spills, shared memory unchanged, one more barrier per CTA.

Page-table loads (H200, 2026-11-30, session 7, same-process A/B, three interleaved rounds,
us). The eager path reads every slot's page before applying the slot rule, with the column
clamped into the table, instead of only for used slots: the load then waits for the row's
request alone, not for its last usable id (the ``seq_lens_k`` / position loads after the
request search), so on the first chunk it overlaps them. Decode 64 x 4 262.3 / 261.9 / 262.2
against 266.6 / 266.1 / 266.5 (and 262.3 / 262.2 / 262.0 against 267.3 / 265.9 / 266.3 in a
second run); 64 x 1 81.1 / 80.8 / 80.9 against 82.0 / 82.3 / 82.1; 90%-overlap prefill
2924 / 2895 / 2897 against 2938 / 2940 / 2941; 1 x 1, 8 x 1 and 32 x 1 unchanged (20.6 /
26.1 / 49.6 against 20.5 / 25.9 / 49.9). Not kept: splitting the blocks evenly (floor or
ceil of ``n_blk / splits`` per split instead of a ceil share and a short last split). Each
split still runs as many block steps as before (the partial block is a step of its own),
and more CTAs did work: 1 x 1 24.1 against 20.6, 8 x 1 28.8 against 26.1, 32 x 1 52.3
against 50.0, 64 x 1 83.0 against 82.4 (that variant included the page-load change).

Other split boundaries (session 35, kernel copies by ``.devrun/s35_mksplit.py``, probes
``.devrun/s35_split.py`` and ``.devrun/s35_split2.py``; not kept). The ceil share gives decode 64 x 1
(2051 ids, 4 splits) 17/17/17/13+1 blocks, so its longest split reads 544 ids. The variants:
``fl`` 16/16/16/16+1 (the partial block to the last split, at most 515 ids), ``tg`` 513 ids a split
from any offset, ``un`` 18/18/18/10+1. Outputs were within rel. L2 2.9e-3 of the shipped ones (the P
rounding of other running maxima), LSE within 1e-6. Same process, three interleaved rounds, us:

==================  ===========  ===========  ===========  ===========
decode 64 x 1       shipped      ``fl``       ``tg``       ``un``
==================  ===========  ===========  ===========  ===========
call, lease 1       76.3-76.5    77.6-78.1    78.2-78.3
call, lease 2       77.7-77.8    79.2-79.4                 79.1-79.2
paged alone, 2      73.7-73.8    74.7-74.9                 74.1-74.8
==================  ===========  ===========  ===========  ===========

On 32 x 1, 8 x 1 and 1 x 1, ``tg`` was 0.7-3 us slower and ``fl`` unchanged to 1.3 us slower; 64 x 4
(one split) was unchanged. The shipped share is the fastest of the four, in the paged kernel itself:
the longest split does not bound the call.

Speculative page reads (session 14, patch ``.devrun/s14_spec.diff``, probe ``.devrun/s14_spec.py``;
not kept): the eager path read the first chunk's block-table entries right after the token
ids, for the request the row index suggests (``r * R // rows``: exact for decode batches and
padded queries), and read them again only when the resolved request differed, so that the
page reads no longer waited for the request search. Outputs were bitwise equal and the
sparse GPU tests (216) and the memcheck subset passed. Same process, three interleaved rounds,
us: decode 64 x 1 81.4 / 81.4 / 81.8 against 81.5 / 81.4 / 81.3, 64 x 4 266.1 / 266.5 / 265.9
against 266.5 / 266.3 / 266.2, mixed batch 1431 / 1361 / 1364 against 1352 / 1352 / 1356,
uniform and 90%-overlap prefill within noise. The request search is not what delays the first
gather; the decode 64 x 1 gap to the physical path (~1.6 us, no block table) is not this read.

An L2 prefetch of the block-table row (session 32, kernel copy ``.devrun/s32_spk_old.py``, probe
``.devrun/s32_pf.py``; not kept): right after the token-id loads, threads 0-63 issued
``prefetch.global.L2`` for the 128-byte lines of the row of the request the row index suggests
(``r`` when there are as many table rows as query rows, else ``r * n_req / rows`` in FP32), so
that the first chunk's page reads, which wait for the ids, would find the row in the L2. Outputs
were bitwise equal on all five benchmark shapes and the 585 GPU tests passed. Same process,
three interleaved rounds, CUDA-graph medians after a read flush, us, HEAD first: decode 64 x 1
77.6 / 77.6 / 77.8 against 77.7 / 77.9 / 77.7, 64 x 4 259.8 / 260.5 / 259.4 against 260.6 /
259.9 / 259.6, uniform prefill 2486 / 2500 / 2491 against 2502 / 2496 / 2505, 90% overlap and
mixed batch within 1 us. So the page reads' DRAM latency is not what the physical path saves.

Per-token bulk copies on the TMA engine (session 15, patch ``.devrun/s15_bulk.diff``, probe
``.devrun/s15_bulk.py``, Nsight Compute ``.devrun/ncu15.sh``; not kept). The idea was to take
the K/V fill off the LSU path: each used slot's 512-byte K and V rows became one
``cp.async.bulk`` each into unswizzled shared rows padded by 16 bytes (so ldmatrix stays
conflict-free), completed on an mbarrier per buffer (``arrive.expect_tx`` by the issuing thread;
a masked slot only arrives, and its row keeps earlier finite data while its score is -inf). K of
block ``k + 1`` was loaded during block ``k``'s softmax and PV, and V during the next QK, as the
one-stage cp.async pipeline does. Every variant matched the shipped kernel bitwise on all the
cases below. The first build (one warp issuing, K and V both bulk) also ran the sparse GPU tests
with its factory patched in: 103 passed and none failed before the run's time limit, which the
builds used up. Same process, interleaved rounds, CUDA-graph medians after a read flush, us;
``paged`` is uniform prefill with ``MATE_SPARSE_UNION=0`` (sorted ids, paged kernel alone):

==============================================  ==============  ==============
variant (final loop unless noted)               paged uniform   decode 64 x 1
==============================================  ==============  ==============
shipped cp.async gather (same runs)             2630-2818       79.7-81.9
K and V bulk, one warp issues (first loop)      3494-3539       85.7-86.0
K and V bulk, one warp issues                   3267-3321       85.4-85.6
K and V by cp.async, completed on the mbarrier  3225-3279       85.0-85.4
K bulk (one warp), V cp.async, padded (both)    3186-3294       85.6-86.3
K and V bulk, 8 lanes of every warp issue       2939-2970       83.4-85.0
K bulk (8 lanes a warp), V cp.async, padded     3067-3073       84.1-84.4
K bulk (8 lanes a warp), V cp.async, swizzled   2759-2846       81.0-81.4
==============================================  ==============  ==============

The last variant was also measured on decode 64 x 4: 268.4-268.8 against 267.1-267.3.
Through the default path on uniform blocks it took 2863-2872 against 2758-2878.

Nsight Compute, uniform blocks with the paged kernel alone, one call after a read flush:

* Shipped kernel: 2.56 ms. 539 M L2 read sectors from the SMs in 136 M requests; L2
  throughput 86%, hit rate 44.6%, 6.57 GB read from DRAM.
* cp.async into the padded rows: 3.17 ms. 810 M sectors in 354 M requests; L2 93% busy,
  8.0 GB from DRAM. The padded rows start 16 bytes off a 128-byte line, so each warp's 512-byte
  ``LDGSTS`` splits.
* Bulk copies issued by 8 lanes of each warp: 2.90 ms. Only 5.58 GB from DRAM (L2 hit rate
  66.5%) and 29% fewer shared-memory wavefronts.
* With one warp issuing every copy, barrier waits were half the stall cycles (6.7 of 13.5 per
  issued instruction).

The per-request cost of 512-byte bulk copies outweighs what the LSU path saves. Splitting the
copies between the engines only matches the cp.async gather. A bulk copy needs the K/V rows
unswizzled in shared memory, so the compiler's swizzled layout is open only to cp.async.

L2 prefetch of the next blocks (session 25, kernel copy ``.devrun/s25_spk.py``, probe
``.devrun/s25_pf.py``; not kept). At the top of block step ``k``, threads 0-63 prefetched into
the L2 the 32 K and 32 V rows of block ``k + pf`` (blocks ``1 .. pf - 1`` at step 0), so that a
CTA has more than one block in flight without more shared memory or registers. The aim was the
decode tail, when few CTAs remain and each waits on one block's round trip, and the uniform
prefill's L2 misses. The offsets were read in a preprocessor macro expanded in the kernel, so
TileLang's sync planner added no barrier (128 registers, no spills). Outputs were bitwise equal
to the shipped kernel on every case. H200, same process, three rounds, CUDA-graph medians after a
read flush, us; ``bulk``: one ``cp.async.bulk.prefetch.L2`` of 512 bytes per row, ``lines``: four
``prefetch.global.L2`` per row (two leases, the shipped kernel in both):

=====================  ===========  ===========  ===========  ===========  ===========
case                   shipped      bulk, pf 2   bulk, pf 5   lines, pf 1  lines, pf 2
=====================  ===========  ===========  ===========  ===========  ===========
decode 64 x 1          81.1-81.6    101.7-102.0  118.9-119.1  87.6-87.9    98.8-99.3
decode 64 x 4          265.5-266.9  354.6-354.7  447.4-449.1  294.7-296.2  346.0-347.0
uniform, paged alone   2515-2539    3388-3401    3893-3937    3199-3202    3273-3277
=====================  ===========  ===========  ===========  ===========  ===========

Through the default path (bulk, pf 2): uniform prefill 3457-3469 against 2583-2593, the mixed
batch 1467 against 1310-1312. Even ``lines`` at pf 1, whose prefetch comes a fraction of a step
before the same block's ``cp.async`` and so only repeats its L2 requests, cost 8% on decode and
27% on uniform blocks: the L2 requests of the gather (or the memory-pipe issue slots behind
them) bound both shapes, not the number of copies in flight.

L2 prefetch in the grid's tail only (session 37, kernel copy made by ``.devrun/s37_mktail.py``, probe
``.devrun/s37_tail.py``; not kept). Session 25 prefetched at every step. This build prefetches only
once ``thr`` of the grid's CTAs have left their block loops, when fewer CTAs are left to gather. A
CTA bumped a global counter at its loop's end (``red.add``, no return). Each step loaded the counter
(relaxed, GPU scope) and used the value loaded one step before, so no step waited for it. Past the
threshold each thread prefetched one 128-byte line of a K row and one of a V row of block
``k + dist``. Outputs were bitwise equal to the shipped kernel's. Same process, three interleaved
rounds, CUDA-graph medians after a read flush, us (``thr`` in eighths of the 512 CTAs):

==============================================  ===========  ===========
variant                                         64 x 1       64 x 4
==============================================  ===========  ===========
shipped                                         77.3-77.5    258.6-259.4
copy, feature off (no counter traffic)          77.2-77.4    258.8-259.7
counter loads and bumps, never prefetching      79.2-79.6
``thr`` 2/8, 4/8, 6/8 or 7/8, ``dist`` 2        79.1-79.6    259.0-259.9
``thr`` 6/8 or 7/8, ``dist`` 1                  79.2-79.6
==============================================  ===========  ===========

On 64 x 4 only ``thr`` 6/8 and 7/8 at ``dist`` 2 ran. Round by round, prefetching moved 64 x 1 by
-0.33 to +0.35 us against the same build counting without it, even from 2/8 on, when the short
splits end, i.e. over about the grid's last 10 us (session 34's stamps, above). So the last CTAs do
not wait on DRAM latency that an L2 prefetch would hide. The counter on one address alone cost
1.8-2.4 us.

K and V loaded straight into the mma fragments (session 26, kernel copy ``.devrun/s26_spk.py``,
probe ``.devrun/s26_ab.py``; not kept). Of a block's ~688 shared-memory wavefronts, the gather's
fill and the K/V ``ldmatrix`` reads are ~512 (counted the same way), so this variant kept K and V
out of shared memory: each thread loaded with 16-byte global loads exactly the elements of its
fragments. The QK k order
inside each k16 step was permuted (Q's A fragments the same way) so that a lane holds two 16-byte
pieces of each of its four tokens; the PV n order was permuted so that a lane holds one 16-byte
piece of each of its eight tokens, packed into B fragments in registers, with a matching
Fragment layout for the accumulator. K of block ``k + 1`` was loaded after block ``k``'s QK and
V after its PV, the shipped pipeline's order. It needs 168 registers (three CTAs per SM; capped
at 128 for four, it spilled 208 bytes) and 9 KB of static shared memory, and it has 4 barriers
per block against 6. Outputs agreed with the shipped kernel (rel. L2 5.9e-5 to 1.0e-4, LSE
within 2e-6, the same -inf rows). H200, same process, three rounds, CUDA-graph medians after a
read flush, us; paged kernel alone on sorted ids, ``pool`` = the uniform ids over a 128-page pool
that stays in L2:

=======================  ===========  ========================  ===========  ===========
case                     shipped      ``.nc.L1::no_allocate``   plain LDG    ``.cg``
=======================  ===========  ========================  ===========  ===========
uniform, paged alone     2508-2513    3644-3647                 3185-3186    3189-3209
uniform, pool            2394-2412    3175-3197                 2934-2957    2967-2969
decode 64 x 1            81.1-81.2    110.4-110.7               110.2-110.8  111.6-112.0
=======================  ===========  ========================  ===========  ===========

The ``.nc`` build also took 3130-3131 against 2424-2425 with 90% overlap and 364-365 against
261-262 on decode 64 x 4. A first build read each token's 64 K bytes of a lane quartet in two
halves, so every K sector was requested twice: uniform 3726-3727, pool 3470-3471, 90% overlap
3361-3367, decode 64 x 4 368. Capped at four CTAs per SM (spilling), decode 64 x 1 took
99.5-101.0 and uniform blocks 4021-4032. So without the ``ldmatrix`` traffic the kernel is still
22-23% slower from the L2 and 36% slower on decode. A load's registers stay reserved until its
mma issues, which is what costs the fourth CTA per SM; presumably four one-stage cp.async CTAs
keep more bytes in flight than three register-fed ones (not profiled). Cutting the shared-memory
traffic this way costs more occupancy than it saves.

Timestamps inside the kernel (globaltimer, thread 0 of each CTA, before the Q change,
median over CTAs, warm / after a read flush, us) had put the Q load phase at 4.5 / 8.5 per
CTA, before any K/V gather starts, and the other fixed phases at: row resolution 1.1-1.7;
the first chunk's slot resolution 0.9-1.2 with one 32-slot block, 3.0 with 16 blocks;
epilogue 2.7-4.6 writing partials, 7.5-7.7 through the direct epilogue with a gate (decode
64 x 4). On decode 64 x 1 (4 splits) the gather loop took 58-61 of the CTAs' ~78 us.

The same stamps in this kernel (session 13, probe ``.devrun/s13_stamps.py``: a barrier, then
thread 0 reads globaltimer between the phases; decode 64 x 1 after a read flush, medians over
CTAs, us): row resolution 1.44, Q load 1.28, first chunk's offsets 1.82, gather loop 58.7,
epilogue 4.0; the first CTA starts to the last one ends 73.1, the median CTA ends at 67.3.
By CTA kind (blocks per split: 17, 17, 17, 14; 116 SMs run four CTAs, 16 run three):

======================  =====  ===========  ===========
kind                    CTAs   loop ends    CTA ends
======================  =====  ===========  ===========
17 blocks, 4 per SM       339  64.9         68.5 (max 71.8)
17 blocks, 3 per SM        45  60.3         67.7
14 blocks, 4 per SM       125  57.2         67.7
14 blocks, 3 per SM         3  50.7         67.7
======================  =====  ===========  ===========

The partial stores of CTAs that finish their loop early only complete when the gathers of the
others end (their epilogue takes 7-17 us). The SMs received one CTA of each split (107 SMs
hold 3 x 17 + 14 = 65 blocks, 9 hold 62, 16 hold 48-51; an even share is 63): the SMs with 65
blocks end between 67.7 and 71.8 us, so the tail is mostly spread between equally loaded SMs.
An exact balance of the SMs' work (Stream-K over 528 CTAs whose ranges cross (row, head)
boundaries, each paying a second prologue) would save at most the 65 -> 63 blocks, ~2 us: the
1.2x target (76.4 us) stays out of its reach.

Grid order (H200, session 9, same process, three interleaved rounds, paged kernel alone, us):
the grid runs the rows fastest for one KV head, then the next head. Putting the heads of a
row side by side (x = row * Hkv + head, so the two 512-byte halves of a token's K/V row are
read at about the same time) was no better: uniform prefill 3521 / 3560 / 4307 against
3107 / 3336 / 3337, 90%-overlap prefill 2950 / 2931 / 2931 against 2948 / 2913 / 2902, decode
64 x 1 81.2 / 81.1 / 81.2 against 81.4 / 81.3 / 81.5, 64 x 4 268.9 / 268.2 / 268.6 against
267.8 / 269.0 / 268.7. Not kept.

Online softmax with a lazy max (:func:`._sparse_macros.online_softmax_step`, session 12).
The 16 x 32 score tile splits its columns over the four warps, so each row max and row sum
of a block was a cross-warp reduction: TileLang's ``AllReduce`` over 128 threads, five
barriers per row a thread holds, twenty per block. Now each thread keeps its share of the
row sums (one reduction after the last block) and the max is only updated when a score of
the block exceeds it by more than ``RESCALE_SLACK`` (8, log2 units; P stays <= 256), which
one ``__syncthreads_or`` tells the CTA (since session 26 a flag read behind the barrier before
PV on the split-QK tiles: "Four barriers per block" above); the first block with a usable slot
always updates it. Any common reference value gives the same softmax, so results differ from the
exact running max only in the rounding of P (rel. L2 0.0052 against 0.0051 on the suite shapes,
same LSE error, bitwise repeatable). H200, same process, three interleaved rounds, CUDA-graph
medians after a read flush, us (``paged``: ``MATE_SPARSE_UNION=0``; ``default``: the
launcher's path, whose union kernel holds whole rows per warp and had no cross-warp
reduction to drop):

=========================  =======================  =======================
case                       lazy max                 exact max per block
=========================  =======================  =======================
decode 64 x 1 (4 splits)   81.2 / 81.0 / 81.0       82.2 / 82.5 / 82.3
decode 64 x 4              302.5 / 266.3 / 266.2    268.4 / 267.9 / 268.9
uniform prefill, paged     3279 / 3107 / 3107       3264 / 3317 / 3367
90% overlap, paged         2562 / 2521 / 2519       2948 / 2902 / 2901
uniform prefill, default   3429 / 3262 / 3286       3352 / 3477 / 3481
90% overlap, default       1660 / 1645 / 1623       1674 / 1659 / 1636
=========================  =======================  =======================

L2 evict-first on split builds (session 38, probe ``.devrun/s38_evict.py``; ``kv_evict_first``,
:mod:`._l2_hints`). A split decode reads each K/V line once, and decode 64 x 1 streams ~269 MB
through the ~50 MB L2. With the default policy that stream also evicts what the call reads again:
the 6.3 MB of FP32 partials that the merge grid reads, the token-id and block-table lines that a
row's two KV-head CTAs share. With every K/V ``cp.async`` carrying ``L2::evict_first``, the stream
evicts itself first. Expected before the run: 0.5-2 us off 64 x 1, most likely ~1 (the partial
stores' ~1.3 us of session 37 as the upper end). Outputs and LSE were bitwise equal to the shipped
kernel's on every case. Same process, three interleaved rounds, CUDA-graph medians after a read
flush, us, on two leases:

==================================  ========================  ========================
case (lease)                        shipped                   evict-first K/V
==================================  ========================  ========================
64 x 1 (1)                          78.21 / 78.06 / 78.03     77.58 / 77.65 / 77.55
64 x 1, paged kernel alone (1)      73.63 / 74.16 / 73.50     73.60 / 73.89 / 73.28
64 x 1 (2)                          77.34 / 76.88 / 77.52     76.24 / 76.27 / 76.53
64 x 1, paged kernel alone (2)      72.30 / 72.45 / 72.90     72.19 / 71.98 / 72.70
32 x 1 (2)                          47.10 / 46.88 / 47.23     46.13 / 46.21 / 46.32
8 x 1 (2)                           23.94 / 23.26 / 23.38     23.36 / 23.78 / 22.99
1 x 1 (2)                           17.18 / 17.25 / 17.31     17.26 / 17.31 / 17.25
64 x 4, one split (1)               257.68 / 259.07 / 258.21  257.26 / 257.52 / 257.28
64 x 4, one split (2)               252.90 / 252.58 / 252.30  252.30 / 251.55 / 252.10
==================================  ========================  ========================

- The call gained 0.4-0.6 us (lease 1) and 0.6-1.1 us (lease 2) on 64 x 1, 0.7-1.0 on 32 x 1;
  8 x 1 and 1 x 1 did not move beyond their noise.
- The paged kernel alone gained 0-0.5 us, so most of the gain is after it: inferred, not measured,
  the merge grid now finds the partials in the L2 instead of DRAM.
- The same hint on the one-split build took 0.2-1.6 us off 64 x 4. The launcher does not use it
  there: that build also serves prefill, whose neighbouring rows share K/V through the L2 (the
  region sort exists for that). Session 40 timed it there (probe ``.devrun/s39_onesplit.py``, the
  full calls, outputs bitwise equal; same process, three rounds, us): uniform prefill 3083-3084
  against 2283-2284 shipped, mixed 1279-1281 against 1259-1262, 90% overlap 1549-1550 against
  1549-1551, 64 x 4 252.1-253.8 against 253.3-254.7. So the one-split build keeps the default policy.
- Not kept: the FP32 partial stores with ``L2::evict_last`` besides (lease 1): 64 x 1
  78.40 / 78.51 / 78.21, the paged kernel alone 74.53 / 74.62 / 74.64: 0.6-1.3 us slower than
  evict-first alone.

Masking follows the public semantics (the ``mate.qsa_sparse_attention`` docstring). The
row's request and last usable token id ``lim`` are resolved on the device
(:mod:`._sparse_macros`); slot ``t`` is used
iff ``0 <= t <= lim`` and its page ``block_table[req, t // page_size]`` is in
``[0, pages)``. The physical path (``selected_kv_indices``) is the ``PHYSICAL`` row
mode over one page of ``N`` slots: ``lim = N - 1``, page 0 of a 1 x 1 zero table, so
ids in ``[0, N)`` are used as K/V rows with no causal or length filter. The CTA resolves
``CH`` slots (a chunk) at a time into K/V row offsets in shared memory, in one gather
pipeline over its whole split that resolves the next chunk during the current chunk's
first block (runtime ``one_pipe``, eager tiles) or in one pipeline per chunk; a masked
slot gets the offset one past the end of K/V, so the
compiler's bounds predicate turns its 16-byte ``cp.async`` into a zero fill (no
read, and no ``0 * NaN`` from an unused cache row) and its score is set to -inf.

K/V are passed as flat ``[n, 8]`` views (16-byte rows) with their page/slot/head
strides in 16-byte units as runtime int64 scalars, so any validated K/V view
(unit, 16-byte aligned feature stride) is addressed without a recompile. Every
length, count and stride is a runtime value; the compile-time constants are the
group size, the dtype, the schedule's tile sizes and the offset width.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.
from typing import Any

from ._l2_hints import KV_EVICT_FIRST_IO, hint_kv_copies
from ._sparse_macros import (
    SOFTMAX_FLAG_IO,
    UNSEEN_STORE_IO,
    gated_output_strides,
    kv_offsets,
    kv_tile_gather,
    online_softmax_step,
    online_softmax_step_flagged,
    page_column,
    resolve_row_limit,
    resolve_row_limit_parallel,
    sigmoid_gate,
    slot_page,
    slot_rule,
)
from ._sparse_qk import PARTIAL_IO, FeatureSplitQK
from .sparse_groups import prepare_shell, replace_shell, sum_f32

__all__ = ["HEAD_TILE", "DIM", "sparse_paged_kernel"]

HEAD_TILE = 16  # mma m16: a group of <= 16 Q heads is padded to 16 rows on chip (shared memory or registers)
DIM = 256
VEC = 8  # 2-byte elements per 16-byte row (the vectorized output stores)
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
M_INIT = -1.0e30  # finite running-max start: exp2(-inf - M_INIT) = 0, never inf - inf


def sparse_paged_kernel(
    group: int,
    dtype: str,
    block_n: int,
    threads: int,
    chunk_blocks: int,
    num_stages: int,
    min_blocks: int,
    wide: bool,
    pdl: bool = False,
    eager: bool = False,
    gate_dtype: str = "float32",
    split_qk: bool = False,
    q_regs: bool = False,
    kv_evict_first: bool = False,
    groups: int = 1,
) -> Any:
    """Build the prim_func of one specialization.

    Parameters
    ----------
    group : int
        Q heads per KV head (1..16).
    dtype : str
        "bfloat16" or "float16" (Q, K, V).
    block_n : int
        Selection slots per inner iteration (the N of the QK tile).
    threads : int
        Threads per CTA (each warp needs >= 8 of the ``block_n`` columns).
    chunk_blocks : int
        Inner iterations whose slots are resolved at once into shared memory.
    num_stages : int
        Software-pipelining depth of the gather.
    min_blocks : int
        ``__launch_bounds__`` minimum CTAs per SM (caps registers; 1 = no cap).
    wide : bool
        int64 K/V offsets (K or V views spanning >= 2^31 16-byte rows); else int32.
    pdl : bool
        Programmatic dependent launch: let the merge kernel launch (and wait) while this
        one still runs.
    eager : bool
        Shorten the dependent-load chains: the first chunk's token ids are loaded before the
        row's request is resolved, the ``cu_seqlens_q`` search is one parallel count instead
        of a binary search, and each chunk's resolution also loads the next chunk's token
        ids (they arrive under the gathers). Eager kernels also take the runtime
        ``one_pipe`` mode (below); lazy ones ignore it.
    gate_dtype : str
        Dtype of the gate view the direct epilogue reads ("float32" or ``dtype``).
    split_qk : bool
        Score tile with the features split over the warps (:mod:`._sparse_qk`: Q in registers,
        each K element read once per block, PTX ldmatrix / mma.sync) instead of ``T.gemm``.
    q_regs : bool
        With ``split_qk``: each thread loads its Q fragment straight from global memory
        (:meth:`._sparse_qk.FeatureSplitQK.q_element`) instead of through ``q_s``, a barrier and
        ``ldmatrix``. The launcher builds it for one-split schedules only (measurements in the module
        docstring: faster on the prefill shapes, slower on split decode).
    kv_evict_first : bool
        Every K/V ``cp.async`` carries an L2 evict-first policy (:mod:`._l2_hints`; PTX, like
        ``pdl``), so the gathered stream does not evict what the call reads again (the partials,
        the shared metadata lines). The launcher builds it for split schedules only: one-split
        prefill rows share K/V through the L2.
    groups : int
        ``> 1``: the group build of :mod:`.sparse_groups` (split builds only, ``splits == groups``): one CTA
        of ``groups * threads`` threads per (row, KV head) runs its splits as independent groups and merges
        them, writing OUT/LSE (OP/LP are not touched). The prim_func is then a shell whose generated source
        is replaced by the rewritten split build (the same arguments).

    Kernel arguments
    ----------------
    Q [rows, Hq, D] dtype (runtime strides); KF, VF [nk, 8] / [nv, 8] dtype: K/V storage
    from their first element in 16-byte rows; TI [rows, T] int32 token ids; BT [R, max_pages]
    int32 block table; OP [splits, rows, Hq, D] float32 normalized partial outputs;
    LP [splits, rows, Hq] float32 partial LSE (natural log, -inf when empty) (1-element
    dummies when ``direct``); GATE [rows, Hq, D] ``gate_dtype``, OUT [rows, Hq, D] ``dtype``
    and LSE [rows, Hq] float32, runtime strides, written only when ``direct``; OUTF [n, 8]
    ``dtype``: ``OUT`` as 16-byte rows from its first element, written instead of ``OUT`` when
    ``out_vec`` (see the last scalars); UNU
    [n_groups] int32 union sizes of the row groups of the union path (a dummy when
    ``u_rows == 0``); CU [R+1] int32 cu_seqlens_q; R3 [3, rows] int32 per-row (request,
    local index, row count); SLQ / SLK [R] int32 lengths; QP [rows] int32 positions (the
    metadata a call lacks is a 1-element dummy, flagged off). Scalars: row mode, q_len, binary-search steps,
    KV capacity (max_pages * page_size), the has_* flags, pages, page_size, Hkv, the K/V
    page/slot/head strides in 16-byte units, scale, the split count (grid z), ``direct``
    (1 = one split, epilogue writes OUT/LSE), the has_gate / has_lse flags, ``u_rows`` and
    ``max_nu``: with ``u_rows > 0``, row ``r`` is skipped (no gather, nothing written) when
    ``UNU[r // u_rows] <= max_nu`` (the union kernel wrote it); ``one_pipe``: 1 = one
    software pipeline over the split's blocks, the next chunk resolved inside it (during
    the chunk's first block) into the other half of double-buffered offset arrays, so the
    gather never drains at a chunk boundary (faster on the decode and the prefill shapes of
    :mod:`.sparse_schedule`; every schedule the launcher picks runs it); 0 = one pipeline per
    chunk (kept for the benchmark sweep); ``ps_magic``, ``ps_shift``: the page size's
    :func:`._sparse_macros.page_divisor` (the eager chunk resolution divides by it with
    :func:`._sparse_macros.fast_div`); ``out_vec``, ``of0``, ``of1``: 1 where ``OUT`` allows whole
    16-byte stores (unit feature stride, 16-byte aligned rows), and its row and head strides in
    16-byte rows: the direct epilogue then stages the tile in ``k_s`` and stores it through
    ``OUTF`` (``sparse_launch._out_rows``).
    """
    import tilelang.language as T
    from tilelang.layout import make_swizzled_layout

    G = group
    H = HEAD_TILE
    D = DIM
    BN = block_n
    CH = block_n * chunk_blocks
    acc = "float32"
    off_t = "int64" if wide else "int32"
    resolve = resolve_row_limit()
    slot = slot_page()
    rule = slot_rule(fast=True)  # the eager chunk resolution: the page size's magic division
    put_offsets = kv_offsets(off_t)
    put_offsets_unseen = kv_offsets(off_t, unseen=True)  # the eager chunk resolution (resolve_chunk)
    gather = kv_tile_gather(BN, D)
    # The split-QK tile takes the softmax without its __syncthreads_or (four barriers per block).
    softmax_step = online_softmax_step_flagged(H, D, BN, threads) if split_qk else online_softmax_step(H, D)
    resolve_par = resolve_row_limit_parallel(threads)
    qk = FeatureSplitQK(dtype, H, BN, threads, D) if split_qk else None
    PT = CH // threads  # slots each thread resolves per chunk (eager path)
    NBUF = 2 if eager else 1  # chunk buffers of slot offsets (the one-pipeline mode alternates two)
    OUT_STEPS = H * D // VEC // threads  # 16-byte output rows each thread stores (vectorized epilogue)
    if q_regs and not split_qk:
        raise ValueError("q_regs loads the split-QK fragments: it needs split_qk")
    if OUT_STEPS * threads * VEC != H * D or BN < H:  # the output tile is staged in k_s ([BN, D])
        raise ValueError(f"unsupported paged tile: threads={threads} must divide {H * D // VEC}, block_n={BN} >= {H}")

    rows, hq, n_tok, n_req, max_pages, nk, nv = T.dynamic("rows, hq, n_tok, n_req, max_pages, nk, nv")
    o_s, o_r, o_h = T.dynamic("o_s, o_r, o_h")  # partials: a 1-element dummy under the direct epilogue
    n_ug = T.dynamic("n_ug")
    n_of = T.dynamic("n_of")
    sg, so, sl = gated_output_strides()
    n_cu, n_r3, n_slq, n_slk, n_qp = T.dynamic("n_cu, n_r3, n_slq, n_slk, n_qp")
    sq = T.dynamic("sq0, sq1, sq2", "int64")
    st = T.dynamic("st0, st1", "int64")
    sb = T.dynamic("sb0, sb1", "int64")
    s_cu, s_slq, s_slk, s_qp = T.dynamic("s_cu, s_slq, s_slk, s_qp", "int64")

    @T.macro
    def put_slot(j, t, lim, req, hk, BT, pages, page_size, kp, ks, kh, vp, vs, vh, koff_s, voff_s, k_end, v_end):
        # Slot j holds token t (lazy prologue: the page is read only for used ids).
        good, pg, sl = slot(t, lim, req, BT, pages, page_size, max_pages)
        put_offsets(j, good, pg, sl, hk, kp, ks, kh, vp, vs, vh, koff_s, voff_s, k_end, v_end)

    @T.macro
    def load_ids(t_reg, TI, r, base, tok1, tx):
        # This thread's token ids of the chunk starting at slot `base` (-1 past the split's end).
        for k in T.unroll(PT):
            t_reg[k] = T.if_then_else(
                base + k * threads + tx < tok1, TI[r, T.min(base + k * threads + tx, n_tok - 1)], -1
            )

    @T.macro
    def resolve_chunk(c, t_reg, pg_reg, lim, req, hk, BT, pages, page_size, kp, ks, kh, vp, vs, vh, koff_s, voff_s,
                      k_end, v_end, b0, tok1, TI, r, tx, ps_magic, ps_shift):  # fmt: skip
        # Chunk c (counted from block b0; ids already in t_reg) into buffer c % 2, then chunk c + 1's ids into t_reg.
        # Every slot's page is read, used or not (the column is clamped into the table): the reads
        # depend on the request only, not on lim, so on the first chunk they overlap the length loads.
        for k in T.unroll(PT):
            pg_reg[k] = BT[req, page_column(t_reg[k], page_size, max_pages, (ps_magic, ps_shift))]
        for k in T.unroll(PT):
            good, sl = rule(t_reg[k], lim, pg_reg[k], pages, page_size, ps_magic, ps_shift)
            put_offsets_unseen((c % 2) * CH + k * threads + tx, good, pg_reg[k], sl, hk,
                               kp, ks, kh, vp, vs, vh, koff_s, voff_s, k_end, v_end)  # fmt: skip
        load_ids(t_reg, TI, r, (b0 + (c + 1) * chunk_blocks) * BN, tok1, tx)

    @T.macro
    def block_step(base, q_s, qk_bufs, k_s, v_s, p_s, KF, VF, koff_s, voff_s, k_end, sl2, acc_s, m_i, m_prev, alpha,
                   l_acc, acc_o, p_tmp, flag_s):  # fmt: skip
        # Slots base .. base + BN of the offset buffers: gather, QK, mask, online softmax, PV.
        gather(k_s, v_s, KF, VF, koff_s, voff_s, base)
        if split_qk:
            # The flagged softmax's flag starts each block at 0 (after the last block's read and PV barrier).
            if T.get_thread_binding() == 0:
                T.call_extern("handle", "mate_sts", T.address_of(flag_s[0]), 0)
            qk.scores(k_s, *qk_bufs, acc_s)
        else:
            T.gemm(q_s, k_s, acc_s, transpose_B=True, clear_accum=True)
        for g, j in T.Parallel(H, BN):
            acc_s[g, j] = T.if_then_else(koff_s[base + j] != k_end, acc_s[g, j] * sl2, -T.infinity(acc))
        if split_qk:
            softmax_step(acc_s, p_tmp, m_i, m_prev, alpha, l_acc, acc_o, p_s, v_s, flag_s)
        else:
            softmax_step(acc_s, m_i, m_prev, alpha, l_acc, acc_o, p_s, v_s)

    def head_of(hk, g):
        # Global head of tile row g, clamped to the group and to hq - 1: an index the compiler can
        # bound, so Q and gate loads need no per-element guard (rows g >= G repeat head G - 1).
        return T.min(hk * G + T.min(g, G - 1), hq - 1)

    def lse_of(l_i, m_i, g):
        return T.if_then_else(l_i[g] > 0, (m_i[g] + T.log2(l_i[g])) * LN2, -T.infinity(acc))

    @T.macro
    def write_out(acc_o, l_i, inv_l, m_i, gate_s, k_s, GATE, OUT, OUTF, LSE, row0, hk, has_gate, has_lse, out_vec,
                  of0, of1):  # fmt: skip
        # One split: the sigmoid gate, the output dtype and the LSE (no partials, no merge). Products
        # with reciprocals, not IEEE divisions (~10 instructions each, two per element before).
        if has_gate != 0:
            if sg[2] == 0:
                # A per-head gate: the CTA's sigmoids, computed at its start (gate_s).
                for g, d in T.Parallel(H, D):
                    acc_o[g, d] = acc_o[g, d] * gate_s[g]
            else:
                # Branch-free (padding rows' products are never stored), so no per-element bounds
                # branch keeps the compiler from issuing the gate loads together.
                for g, d in T.Parallel(H, D):
                    head = head_of(hk, g)
                    acc_o[g, d] = acc_o[g, d] * sigmoid_gate(GATE[row0, head, d])
        if out_vec != 0:
            # Through k_s (free after the last block's QK; q_s would stay live and take shared memory
            # of its own) as 16-byte rows: each warp stores one head's 512 bytes in whole 32-byte
            # sectors, where the fragment's own 2-byte stores (runtime strides) write every sector of
            # the output in four parts.
            for g, d in T.Parallel(H, D):
                k_s[g, d] = T.cast(T.if_then_else(l_i[g] > 0, acc_o[g, d] * inv_l[g], 0), dtype)
            tx = T.get_thread_binding()
            for k in T.unroll(OUT_STEPS):
                g = (k * threads + tx) // (D // VEC)
                j = (k * threads + tx) % (D // VEC)
                if g < G:
                    for c in T.vectorized(VEC):
                        OUTF[row0 * of0 + (hk * G + g) * of1 + j, c] = k_s[g, j * VEC + c]
        else:
            for g, d in T.Parallel(H, D):
                if g < G:
                    OUT[row0, hk * G + g, d] = T.cast(T.if_then_else(l_i[g] > 0, acc_o[g, d] * inv_l[g], 0), dtype)
        if has_lse != 0:
            for g in T.Parallel(H):
                if g < G:
                    LSE[row0, hk * G + g] = lse_of(l_i, m_i, g)

    @T.macro
    def write_partial(acc_o, l_i, inv_l, m_i, OP, LP, s, row0, hk):
        # Split s: the FP32 normalized output and LSE, for the merge kernel.
        for g, d in T.Parallel(H, D):
            if g < G:
                OP[s, row0, hk * G + g, d] = T.if_then_else(l_i[g] > 0, acc_o[g, d] * inv_l[g], 0)
        for g in T.Parallel(H):
            if g < G:
                LP[s, row0, hk * G + g] = lse_of(l_i, m_i, g)

    shell_src, shell_dyn = "", 0
    if groups > 1:
        if q_regs or wide:
            raise ValueError(
                "the group build runs split builds with int32 offsets (q_regs=False, wide=False): four groups' "
                "int64 offset arrays exceed the SM's shared memory"
            )
        split_consts = (group, dtype, block_n, threads, chunk_blocks, num_stages, min_blocks, wide, pdl, eager,
                        gate_dtype, split_qk, q_regs, kv_evict_first)  # fmt: skip
        shell_src, shell_dyn = prepare_shell(sparse_paged_kernel, split_consts, groups=groups, group=G, dim=D,
                                             dtype=dtype)  # fmt: skip

    @T.macro
    def name_divisor(pool, magic, shift):
        pool[1] = T.cast(magic, acc) + T.cast(shift, acc)

    @T.prim_func
    def main(
        Q: T.StridedTensor([rows, hq, D], sq, dtype),
        KF: T.Tensor([nk, 8], dtype),
        VF: T.Tensor([nv, 8], dtype),
        TI: T.StridedTensor([rows, n_tok], st, "int32"),
        BT: T.StridedTensor([n_req, max_pages], sb, "int32"),
        OP: T.Tensor([o_s, o_r, o_h, D], acc),
        LP: T.Tensor([o_s, o_r, o_h], acc),
        GATE: T.StridedTensor([rows, hq, D], sg, gate_dtype),
        OUT: T.StridedTensor([rows, hq, D], so, dtype),
        OUTF: T.Tensor([n_of, VEC], dtype),
        LSE: T.StridedTensor([rows, hq], sl, acc),
        UNU: T.Tensor([n_ug], "int32"),
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
        hkv: T.int32,
        kp: T.int64,
        ks: T.int64,
        kh: T.int64,
        vp: T.int64,
        vs: T.int64,
        vh: T.int64,
        scale: T.float32,
        splits: T.int32,
        direct: T.int32,
        has_gate: T.int32,
        has_lse: T.int32,
        u_rows: T.int32,
        max_nu: T.int32,
        one_pipe: T.int32,
        ps_magic: T.int64,
        ps_shift: T.int32,
        out_vec: T.int32,
        of0: T.int64,
        of1: T.int64,
    ):
        with T.Kernel(rows, hkv, T.ceildiv(splits, groups) if groups > 1 else splits, threads=threads * groups) as (
            r,
            hk,
            s,
        ):
            if groups > 1:
                # The group shell (.sparse_groups): the launch shape and the shared memory of the group
                # kernel, and a body that names every argument the split build's kernel takes (never run:
                # the generated source is replaced by the rewritten split kernel).
                T.import_source(shell_src)
                pool = T.alloc_shared([groups * shell_dyn // 4], acc)
                if scale < -3.0e38:
                    pool[0] = sum_f32(rows, hq, n_tok, n_req, max_pages, nk, nv, o_s, o_r, o_h, n_ug, n_of, n_cu, n_r3,
                                      n_slq, n_slk, n_qp, *sq, *st, *sb, s_cu, s_slq, s_slk, s_qp, *sg, *so, *sl, mode,
                                      q_len, cap, has_slq, has_slk, has_qp, pages, page_size, hkv, kp, ks, kh, vp, vs,
                                      vh, scale, splits, direct, has_gate, has_lse, u_rows, max_nu, one_pipe, out_vec,
                                      of0, of1, Q[0, 0, 0], KF[0, 0], VF[0, 0], TI[0, 0], BT[0, 0],
                                       GATE[0, 0, 0], UNU[0], CU[0], R3[0, 0], SLQ[0], SLK[0], QP[0])  # fmt: skip
                    # The page divisor through a macro, as in the split kernel: TileLang names the arguments
                    # after the macro's parameters (magic, shift), and the shell's names must match.
                    name_divisor(pool, ps_magic, ps_shift)
                    OP[0, 0, 0, 0] = pool[0]
                    LP[0, 0, 0] = pool[0]
                    OUT[0, 0, 0] = T.cast(pool[0], dtype)
                    OUTF[0, 0] = T.cast(pool[0], dtype)
                    LSE[0, 0] = pool[0]
            else:
                if min_blocks > 1:
                    T.annotate_min_blocks_per_sm(min_blocks)
                if pdl:
                    # Trigger only (no griddepcontrol.wait here: that would also drop the
                    # __restrict__ read-only loads); the merge waits for this grid's completion.
                    T.pdl_trigger()
                q_s = T.alloc_shared([H, D], dtype)
                k_s = T.alloc_shared([BN, D], dtype)
                v_s = T.alloc_shared([BN, D], dtype)
                p_s = T.alloc_shared([H, BN], dtype)
                # Plain (static) shared memory: the dynamic pool would put a barrier before every copy.
                koff_s = T.alloc_shared([NBUF * CH], off_t, scope="shared")
                voff_s = T.alloc_shared([NBUF * CH], off_t, scope="shared")
                gate_s = T.alloc_shared([H], acc, scope="shared")  # sigmoids of a per-head gate (direct epilogue)

                acc_s = T.alloc_fragment([H, BN], acc)
                acc_o = T.alloc_fragment([H, D], acc)
                m_i = T.alloc_fragment([H], acc)
                m_prev = T.alloc_fragment([H], acc)
                l_i = T.alloc_fragment([H], acc)
                l_acc = T.alloc_fragment([H, BN], acc)  # per-thread shares of the row sums
                alpha = T.alloc_fragment([H], acc)
                p_tmp = flag_s = None
                qk_bufs = ()
                if split_qk or eager or kv_evict_first:
                    T.import_source((PARTIAL_IO + SOFTMAX_FLAG_IO if split_qk else "") + UNSEEN_STORE_IO
                                    + (KV_EVICT_FIRST_IO if kv_evict_first else ""))  # fmt: skip
                if split_qk:
                    # (q_frag, b_frag, c_frag, s_red) of the split QK; q_s and k_s get the swizzle that
                    # T.gemm would have inferred, the score tiles the T.gemm accumulator layout.
                    qk_bufs = (T.alloc_local(qk.q_frag_shape, dtype), T.alloc_local(qk.frag_shape, dtype),
                               T.alloc_local(qk.frag_shape, acc), T.alloc_shared(qk.red_shape, acc))  # fmt: skip
                    p_tmp = T.alloc_fragment([H, BN], acc)  # the flagged softmax's P
                    flag_s = T.alloc_shared([1], "int32", scope="shared")
                    scores = qk.score_layout([H, BN])
                    T.annotate_layout({q_s: make_swizzled_layout(q_s), k_s: make_swizzled_layout(k_s),
                                       acc_s: scores, l_acc: scores, p_tmp: scores})  # fmt: skip

                # This split's share of the row's BN-slot blocks: [blk0, blk1).
                n_blk = T.ceildiv(n_tok, BN)
                per = T.ceildiv(n_blk, splits)
                blk0 = T.alloc_var("int32", init=s * per)
                blk1 = T.alloc_var("int32", init=T.min(n_blk, s * per + per))
                tok1 = T.alloc_var("int32", init=T.min(n_tok, blk1 * BN))
                k_end = T.alloc_var(off_t, init=T.cast(nk, off_t))
                v_end = T.alloc_var(off_t, init=T.cast(nv, off_t))
                # Rows of a group the union kernel took (union size <= max_nu) are not touched here.
                skip = T.alloc_var("int32", init=0)
                if u_rows > 0:
                    if UNU[r // u_rows] <= max_nu:
                        skip = 1
                        # No token-id or Q reads either (a skipped CTA only resolves its row).
                        tok1 = 0
                if eager:
                    tx = T.get_thread_binding()
                    red_s = T.alloc_shared([threads // 32], "int32", scope="shared")
                    t_reg = T.alloc_local([PT], "int32")
                    pg_reg = T.alloc_local([PT], "int32")
                    # Token ids do not depend on the request: their loads overlap its resolution.
                    load_ids(t_reg, TI, r, blk0 * BN, tok1, tx)
                    req, lim = resolve_par(
                        r, mode, q_len, n_req, cap, CU, R3, SLQ, SLK, QP, has_slq, has_slk, has_qp, tx, red_s
                    )
                else:
                    req, lim = resolve(
                        r, mode, q_len, n_iter, n_req, cap, CU, R3, SLQ, SLK, QP, has_slq, has_slk, has_qp
                    )
                sl2 = scale * LOG2E

                if skip == 0:
                    # No per-element condition (head_of): the loads issue together. Padding rows'
                    # results are never stored; a skipped CTA computes nothing from Q.
                    if q_regs:
                        # Straight into this warp's A fragments (qk.q_element): no q_s round trip and no
                        # barrier, and nothing waits for the loads before the first QK.
                        tq = T.get_thread_binding()
                        for i in T.unroll(qk.q_frag_shape[0]):
                            g, d = qk.q_element(tq, i)
                            qk_bufs[0][i] = Q[r, head_of(hk, g), d]
                    else:
                        for g, d in T.Parallel(H, D):
                            q_s[g, d] = Q[r, head_of(hk, g), d]
                    if direct != 0 and has_gate != 0 and sg[2] == 0:
                        # A per-head gate (0 feature stride): one load and one sigmoid per head, here,
                        # where its latency hides behind the CTA's first gathers, not 32 per thread in
                        # the epilogue, where nothing else of the CTA is left to overlap it.
                        for g in T.Parallel(H):
                            gate_s[g] = sigmoid_gate(GATE[r, head_of(hk, g), 0])
                if split_qk and not q_regs:
                    qk.load_q(qk_bufs[0], q_s)
                T.fill(acc_o, 0)
                T.fill(l_acc, 0)
                T.fill(m_i, M_INIT)

                nb = T.max(blk1 - blk0, 0) * (1 - skip)
                if eager and one_pipe != 0:
                    if nb > 0:
                        resolve_chunk(0, t_reg, pg_reg, lim, req, hk, BT, pages, page_size, kp, ks, kh, vp, vs, vh,
                                      koff_s, voff_s, k_end, v_end, blk0, tok1, TI, r, tx, ps_magic, ps_shift)  # fmt: skip
                    T.sync_threads()  # chunk 0's offsets (stores the sync planner does not see) before the first gather
                    for k in T.Pipelined(nb, num_stages=num_stages):
                        # Block k of the split: chunk k // chunk_blocks, in buffer (k // chunk_blocks) % 2.
                        block_step(((k // chunk_blocks) % 2) * CH + (k % chunk_blocks) * BN, q_s, qk_bufs, k_s, v_s, p_s,
                                   KF, VF, koff_s, voff_s, k_end, sl2, acc_s, m_i, m_prev, alpha, l_acc, acc_o, p_tmp, flag_s)  # fmt: skip
                        if k % chunk_blocks == 0 and k + chunk_blocks < nb:
                            resolve_chunk(k // chunk_blocks + 1, t_reg, pg_reg, lim, req, hk, BT, pages, page_size,
                                          kp, ks, kh, vp, vs, vh, koff_s, voff_s, k_end, v_end, blk0, tok1, TI, r, tx,
                                          ps_magic, ps_shift)  # fmt: skip
                else:
                    for c in T.serial(T.ceildiv(nb, chunk_blocks)):
                        cb = blk0 + c * chunk_blocks
                        if eager:
                            resolve_chunk(0, t_reg, pg_reg, lim, req, hk, BT, pages, page_size,
                                          kp, ks, kh, vp, vs, vh, koff_s, voff_s, k_end, v_end, cb, tok1, TI, r, tx, ps_magic,
                                          ps_shift)  # fmt: skip
                            T.sync_threads()  # the chunk's offsets (unseen stores) before its gathers
                        else:
                            for j in T.Parallel(CH):
                                tok = cb * BN + j
                                t = T.if_then_else(tok < tok1, TI[r, T.min(tok, n_tok - 1)], -1)
                                put_slot(j, t, lim, req, hk, BT, pages, page_size,
                                         kp, ks, kh, vp, vs, vh, koff_s, voff_s, k_end, v_end)  # fmt: skip
                        for k in T.Pipelined(T.min(chunk_blocks, blk1 - cb), num_stages=num_stages):
                            block_step(k * BN, q_s, qk_bufs, k_s, v_s, p_s, KF, VF, koff_s, voff_s, k_end, sl2,
                                       acc_s, m_i, m_prev, alpha, l_acc, acc_o, p_tmp, flag_s)  # fmt: skip

                T.reduce_sum(l_acc, l_i, dim=1)
                # One reciprocal per row for the epilogue (alpha is free after the last block).
                for g in T.Parallel(H):
                    alpha[g] = T.if_then_else(l_i[g] > 0, 1 / l_i[g], 0)
                if skip == 0:
                    if direct != 0:
                        write_out(acc_o, l_i, alpha, m_i, gate_s, k_s, GATE, OUT, OUTF, LSE, r, hk, has_gate, has_lse, out_vec,
                                  of0, of1)  # fmt: skip
                    else:
                        write_partial(acc_o, l_i, alpha, m_i, OP, LP, s, r, hk)

    return main


def _postproc(code: str) -> str:
    # kv_evict_first builds: the gather's cache hint; group shells: the rewritten split kernel.
    return replace_shell(hint_kv_copies(code))


sparse_paged_kernel.cuda_postproc = _postproc  # type: ignore[attr-defined]
