"""Packed-rows MQA score kernel: ``out[b, r, j] = scale * sum_h relu(q[b, r, h] . k[b, j])``.

One kernel serves ``qsa_mqa_prefill`` (``nb == 1``: packed rows over shared keys) and the
padded ``qsa_indexer_mqa_score`` (``nb`` requests, each with its own keys, causal intervals
computed on the device by the launcher). Key ``j`` of row ``r`` is visible iff
``starts[b, r] <= j < ends[b, r]``; every other element gets ``-inf`` from this same kernel.

Schedule: a CTA keeps ``BN`` query rows x 4 heads resident in shared memory and walks a
fixed run of ``TPC`` ``BM``-key tiles, double-buffered with cp.async (``T.Pipelined``). Per
tile, four ``BN x BM x 128`` wgmma GEMMs (one per head; query rows on the MMA's M side, keys
on N) accumulate ``relu`` into one FP32 register tile, which is masked and scaled in
registers and staged through shared memory: with ``tma_out`` (keys % 4 == 0) one bulk
tensor (TMA) store per tile, otherwise coalesced row-contiguous stores from an XOR-swizzled
tile. Tiles that no row of the CTA can see skip the GEMMs and only store ``-inf``. Two CTAs
fit per SM (shared memory is sized for exactly two), so one CTA's MMAs overlap the other's
epilogue. Rows sit on the M side, not keys as QSA-DESIGN.md §4 suggests, because prefill
always has many rows and the output is key-contiguous, so the accumulator maps straight onto
output rows; the decode kernel, which has a single row, puts keys on M.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.
from typing import Any

# Tile constants per specialization; all sizes and strides are runtime.
BLOCK_ROWS = 64
BLOCK_KEYS = 64
THREADS = 128  # one warpgroup per 64 rows
TILES_PER_CTA = 16  # key tiles walked by one CTA (grid y = ceil(key tiles / 16))
DEFAULT_TILES = (BLOCK_ROWS, BLOCK_KEYS, THREADS, TILES_PER_CTA)
INT_MAX = 2**31 - 1


def score_kernel(
    dtype: str,
    block_rows: int = BLOCK_ROWS,
    block_keys: int = BLOCK_KEYS,
    threads: int = THREADS,
    tiles_per_cta: int = TILES_PER_CTA,
    tma_out: bool = False,
) -> Any:
    """Build the score ``prim_func`` for one input dtype (``"bfloat16"`` or ``"float16"``).

    Runtime arguments
    -----------------
    q_raw : [nb, nq, 4, 128] ``dtype``, strides (sq0, sq1, sq2, 1), 16-byte aligned.
    k_raw : [nb, nk, 128] ``dtype``, strides (sk0, sk1, 1), 16-byte aligned.
    starts, ends : [nb, nq] int32 (any strides): visible key interval per row.
    out : [nb, nq, nk] float32, contiguous.
    q_s8, k_s8 : the outer strides of q and k divided by 8 (0 for size-1 axes).
    scale : float32 multiplier.
    """
    import tilelang.language as T

    from ._mqa_macros import ASYNC, DIM, HEADS, neg_inf, vec_view

    BN, BM, TPC = block_rows, block_keys, tiles_per_cta
    nwarps = threads // 32
    nb, nq, nk = T.dynamic("nb nq nk")
    sq0, sq1, sq2, sk0, sk1, sr0, sr1, se0, se1 = T.dynamic("sq0 sq1 sq2 sk0 sk1 sr0 sr1 se0 se1", "int64")

    def swz(r, c):
        # XOR-swizzled O_s column: the MMA fragment writes 8 rows at once, which would all hit
        # the same banks in an unpadded row-major tile (and a pad would cost the 2nd CTA/SM).
        return c ^ ((r & 3) << 3)

    @T.macro
    def head_gemm(Q_s, K_s, acc, total, h: int):
        T.gemm(Q_s[h * BN : (h + 1) * BN, :], K_s, acc, transpose_B=True, clear_accum=True)
        for r, c in T.Parallel(BN, BM):
            total[r, c] += T.max(acc[r, c], 0)

    @T.prim_func
    def mqa_score(
        q_raw: T.StridedTensor((nb, nq, HEADS, DIM), (sq0, sq1, sq2, 1), dtype),
        k_raw: T.StridedTensor((nb, nk, DIM), (sk0, sk1, 1), dtype),
        starts: T.StridedTensor((nb, nq), (sr0, sr1), "int32"),
        ends: T.StridedTensor((nb, nq), (se0, se1), "int32"),
        out: T.Tensor((nb, nq, nk), "float32"),
        q_s80: T.int64,
        q_s81: T.int64,
        q_s82: T.int64,
        k_s80: T.int64,
        k_s81: T.int64,
        scale: T.float32,
    ):
        with T.Kernel(T.ceildiv(nq, BN), T.ceildiv(T.ceildiv(nk, BM), TPC), nb, threads=threads) as (bx, by, bz):
            q = vec_view(q_raw, (q_s80, q_s81, q_s82))
            k = vec_view(k_raw, (k_s80, k_s81))
            Q_s = T.alloc_shared((HEADS * BN, DIM), dtype)
            K_s = T.alloc_shared((BM, DIM), dtype)
            O_s = T.alloc_shared((BN, BM), "float32")
            lo_s = T.alloc_shared((BN,), "int32", scope="shared")
            hi_s = T.alloc_shared((BN,), "int32", scope="shared")
            red_s = T.alloc_shared((2 * nwarps,), "int32", scope="shared")
            acc = T.alloc_fragment((BN, BM), "float32")
            total = T.alloc_fragment((BN, BM), "float32")
            lo = T.alloc_var("int32")
            hi = T.alloc_var("int32")
            tx = T.get_thread_binding()
            row0 = bx * BN

            # Row intervals; rows past nq and empty intervals see nothing.
            lo = INT_MAX
            hi = 0
            if tx < BN:
                if row0 + tx < nq:
                    if starts[bz, row0 + tx] < ends[bz, row0 + tx]:
                        lo = starts[bz, row0 + tx]
                        hi = ends[bz, row0 + tx]
                lo_s[tx] = lo
                hi_s[tx] = hi
            lo = T.warp_reduce_min(lo)
            hi = T.warp_reduce_max(hi)
            if tx % 32 == 0:
                red_s[tx // 32] = lo
                red_s[nwarps + tx // 32] = hi
            T.sync_threads()
            lo = red_s[0]
            hi = red_s[nwarps]
            for w in T.serial(1, nwarps):
                lo = T.min(lo, red_s[w])
                hi = T.max(hi, red_s[nwarps + w])

            for h in T.serial(HEADS):
                for r, d in T.Parallel(BN, DIM, annotations=ASYNC):
                    Q_s[h * BN + r, d] = q[bz, row0 + r, h, d]

            # A fixed trip count (TPC tiles) keeps the loop pipelinable: the cp.async load of
            # tile it+2 runs under the GEMMs and stores of tile it+1. Tiles past nk load zeros
            # (bounds predicate) and store nothing.
            for it in T.Pipelined(TPC, num_stages=2):
                for i, d in T.Parallel(BM, DIM):
                    K_s[i, d] = k[bz, (by * TPC + it) * BM + i, d]
                if (by * TPC + it) * BM < hi and (by * TPC + it) * BM + BM > lo:
                    T.clear(total)
                    head_gemm(Q_s, K_s, acc, total, 0)
                    head_gemm(Q_s, K_s, acc, total, 1)
                    head_gemm(Q_s, K_s, acc, total, 2)
                    head_gemm(Q_s, K_s, acc, total, 3)
                    if tma_out:
                        for r, c in T.Parallel(BN, BM):
                            total[r, c] = T.if_then_else(
                                ((by * TPC + it) * BM + c >= lo_s[r]) & ((by * TPC + it) * BM + c < hi_s[r]),
                                total[r, c] * scale,
                                neg_inf(),
                            )
                        T.copy(total, O_s)
                    else:
                        for r, c in T.Parallel(BN, BM):
                            O_s[r, swz(r, c)] = T.if_then_else(
                                ((by * TPC + it) * BM + c >= lo_s[r]) & ((by * TPC + it) * BM + c < hi_s[r]),
                                total[r, c] * scale,
                                neg_inf(),
                            )
                else:
                    T.fill(O_s, neg_inf())  # all equal: the layout/swizzle does not matter
                if tma_out:
                    # Every writer fences its generic-proxy O_s stores before the barrier the
                    # bulk copy engine's read follows; one bulk tensor store per tile, which
                    # clips rows >= nq and keys >= nk.
                    T.fence_proxy_async()
                    T.sync_threads()
                    T.copy(O_s, out[bz, row0, (by * TPC + it) * BM])
                else:
                    for r, c in T.Parallel(BN, BM):
                        if row0 + r < nq and (by * TPC + it) * BM + c < nk:
                            out[bz, row0 + r, (by * TPC + it) * BM + c] = O_s[r, swz(r, c)]
                # The next tile rewrites O_s (the -inf branch has no barrier of its own).
                T.sync_threads()

    return mqa_score
