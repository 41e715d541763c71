"""SplitKV merge of sparse-attention partials: FP32 combine + sigmoid gate + LSE.

Four-split schedules with int32 K/V offsets merge inside their CTA instead (:mod:`.sparse_groups`,
the same arithmetic in the same order); this kernel merges the other split schedules.

One CTA per (query row, Q head); each thread owns ``D / threads`` consecutive
features. With ``lse_s`` the partial natural-log LSEs and ``o_s`` the normalized
partial outputs::

    m = max_s lse_s;  w_s = exp(lse_s - m);  out = sigmoid(gate) * sum_s w_s o_s / sum_s w_s
    lse = m + log(sum_s w_s)

A row/head whose every split is empty (all ``lse_s = -inf``) gets zeros (even
where the gate holds NaN) and -inf. One split is the unsplit schedule: this is
then the single post-op that applies the gate and writes the caller's views (the union
path has its own, :mod:`.sparse_finalize_kernel`).

Not kept (H200, 2026-11-30, session 7, CUDA-graph medians, us): one warp per (row, head)
with lanes over the features, in place of this CTA per pair. Merge alone: 32 splits x 1 row
12.1-16.4 against 8.7-9.1, 25 x 8 11.6-15.2 against 9.5-9.8, 4 x 64 8.8-10.4 against 9.0;
whole decode calls 1 x 1 22.9-23.3 against 20.4-20.6 and 8 x 1 30.1-30.9 against 26.0-26.1.
Spreading the splits over threads (one load latency for the LSE max) and the features over
more SMs serves the latency-bound small batches better.

Not kept (H200, session 9, same process, three interleaved rounds, us): the first 8 splits'
partials loaded into registers right after the grid-dependency wait, beside the LSEs (one L2
round trip instead of two), with the paged kernel unchanged: decode 64 x 1 84.0 / 84.3 / 84.3
against 82.0 / 82.4 / 82.2, 8 x 1 27.5 / 27.4 / 27.4 against 26.1 / 26.2 / 26.0, 1 x 1 21.2
against 20.5, 32 x 1 unchanged (results bitwise identical).

Not kept either (H200, session 9, branch ``next/cluster-merge``, CUDA-graph medians after a
read flush, three interleaved rounds, us): no merge kernel, the ``S`` splits of a (row, KV
head) launched as one thread-block cluster (``cluster_dims = (1, 1, S)``), each CTA pushing
feature slice ``k`` of its unnormalized accumulator and its (max, sum) into CTA ``k``'s shared
memory (TileLang ``copy_cluster``: scalar remote stores), which combines the slice, applies the
gate and writes ``out``/``lse``. Correct (GPU tests, memcheck clean) but slower, the more so
the larger and more numerous the clusters: decode 64 x 1 at 4 splits 127.1-127.5 against
81.6-82.0 with this kernel, at 2 splits 87.8-88.0 against 86.1-86.3, at 8 splits 147 against
98; 32 x 1 at 8 splits 90 against 52; 8 x 1 at 8 splits 40 against 31; 1 x 1 at 8 splits 31.8
against 28.5 (a single cluster: the epilogue and launch cost ~3 us). Session 35 (probe
``.devrun/s35_cl.py``) found that the placement alone costs it. The unchanged paged kernel, launched as
clusters along the split axis, gave bitwise-equal outputs. Decode 64 x 1 took 99.2-99.7 us with clusters of 4,
79.3-79.4 with clusters of 2, against 77.4-78.0 shipped. The paged kernel alone took 94.9-95.7
with clusters of 4, against 73.3-73.6. So no merge inside a cluster of four can pay for its
placement.

Session 42 found why clusters of four cost that much, and measured clusters of two and three.
``cudaOccupancyMaxActiveClusters`` for a kernel of the paged kernel's shape (probe ``.devrun/s42_occ.cu``:
128 threads, 52 KB of shared memory, four CTAs per SM) on the H200:

* alone, 528 CTAs at once;
* clusters of 2: 264 clusters (528 CTAs);
* clusters of 3: 163 clusters (489 CTAs);
* clusters of 4: 124 clusters (496 CTAs);
* clusters of 8: 62 clusters (496 CTAs);
* clusters of 16: 28 clusters (448 CTAs).

So with clusters of four, 16 of the 512 CTAs of four splits wait for a second round. Probe
``.devrun/s42_cl.py`` (kernel copies made by ``.devrun/s42_mkcl.py``) timed the paged kernel alone (no
merge grid). ``+ barrier`` adds a cluster barrier as each CTA's last statement, which a merge through
distributed shared memory would need; ``- stores`` also skips the FP32 partial stores. That is the bound
of such a merge before its own work. Every cluster launch that stores its partials, merged by this kernel,
gave outputs bitwise equal to the shipped call's. Same process, three interleaved rounds, CUDA-graph
medians after a read flush, us:

=================  ===========  ===========  ===========  ===================
splits             no cluster   clusters     + barrier    + barrier, - stores
=================  ===========  ===========  ===========  ===================
4                  73.4-73.5    74.7-74.9    75.1-75.4
                                (of 2)       (of 2)
4                                            94.6-94.9
                                             (of 4)
3                  73.6-73.8    82.1-82.2    82.6-82.9    80.2-80.4
                                (of 3)       (of 3)       (of 3)
=================  ===========  ===========  ===========  ===================

For comparison, the shipped call with this merge grid took 77.3-77.4 at four splits and 77.5-77.7 at
three. Without the partial stores the paged kernel alone took 72.4-72.5 at four splits and 72.4-72.8 at
three.

Clusters of three fit in one round and still cost 8.3-8.6 us. Inferred, not measured: the cluster
scheduler packs them onto fewer SMs than the plain launch, which spreads 384 CTAs at about three per SM.
So no cluster shape leaves room for an in-cluster merge:

* clusters of two only pair the splits, so the merge grid stays, and their placement costs ~1.3 us;
* clusters of three already cost more than the whole merge grid (80.2-80.4 with no partial stores,
  against the shipped 77.5-77.7 for the call);
* clusters of four need a second round.

The four splits as four groups of one CTA (session 42, probe ``.devrun/s42_gp.py``, source rewrite
``.devrun/s42_grp.py``; a probe, not shipped). The split build's generated CUDA source was rewritten so
that one 512-thread CTA per (row, KV head) runs the four splits as four independent 128-thread groups.
Each group has its own shared memory, its own barrier ids (``bar.sync 1 + group, 128`` for TileLang's
``__syncthreads``; ids of their own for its ``AllReduce`` barriers, whose workspace index is the raw
``threadIdx.x``) and split ``4 * blockIdx.z + group``. The probe launches the cubin through the driver
API, because TileLang's host code fixes the launch at 128 threads and one CTA per split. So each SM
still runs four 128-thread chains, as with four CTAs. With ``gmrg``, each group writes its normalized
partial output and LSE into its own shared memory. After one CTA barrier the CTA merges them as this
kernel does and writes ``out`` and ``lse``, so there are no FP32 partial stores and no merge grid.
Outputs and LSE were bitwise equal to the shipped call, eagerly and after a graph replay into
NaN-poisoned buffers, on two input sets. 128 registers; 20 bytes of spill (none as shipped). Decode
64 x 1, same process, three interleaved rounds, CUDA-graph medians after a read flush, us, two leases
(the shipped call 76.1-76.3 and 76.1-76.7):

=========================================================  ===========  ===========
variant                                                    lease A      lease B
=========================================================  ===========  ===========
shipped call (paged grid + this merge grid)                76.11-76.32  76.08-76.72
groups, global partials + this merge grid                  76.86-77.33  76.86-77.38
shipped paged grid alone (no merge)                        72.13-72.80  72.83-73.36
groups, global partials, alone (no merge)                  72.86-73.09  72.98-72.99
groups, partials in shared memory, CTA barrier, no merge   72.34-72.91  72.51-72.88
merge per element (4 ``expf`` each), no gate               75.62-76.02
merge per element, gate sigmoid per element                76.88-76.96
weights once per head (``fast``)                           74.53-75.01  74.72-74.91
``fast``, per-head gate by the shortest split's group                   74.19-74.69
=========================================================  ===========  ===========

The rows without a merge leave ``out`` incomplete and are timing bounds only.

* The merge is worth doing once per head, not once per element: with the split weights, their sum, the
  LSE and the gate sigmoid taken for every one of a thread's six elements, the ``exp`` work alone
  (75.5-75.8 us without the ``out`` stores) cost nearly as much as the merge grid.
* ``fast``: threads 0-11 take each head's weights, sum and LSE after the CTA barrier, a second barrier,
  then every thread sums its six elements' four partials and stores them.
* A per-head gate (the launcher's expanded ``[rows, Hq]`` gate) loaded after the barrier put one DRAM
  round trip on the path. The group of the last split, whose 14 blocks end ~6 us before the others' 17,
  took the sigmoids before the CTA barrier: another 0.2-0.5 us.
* Loading each thread's six gate values into registers before the barrier cost ~10 us (86.2-86.5 on a
  third lease, the shipped call 75.9-76.2), with 36 bytes of spill against 20 (not profiled further).

So ``fast`` with the per-head gate taken early is 1.6-2.0 us under the shipped call in each round. That
is 74.2-74.7 us, about 1.16-1.17x of the ~64.0 us floor of recent suite runs (this probe did not measure
the copy rate). It is the first merge measured that is faster than this kernel's grid. The groups
themselves cost 0-0.7 us over four CTAs (the shipped grid alone against the groups alone).

The launcher runs it as the group build of :mod:`.sparse_groups`. The paged kernel as written cannot run
this way: TileLang lays its fragments out over the CTA's threads, its generated ``__syncthreads`` and
reduction workspaces are per CTA, and its host code launches the ``T.Kernel`` shape. So the split
build's generated source is rewritten as in the probe, and TileLang launches it through a shell
prim_func of the same arguments with the group kernel's launch shape.
Since session 43 its merge is lighter than ``fast``: after the one CTA barrier each warp merges one head
(every lane takes the weights, so no second barrier; float4 partial loads, 8-byte ``out`` stores), and
the call takes 75.1-75.3 us against 77.0-77.2 with this kernel (``sparse_groups`` has the numbers).
Since session 44 both merges multiply by one reciprocal of each head's denominator instead of dividing
every element (they stay bitwise equal): the call took 74.05-74.66 us against 75.42-75.76 with this kernel.

Not kept either (H200, session 10, probe ``.devrun/s10_fmerge.py``): no merge kernel, the last split
of a (row, KV head) to finish merging the partials itself. Each split stores its partial, then
``__threadfence`` and an atomic increment of a per-(row, KV head) counter; the split that
sees ``splits - 1`` merges and resets the counter. Results were within 3e-5 of the shipped
path (rel. L2), LSE identical, and the counters were back to zero after every replay.

Times (same process, CUDA-graph medians after a read flush, three rounds, us). Column (a)
counts splits but does not merge; column (b) writes the partials and does nothing else. Both
leave ``out`` incomplete and are timing bounds only.

==============  =========  ==========  ===========  ===========  ===========
case            splits     shipped     fused merge  (a)          (b)
==============  =========  ==========  ===========  ===========  ===========
1 x 1           32         20.5-20.6   62.9-63.4    17.7-18.0    16.3-16.4
8 x 1           25         26.4-26.5   59.7-60.1    26.7-26.8    22.4-22.6
32 x 1          7          49.6-49.8   75.9-76.4    61.6-61.8    58.3-58.5
64 x 1          4          80.5-81.2   117.0-117.4  104.1-104.9  100.1-100.5
==============  =========  ==========  ===========  ===========  ===========

* The merge kernel plus its launch cost at most ~4 us, the gap between shipped and (b) at
  1 x 1 and 8 x 1.
* The counter and fences take 1.3-4.3 us of that.
* In one CTA, the merge walks the splits in turn, one L2 round trip each: +45 us at 32 splits.
* The extra shared memory and code cost the 32- and 64-row cases 8-20 us even without merging
  (b).

Not kept either (H200, session 19, patch ``.devrun/s19_cta.diff``, probes ``.devrun/s19_cta.py`` and
``.devrun/s19_ncu.py``): no merge kernel, the four splits of a (row, KV head) side by side in one
CTA of 512 threads. Each 128-thread range ran the paged kernel's split loop with its own K/V
buffers, slot offsets and softmax state; the lazy max voted on a named barrier of its own
(``bar.red.or``), and the row reductions went through shared memory, because TileLang's
cross-warp reduction synchronizes on CTA-wide named barriers 1 and 2, which ranges reducing at
the same time would share. At the end the ranges merged through shared memory (one common max,
then two hand-over rounds) and the first range applied the gate and wrote ``out``/``lse``.
Decode 64 x 1 then runs 128 CTAs, one per SM, with the same 16 warps per SM as the shipped
four CTAs. Outputs agreed with the shipped path (rel. L2 <= 2.6e-3, LSE within 1e-6) and
were bitwise repeatable. It was much slower (same process, three rounds, CUDA-graph medians
after a read flush, us; ``z`` CTAs per (row, KV head), each of four splits, merged by this kernel
when ``z > 1``):

=============  ==============================  ====================
case           side by side                    shipped
=============  ==============================  ====================
64 x 1         190.4-190.9 (z 1), 212 (z 2)    80.9-81.3 (4 splits)
32 x 1         109.3-109.5 (z 2)               49.8-50.1 (7)
16 x 1         71.9-72.1 (z 4), 79.7 (z 3)     36.2-36.4 (13)
8 x 1          51.1-51.4 (z 6)                 26.1-26.2 (25)
1 x 1          32.5-32.9 (z 32), 47.2 (z 8)    19.7-20.6 (32)
=============  ==============================  ====================

Nsight Compute on decode 64 x 1 (one call after warm-up, ``--clock-control none``): the paged
kernel took 191 us against 74.6 us shipped (the shipped merge kernel 7.5 us; Nsight Compute
runs each kernel alone, after flushing the caches), with 35.4 cycles between a warp's
instructions against 14.2: barrier stalls 14.9 against 2.2, long-scoreboard 11.7 against 2.9,
no-instruction 2.4 against 0.7, for 18.1 M instructions against 17.1 M. TileLang 0.1.15 lays
out a tile per constant thread range, so the kernel holds one copy of the split's code per
range (439 KB of SASS against 164 KB), and the ranges stall on their own barriers far more than
separate CTAs do; why is not established.
Two TileLang behaviours had to be worked around first, worth knowing for any kernel with
thread ranges that run at the same time: it reuses a shared buffer once the program order says
it is dead (the four ranges' K tiles shared one address until ``tl.disable_shared_memory_reuse``),
and a barrier it needs directly inside a range's branch is hoisted out of the branch as
``__syncthreads()``, which ranges that wait for each other never all reach (a build with one
such barrier did not finish its probe within 300 s; an explicit named barrier at that point
keeps TileLang's inside the branch).

What the merge kernel costs, and the last split merging again (H200, session 20, probes
``.devrun/s20_mkprobe.py`` and ``.devrun/s20_fmprobe.py``, same process, three rounds, CUDA-graph
medians after a read flush, us). Merge kernel bodies on decode 64 x 1 (4 splits) and 8 x 1 (25):

==========================================  ==================  ==================
merge kernel                                64 x 1              8 x 1
==========================================  ==================  ==================
shipped                                     81.1 / 81.4 / 81.6  25.8 / 25.8 / 26.0
grid-dependency wait and LSE max only       78.6 / 78.6 / 78.9  22.5 / 22.8 / 22.4
grid-dependency wait only                   77.8 / 78.1 / 77.8  21.4 / 21.4 / 21.4
not launched (paged kernel alone)           76.4 / 76.3 / 75.8  20.7 / 20.8 / 20.7
==========================================  ==================  ==================

So of its ~5 us on 64 x 1 (medians), ~1.5 are the second grid (its launch and the wait for the
paged grid), ~0.8 the LSE round trip and ~2.8 the rest (the weighted sum of the 6.3 MB of FP32
partials, the stores).
The last split merging was rebuilt without any extra shared memory (the session-10 build lost
a CTA per SM to it): the paged kernel's epilogue publishes its partial (``__threadfence``, then
an atomic add on a per-(row, KV head) counter that the merging CTA resets to 0), and the split
that sees ``splits - 1`` merges the partials from L2 in registers (128 registers, no spills,
results bitwise equal to the merge kernel's). Counter and fence alone, with no merge at all,
took 78.1-78.8 against 81.2-81.8 shipped (~2 us over the paged kernel alone); with the merge,
106.9-107.0 (104.7-104.8 without the fences, 106.2-107.0 with an ``acq_rel`` atomic instead):
the merging CTAs run while the other CTAs still saturate the memory system, so each of their
five or six dependent round trips (counter, LSEs, partials, gate) waits behind the gathers, and
the gate loads of that build, sitting between stores to ``out`` that may alias them, issued one
at a time (95 us without gate and LSE). The merge kernel waits until the gathers are over and
then costs ~5 us; no in-kernel merge measured so far costs less.

Not kept either (session 20, probe ``.devrun/s20_bprobe.py``): the partial outputs stored in the
input dtype (the spec allows it; the merge still accumulates in FP32), halving the partial
traffic. Against the FP32 reference the decode outputs went from rel. L2 2.4-2.6e-3 to
3.1-3.2e-3, LSE unchanged. Same process, three rounds, us, FP32 partials first: 64 x 1 81.2 /
81.4 / 81.5 against 81.9 / 81.7 / 82.0; 32 x 1 49.6-49.8 against 50.2-50.4; 16 x 1 36.5-36.9
against 35.8-35.9; 8 x 1 26.4-26.6 against 26.1-26.3; 1 x 1 20.6-20.9 against 20.9-21.0. The
partials' volume is not what the merge kernel's ~2.8 us after its LSE read are spent on.

Not kept either (session 20, patch ``.devrun/s20_fast.py``, probe ``.devrun/s20_fastprobe.py``): for
up to 8 splits, every thread loading all the LSEs (broadcast) and its features of every split at
once, one round trip after the wait with no shared memory and no barrier (results bitwise equal,
same order of terms). Same process, three rounds, us, shipped first: 64 x 1 80.9-81.2 against
81.5-81.7; 32 x 1 49.6-49.7 against 49.6; 16 x 1 at 8 splits 33.8-33.9 against 34.1-34.3; 64 x 1
at 2 splits 84.7-84.8 against 84.8; 64 x 4 at 2 splits 282.2-282.6 against 280.0-280.3; 64 x 1
without gate and LSE 81.0-81.2 against 80.5-80.7; 8 x 1 (25 splits, the general path in the
larger kernel) 25.4-25.7 against 26.2-26.5. The round trips after the wait are not where the
merge kernel's time goes either. A CUPTI timeline (``docs/performance-notes.md``) shows the merge
grid ending 5.4 us after the paged grid, but not what inside those 5.4 us waits (its CTAs'
placement as the paged CTAs leave, the grid's completion).

Not kept either (session 32, probe ``.devrun/s32_wmerge.py``): fewer and larger CTAs, to test
whether placing the 1536 CTAs of decode 64 x 1 as the paged CTAs leave is what those 5.4 us
wait on. One CTA per (row, group of ``hpc`` Q heads), one warp per head, 8 features per lane,
every split's LSE and partial loaded at once after the wait, no shared memory and no barrier.
Results were bitwise equal to this kernel's. Same process, same paged kernel, three interleaved
rounds, CUDA-graph medians after a read flush, us:

==========================================  ==================
merge kernel                                64 x 1 (4 splits)
==========================================  ==================
shipped (1536 CTAs of 64 threads)           78.0 / 78.4 / 78.1
hpc 1 (1536 CTAs of 32 threads)             79.5-79.8
hpc 4 (384 CTAs of 128)                     79.4-79.6
hpc 12 (128 CTAs of 384)                    78.7-78.9
hpc 24 (64 CTAs of 768)                     79.0-79.4
==========================================  ==================

Decode 64 x 4 runs one split, so it launches no merge; it served as the noise control:
258.6-258.9 us with the shipped launcher, 258.6-259.8 with the swapped ones. So CTA placement is
not what the merge grid waits on either.

Not kept either (session 33, patch ``.devrun/s33_flags.diff``, probe ``.devrun/s33_flags.py``): per-split
completion flags in place of ``griddepcontrol.wait``, so that each merge CTA waits only for the
splits of its own (row, head), not for the whole paged grid to finish and flush. Each paged CTA armed its
``LP`` entries with a NaN payload (a relaxed store, ``__threadfence``, a barrier, then the PDL
trigger), and at its end stored its partial output, fenced in every thread, synchronized and
published its LSEs with relaxed GPU-scope stores. The merge CTA polled its splits' LSEs with
acquire loads (a 100 ns sleep between polls, a trap after 2^25 polls). With a runtime
``grid_wait = 1`` the merge also waited for the whole grid, which isolates what arming and
publishing cost. Outputs and LSE were bitwise equal to this kernel's on every case, and 300 graph
replays of each case were bitwise equal too. Same process, three interleaved rounds, CUDA-graph
medians after a read flush, us (a fast lease):

==========  ===========  ===========  =================
case        shipped      flags        flags + grid wait
==========  ===========  ===========  =================
64 x 1      76.5-76.8    77.3-77.7    78.6-79.0
64 x 4      253.4-254.4  255.0-255.5  254.9-255.5
32 x 1      46.7-47.2    47.3-47.6    48.5-48.9
8 x 1       23.2         24.0-24.2    23.9-25.2
1 x 1       16.9-17.1    17.6-17.9    17.7-17.8
==========  ===========  ===========  =================

Measured: arming and publishing cost 2.1-2.2 us on decode 64 x 1 (flags + grid wait against
shipped, round by round), and polling instead of the grid wait won back 0.9-1.6 us of it. Inferred, not measured:
each of the two fences costs about one memory round trip, the first on the prologue's chain before
the trigger, the second on the last CTAs' path before their flags. Moving the first fence off the
chain could win back at most its share, which would leave the flags at about the shipped time: the
fence before the flags does what the grid's completion did. Decode 64 x 4 (one split, no merge,
nothing armed) was also 1-2 us slower; the only change on its path is a barrier before the trigger.

Not kept either (session 40, probe ``.devrun/s39_gsync.py``, kernel made by ``.devrun/s39_mkgsync.py``):
the merge inside the paged grid after a barrier, so that no second grid is launched, placed or waited
for. After its partial stores each CTA waited, then merged ``ceil(12 / S)`` of its row's Q heads, with
every LSE and partial load issued before the first use. There were two barriers:
``gsync``, ``T.sync_grid()`` under a cooperative launch, and ``rsync``, a counter per (row, KV head)
(``atom.add.release.gpu``, then ``ld.acquire.gpu`` polls 40 ns apart), which waits only for the row's
own ``S`` splits. Plain launches assume the whole grid is resident, which a library could not. Outputs
and LSE were bitwise equal to this kernel's, eagerly and after a graph replay into poisoned buffers.
Bounds, leaving ``out`` incomplete: ``paged`` (the paged kernel alone), ``gbar`` / ``rbar`` (a barrier and
no merge). Expected before the run: 0.5-2 us off 64 x 1. Same process, three interleaved rounds,
CUDA-graph medians after a read flush, us (a fast lease):

=========  =========  ===========  ===========  ===========  ===========  ===========
case       shipped    gsync        rsync        paged        gbar         rbar
=========  =========  ===========  ===========  ===========  ===========  ===========
64 x 1     75.9-76.3  84.5-86.3    77.3-77.7    72.0-72.2    74.9-75.3    73.0-73.5
32 x 1     45.9-46.1  55.4-56.1    50.4-50.7    41.5-41.9    45.5-45.7    42.5-42.8
8 x 1      22.8-23.2  35.1-36.2    34.6-34.8    18.5-18.8    21.1-21.8    19.9-20.6
1 x 1      16.9-17.1  32.9-33.0    31.6-31.8    13.5-13.7    14.9-15.1    14.4-14.6
=========  =========  ===========  ===========  ===========  ===========  ===========

On 64 x 1 the cooperative grid barrier alone costs ~3 us (``gbar`` against ``paged``), and the merge
after it ~10 us more. The row barrier alone costs ~1 us, but the merge after it costs 4.3 us more,
against ~4.1 us for this kernel's whole grid (shipped against ``paged``). Inferred, not measured: merges
that start while other rows still gather wait on a loaded memory system, as in sessions 10 and 20.
The smaller batches (7, 25 and 32 splits) lose 4-16 us with either barrier.

Session 41 (probe ``.devrun/s41_rsync.py``, kernel made by ``.devrun/s41_mkrsync.py``) tested two
explanations of the 4.3 us. First, the gate: that build loaded each gate element between stores to
``out``, which may alias it as far as the compiler knows, so the loads ran one round trip after another.
Second, the residency that ``rsync`` assumed: a cooperative launch would guarantee it. So the gate
sigmoids were taken before the row barrier, and ``crsync`` / ``crbar`` ran the same kernels under a
cooperative launch (a ``T.sync_grid()`` behind a runtime condition that is never true marks the kernel;
with 64 splits, 8192 CTAs, the launch failed with ``CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE``, as it
should). Outputs and LSE were bitwise equal, eagerly and after a graph replay into poisoned buffers.
Expected before the run: ``rsync`` 1-2 us under shipped on 64 x 1. Same process, three interleaved
rounds, CUDA-graph medians after a read flush, us (a lease ~1 us slower than session 40's):

=========  ===========  ===========  ===========  ===========  ===========  ===========
case       shipped      rsync        crsync       paged        rbar         crbar
=========  ===========  ===========  ===========  ===========  ===========  ===========
64 x 1     76.8-77.3    78.1-78.6    79.5-79.8    73.2-73.4    74.0-74.3    75.5-75.8
32 x 1     46.5-46.7                 50.0-50.3    42.2-42.5
8 x 1      22.9-24.0                 39.8-41.8    18.9-19.5
1 x 1      17.1-17.2                 37.6-38.2    13.4-13.6
=========  ===========  ===========  ===========  ===========  ===========  ===========

The merge after the row barrier still costs 4.3 us (``rsync`` against ``rbar``), so the gate loads were
not the cause. The cooperative launch costs another ~1.5 us by itself (``crbar`` against ``rbar``). An
in-grid merge that a library could ship (cooperative, or with some other guarantee that a row's splits
run together) is 2.2-3.0 us slower than this kernel on 64 x 1 (``crsync``).
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.
from typing import Any

from ._sparse_macros import gated_output_strides, sigmoid_gate
from .sparse_paged_kernel import DIM

__all__ = ["sparse_merge_kernel", "UNROLL"]

UNROLL = 8  # partial loads in flight per thread and step


def sparse_merge_kernel(dtype: str, gate_dtype: str, threads: int, pdl: bool = False) -> Any:
    """Build the merge prim_func.

    Parameters
    ----------
    dtype : str
        Output dtype ("bfloat16" / "float16").
    gate_dtype : str
        Gate dtype ("float32" or ``dtype``); irrelevant when the call has no gate.
    threads : int
        Threads per CTA, with ``DIM % threads == 0`` and ``threads % UNROLL == 0``.
    pdl : bool
        Wait on the paged kernel with a programmatic dependent launch (``griddepcontrol.wait``)
        instead of a full stream serialization, so this launch overlaps the paged kernel's tail.

    Kernel arguments
    ----------------
    OP [splits, rows, Hq, D] float32; LP [splits, rows, Hq] float32;
    GATE [rows, Hq, D] gate_dtype, runtime strides (a per-head gate is passed with a
    0 feature stride; no gate: a dummy view and ``has_gate = 0``);
    OUT [rows, Hq, D] dtype and LSE [rows, Hq] float32, runtime strides (no LSE: a
    dummy view and ``has_lse = 0``).
    """
    import tilelang.language as T

    D = DIM
    V = D // threads
    W = threads // 32
    acc = "float32"
    splits, rows, hq = T.dynamic("splits, rows, hq")
    sg, so, sl = gated_output_strides()

    @T.prim_func
    def main(
        OP: T.Tensor([splits, rows, hq, D], acc),
        LP: T.Tensor([splits, rows, hq], acc),
        GATE: T.StridedTensor([rows, hq, D], sg, gate_dtype),
        OUT: T.StridedTensor([rows, hq, D], so, dtype),
        LSE: T.StridedTensor([rows, hq], sl, acc),
        has_gate: T.int32,
        has_lse: T.int32,
    ):
        with T.Kernel(rows, hq, threads=threads) as (r, h):
            tx = T.get_thread_binding()
            w_s = T.alloc_shared([threads], acc, scope="shared")
            red_s = T.alloc_shared([W], acc, scope="shared")
            o = T.alloc_local([V], acc)
            gate = T.alloc_local([V], acc)
            mx = T.alloc_var(acc, init=-T.infinity(acc))
            den = T.alloc_var(acc, init=0)
            # The gate is an input of the call, not of the paged kernel: its load may run
            # before the wait (and overlap the paged kernel's tail under PDL).
            for i in T.serial(V):
                gate[i] = 1
                if has_gate != 0:
                    gate[i] = sigmoid_gate(GATE[r, h, tx * V + i])
            if pdl:
                T.pdl_sync()
            # Splits are spread over the threads (one load each, all in flight at once), not
            # walked by every thread: a serial walk pays one load latency per split.
            for c in T.serial(T.ceildiv(splits, threads)):
                if c * threads + tx < splits:
                    mx = T.max(mx, LP[c * threads + tx, r, h])
            mx = T.warp_reduce_max(mx)
            if tx % 32 == 0:
                red_s[tx // 32] = mx
            T.sync_threads()
            mx = red_s[0]
            for w in T.unroll(1, W):
                mx = T.max(mx, red_s[w])
            for i in T.vectorized(V):
                o[i] = 0
            for c in T.serial(T.ceildiv(splits, threads)):
                # mx = -inf means every split is empty: w stays 0 (never exp(-inf + inf)).
                w_s[tx] = 0
                if c * threads + tx < splits:
                    if LP[c * threads + tx, r, h] > -T.infinity(acc):
                        w_s[tx] = T.exp(LP[c * threads + tx, r, h] - mx)
                T.sync_threads()
                # UNROLL independent partial loads in flight per step; slots past the last split
                # have weight 0 and read the last split (finite), so no guard is needed.
                for j in T.serial(T.ceildiv(T.min(threads, splits - c * threads), UNROLL)):
                    for u in T.unroll(UNROLL):
                        den = den + w_s[j * UNROLL + u]
                        for i in T.vectorized(V):
                            o[i] = (
                                o[i]
                                + w_s[j * UNROLL + u]
                                * OP[T.min(c * threads + j * UNROLL + u, splits - 1), r, h, tx * V + i]
                            )
                T.sync_threads()
            # One reciprocal and products, not a division per element (the group build's merge does the same).
            inv = T.alloc_var(acc, init=0)
            if den > 0:
                inv = T.float32(1) / den
            for i in T.serial(V):
                OUT[r, h, tx * V + i] = T.cast(T.if_then_else(den > 0, o[i] * inv * gate[i], 0), dtype)
            if has_lse != 0 and tx == 0:
                LSE[r, h] = T.if_then_else(den > 0, mx + T.log(den), -T.infinity(acc))

    return main
