"""Sparse attention over the union of a group of rows' selections, one (row group, KV head) per CTA.

``R`` consecutive query rows form a group (:mod:`.sparse_union` builds its union). The
CTA holds the group's Q heads of one KV head as an ``[16 R, D]`` tile in shared memory
(row ``i`` of the group in rows ``16 i .. 16 i + group - 1``; padding rows repeat a real
row and head, and their results are never stored), so one
gathered K/V token serves all ``R`` rows: the K/V bytes moved into the SMs shrink by
the rows' overlap. Per tile of ``BN`` union slots: 16-byte ``cp.async`` gather of K and
V (a slot past ``NU[g]`` or without a token points one past the end of K/V, so the
bounds predicate zero-fills it), QK gemm ``[16 R, BN]``, the per-(row, slot) bias
``log2(count)`` (``count`` = how often the row selected that token, duplicates
included; 0 masks it to -inf), FP32 online softmax (exp2) and the PV gemm. Output: the
normalized FP32 partial and its natural-log LSE in the paged kernel's ``OP``/``LP``
format with one split, for :mod:`.sparse_merge_kernel` (gate, ``out``/``lse`` views).

A row's softmax over the union slots with these biases equals its softmax over its own
selection: ``exp(s + ln c) = c exp(s)`` counts a duplicated token ``c`` times.
The softmax step is the paged kernel's (lazy max, per-thread row sums); here each warp
holds whole rows of the 64-row tile, so it removed no cross-warp reduction (90%-overlap
prefill through the default path 1623-1660 against 1636-1674 us, session 12).

The Q tile is loaded with clamped row and head indices and no per-element condition (the
loads carry no branch and issue together), and only by CTAs whose group takes the union
path. Against the guarded, zero-padding load that every CTA ran (H200, 2026-11-30, session
7, same process, three interleaved rounds, end-to-end union path, us): 90%-overlap prefill
1994 / 1990 / 1989 against 2290 / 2277 / 2283; uniform prefill (every group left to the
paged kernel) 3677 / 3728 / 3761 against 4028 / 4028 / 4092.

Each thread resolves whole union slots of a chunk (the entry, its offsets, then the ``R``
counts): the union kernel alone (with the finalize kernel, session 8, 2026-11-30, three
interleaved rounds, us) took 1407 / 1409 / 1401 against 1486 / 1465 / 1458 for a
``T.Parallel`` over ``(R, CH)`` that loaded each entry ``R`` times, and 3825 / 3821 / 3827
against 4034 / 3984 / 3986 on uniform blocks with every group forced through it. Not kept:
one software pipeline over all the group's tiles, resolving the next chunk inside it into
double buffers (the paged kernel's ``one_pipe``): 2501 / 2492 / 2489 and 6987 / 6992 / 6958.

Not kept (session 27, probe ``.devrun/s27_fin.py``): each CTA finalizing its own 48 (row, head)
pairs after writing the partials (a barrier, then one warp per pair: gate, ``out``, ``lse``, the
finalize kernel's loop unrolled over the CTA's pairs), so that no separate finalize grid runs.
Outputs were bitwise equal. On uniform blocks (no group taken) the paged kernel then started
right after the sort (100.6 against 115.9 us on the timeline) and the call took 2479-2491 against
2493-2497 us; but the union kernel grew from 1313 to 1528 us on 90%-overlap rows (call 1726-1729
against 1556-1557) and the mixed batch took 1388-1394 against 1283-1284: with two CTAs per SM the
epilogue's chain of L2 round trips holds a CTA's slot far longer than the finalize kernel's
full SMs of warps take.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.
from typing import Any

from ._sparse_macros import kv_offsets, kv_tile_gather, online_softmax_step
from .sparse_paged_kernel import DIM, HEAD_TILE, LN2, LOG2E, M_INIT

__all__ = ["sparse_union_kernel"]


def sparse_union_kernel(
    group: int,
    dtype: str,
    rows_per_cta: int,
    block_n: int,
    threads: int,
    chunk_blocks: int,
    min_blocks: int,
    wide: bool,
    count_dtype: str,
    num_stages: int = 1,
    packed: bool = False,
) -> Any:
    """Build the prim_func of one specialization.

    Parameters
    ----------
    group : int
        Q heads per KV head (1..16).
    dtype : str
        "bfloat16" or "float16" (Q, K, V).
    rows_per_cta : int
        ``R``, query rows per group (the score tile has ``16 R`` rows).
    block_n : int
        Union slots per inner iteration (the N of the QK tile).
    threads : int
        Threads per CTA.
    chunk_blocks : int
        Inner iterations whose slots (offsets and biases) are resolved at once into shared memory.
    min_blocks : int
        ``__launch_bounds__`` minimum CTAs per SM (1 = no cap).
    wide : bool
        int64 K/V offsets (views spanning >= 2^31 16-byte rows); else int32.
    count_dtype : str
        dtype of the count tensor ``C`` ("int16" or "int32").
    num_stages : int
        Software-pipelining depth of the gather. 1: each chunk runs only its tiles below
        ``NU[g]`` (a data-dependent trip count); >= 2: every chunk runs all ``chunk_blocks``
        tiles (TileLang pipelines only fixed trip counts), the ones past ``NU[g]`` masked.
    packed : bool
        Row ``i`` of the group occupies tile rows ``i * group ..`` (dense; e.g. 5 rows of 12
        heads in one 64-row tile) instead of ``16 i ..``; the tile has ``16 * ceil(R * rs / 16)``
        rows with ``rs`` = group (packed) or 16.

    Kernel arguments
    ----------------
    Q [rows, Hq, D] dtype (runtime strides); KF, VF [nk, 8] / [nv, 8] dtype: K/V storage
    in 16-byte rows; U [n_groups, W] int32 physical token row (``page * page_size + slot``)
    of each union slot; NU [n_groups] int32 union sizes (slots ``>= NU[g]`` are unused);
    C [n_groups, R, W] ``count_dtype`` selection counts per (group, row, slot); OP [1, rows,
    Hq, D] float32 normalized outputs; LP [1, rows, Hq] float32 LSE (natural log, -inf
    when the row uses nothing). Scalars: page_size, Hkv, the K/V page/slot/head strides in
    16-byte units, scale, ``max_nu``: groups with ``NU[g] > max_nu`` are skipped (their rows
    are written by the paged kernel; see ``sparse_launch``).
    """
    import tilelang.language as T

    G = group
    R = rows_per_cta
    H = G if packed else HEAD_TILE  # tile rows per query row
    M = HEAD_TILE * -(-(H * R) // HEAD_TILE)
    D = DIM
    BN = block_n
    CH = block_n * chunk_blocks
    acc = "float32"
    off_t = "int64" if wide else "int32"
    put_offsets = kv_offsets(off_t)
    gather = kv_tile_gather(BN, D)
    softmax_step = online_softmax_step(M, D)

    if CH % threads:
        raise ValueError(f"block_n * chunk_blocks = {CH} must be a multiple of threads = {threads}")
    PT = CH // threads  # slots each thread resolves per chunk

    rows, hq, n_grp, width, nk, nv = T.dynamic("rows, hq, n_grp, width, nk, nv")
    sq = T.dynamic("sq0, sq1, sq2", "int64")

    @T.prim_func
    def main(
        Q: T.StridedTensor([rows, hq, D], sq, dtype),
        KF: T.Tensor([nk, 8], dtype),
        VF: T.Tensor([nv, 8], dtype),
        U: T.Tensor([n_grp, width], "int32"),
        NU: T.Tensor([n_grp], "int32"),
        C: T.Tensor([n_grp, R, width], count_dtype),
        OP: T.Tensor([1, rows, hq, D], acc),
        LP: T.Tensor([1, rows, hq], acc),
        page_size: T.int32,
        hkv: T.int32,
        kp: T.int64,
        ks: T.int64,
        kh: T.int64,
        vp: T.int64,
        vs: T.int64,
        vh: T.int64,
        scale: T.float32,
        max_nu: T.int32,
    ):
        with T.Kernel(n_grp, hkv, threads=threads) as (b, hk):
            if min_blocks > 1:
                T.annotate_min_blocks_per_sm(min_blocks)
            q_s = T.alloc_shared([M, D], dtype)
            k_s = T.alloc_shared([BN, D], dtype)
            v_s = T.alloc_shared([BN, D], dtype)
            p_s = T.alloc_shared([M, BN], dtype)
            # Plain (static) shared memory: the dynamic pool would put a barrier before every copy.
            koff_s = T.alloc_shared([CH], off_t, scope="shared")
            voff_s = T.alloc_shared([CH], off_t, scope="shared")
            bias_s = T.alloc_shared([R, CH], acc, scope="shared")

            acc_s = T.alloc_fragment([M, BN], acc)
            acc_o = T.alloc_fragment([M, D], acc)
            m_i = T.alloc_fragment([M], acc)
            m_prev = T.alloc_fragment([M], acc)
            l_i = T.alloc_fragment([M], acc)
            l_acc = T.alloc_fragment([M, BN], acc)  # per-thread shares of the row sums
            alpha = T.alloc_fragment([M], acc)

            nu = T.alloc_var("int32", init=NU[b])
            # A group whose union exceeds max_nu is left to the paged kernel: no work, no writes.
            run = T.alloc_var("int32", init=T.if_then_else(nu <= max_nu, 1, 0))
            k_end = T.alloc_var(off_t, init=T.cast(nk, off_t))
            v_end = T.alloc_var(off_t, init=T.cast(nv, off_t))
            sl2 = scale * LOG2E
            tx = T.get_thread_binding()

            if run != 0:
                # Row and head clamped, no per-element condition (as in the paged kernel): the
                # loads carry no branch and issue together. Padding rows (past the group's R
                # rows, past ``rows``, heads past G) repeat a real row; their results are never
                # stored. Groups left to the paged kernel load nothing.
                for g, d in T.Parallel(M, D):
                    row = T.min(b * R + T.min(g // H, R - 1), rows - 1)
                    q_s[g, d] = Q[row, T.min(hk * G + T.min(g % H, G - 1), hq - 1), d]
            T.fill(acc_o, 0)
            T.fill(l_acc, 0)
            T.fill(m_i, M_INIT)

            for c in T.serial(T.ceildiv(nu, CH) * run):
                cb = c * CH
                # Each thread resolves slots tx, tx + threads, ..: its union entry, then the R counts
                # of that entry (one U load per slot, where a T.Parallel over (R, CH) loaded it R times).
                for p in T.unroll(PT):
                    j = p * threads + tx
                    u = cb + j
                    ph = T.if_then_else(u < nu, U[b, T.min(u, width - 1)], -1)
                    pg = T.max(ph, 0) // page_size
                    sl = T.max(ph, 0) % page_size
                    put_offsets(j, ph >= 0, pg, sl, hk, kp, ks, kh, vp, vs, vh, koff_s, voff_s, k_end, v_end)
                    for i in T.unroll(R):
                        cnt = T.if_then_else(u < nu, T.cast(C[b, i, T.min(u, width - 1)], "int32"), 0)
                        bias_s[i, j] = T.if_then_else(cnt > 0, T.log2(T.cast(cnt, acc)), -T.infinity(acc))

                trips = chunk_blocks if num_stages > 1 else T.min(chunk_blocks, T.ceildiv(nu - cb, BN))
                for k in T.Pipelined(trips, num_stages=num_stages):
                    gather(k_s, v_s, KF, VF, koff_s, voff_s, k * BN)
                    T.gemm(q_s, k_s, acc_s, transpose_B=True, clear_accum=True)
                    # Online softmax step (log2 domain); the bias is -inf where the row does not use the slot.
                    for g, j in T.Parallel(M, BN):
                        acc_s[g, j] = acc_s[g, j] * sl2 + bias_s[T.min(g // H, R - 1), k * BN + j]
                    softmax_step(acc_s, m_i, m_prev, alpha, l_acc, acc_o, p_s, v_s)

            T.reduce_sum(l_acc, l_i, dim=1)
            for g, d in T.Parallel(M, D):
                row = b * R + g // H
                if g < H * R and g % H < G and row < rows and run != 0:
                    OP[0, row, hk * G + g % H, d] = T.if_then_else(l_i[g] > 0, acc_o[g, d] / l_i[g], 0)
            for g in T.Parallel(M):
                row = b * R + g // H
                if g < H * R and g % H < G and row < rows and run != 0:
                    LP[0, row, hk * G + g % H] = T.if_then_else(
                        l_i[g] > 0, (m_i[g] + T.log2(l_i[g])) * LN2, -T.infinity(acc)
                    )

    return main
