"""Paged MQA decode kernel: one query row (4 heads) per request over its paged compressed keys.

``out[b, j] = scale * sum_h relu(q[b, h] . k_cache[page_table[b, j // PS], j % PS])`` for
visible keys (``j < context_lens[b]``, ``j // PS < max_pages``, page id in ``[0, pages)``);
every other column up to ``max_model_len`` gets ``-inf`` from this same kernel.

Schedule (memory bound: each key is read once): a CTA owns ``BK`` consecutive keys of one
request. It translates them to physical pages once into a shared int array (invalid keys are
clamped to page 0 and marked -1, so no read ever leaves the cache tensor), gathers the keys
with 16-byte vector loads, and runs one ``BK x 8 x 128`` GEMM with keys on the MMA's M side
and the 4 heads (padded to 8 zero columns) on N. ReLU and the head sum happen in registers
(a 4-lane shuffle reduction). Tiles past the context length skip the gather entirely.
The query is read with plain element loads and any strides, so broadcast (stride 0) and
unaligned queries work.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.
from typing import Any

BLOCK_KEYS = 128
THREADS = 128
QCOLS = 8  # MMA N granule: 4 heads + 4 zero columns


def decode_kernel(dtype: str, page_size: int, k_vec: bool = True, block_keys: int = BLOCK_KEYS) -> Any:
    """Build the decode ``prim_func`` for one dtype and page size (8, 16, 32 or 64).

    Runtime arguments
    -----------------
    q_raw : [B, 4, 128] ``dtype``, any strides (0 allowed).
    k_raw : [pages, page_size, 128] ``dtype``; with ``k_vec`` the feature stride is 1, the
        data 16-byte aligned and the outer strides (passed divided by 8 in ``k_s8``) multiples
        of 8 elements; without it any strides (element loads).
    page_table : [B, max_pages] int32, any strides.
    context_lens : [B] int32, any stride.
    out : [B, max_model_len] float32, contiguous.
    k_s80, k_s81 : outer strides of k divided by 8 (ignored unless ``k_vec``).
    scale : float32 multiplier.
    """
    import tilelang.language as T

    from ._mqa_macros import ASYNC, DIM, HEADS, neg_inf, vec_view

    PS, BK = page_size, block_keys
    nbatch, npages, maxp, mlen = T.dynamic("nbatch npages maxp mlen")
    sq0, sq1, sq2, sk0, sk1, sk2, sp0, sp1, sc0 = T.dynamic("sq0 sq1 sq2 sk0 sk1 sk2 sp0 sp1 sc0", "int64")

    @T.prim_func
    def mqa_decode(
        q: T.StridedTensor((nbatch, HEADS, DIM), (sq0, sq1, sq2), dtype),
        k_raw: T.StridedTensor((npages, PS, DIM), (sk0, sk1, sk2), dtype),
        page_table: T.StridedTensor((nbatch, maxp), (sp0, sp1), "int32"),
        context_lens: T.StridedTensor((nbatch,), (sc0,), "int32"),
        out: T.Tensor((nbatch, mlen), "float32"),
        k_s80: T.int64,
        k_s81: T.int64,
        scale: T.float32,
    ):
        with T.Kernel(T.ceildiv(mlen, BK), nbatch, threads=THREADS) as (bx, b):
            k = vec_view(k_raw, (k_s80, k_s81)) if k_vec else k_raw
            Q_s = T.alloc_shared((QCOLS, DIM), dtype)
            K_s = T.alloc_shared((BK, DIM), dtype)
            page_s = T.alloc_shared((BK,), "int32", scope="shared")
            acc = T.alloc_fragment((BK, QCOLS), "float32")
            score = T.alloc_fragment((BK,), "float32")
            ctx = T.alloc_var("int32")
            k0 = bx * BK
            # The query load is issued before the length/page-table round trips it does not need.
            for h, d in T.Parallel(QCOLS, DIM):
                Q_s[h, d] = T.if_then_else(h < HEADS, q[b, T.min(h, HEADS - 1), d], T.cast(0, dtype))
            ctx = T.min(context_lens[b], maxp * PS)

            if k0 < ctx:
                # Physical page of every key, -1 when masked (past the length, -1 or
                # out-of-range page id); reads clamp to page 0 and the score is masked.
                for i in T.Parallel(BK):
                    page_s[i] = T.if_then_else(k0 + i < ctx, page_table[b, T.min((k0 + i) // PS, maxp - 1)], -1)
                for i in T.Parallel(BK):
                    if page_s[i] >= npages:
                        page_s[i] = -1
                # cp.async: every 16-byte load of the tile in flight at once (a plain load
                # loop behind bounds predicates issued them one round trip at a time).
                for i, d in T.Parallel(BK, DIM, annotations=ASYNC):
                    K_s[i, d] = k[T.max(page_s[i], 0), (k0 + i) % PS, d]
                T.gemm(K_s, Q_s, acc, transpose_B=True, clear_accum=True)
                for i, h in T.Parallel(BK, QCOLS):
                    acc[i, h] = T.max(acc[i, h], 0)
                T.reduce_sum(acc, score, dim=1)
                for i in T.Parallel(BK):
                    if k0 + i < mlen:
                        out[b, k0 + i] = T.if_then_else(page_s[i] >= 0, score[i] * scale, neg_inf())
            else:
                for i in T.Parallel(BK):
                    if k0 + i < mlen:
                        out[b, k0 + i] = neg_inf()

    return mqa_decode
