"""The paged kernel's score tile ``S = Q K^T`` with the features split over the warps.

TileLang's ``T.gemm`` on the 16 x ``block_n`` score tile gives each warp ``block_n / warps``
columns over all 256 features, so every warp reads the whole Q tile from shared memory on
every block: with 4 warps, two thirds of the QK operand traffic. Here warp ``w`` takes
features ``[w * dim / warps, (w + 1) * dim / warps)`` for every column instead: its slice of Q
is loaded into registers once per CTA (16 registers a thread at 4 warps), each block reads
each K element from shared memory once, and the warps' FP32 partial tiles are summed through a
small shared buffer. The result is laid out as the ``T.gemm`` accumulator was (warp ``w`` owns
columns ``[w * block_n / warps, ...)`` in the m16n8 accumulator order), so the online softmax,
the P store and the PV product that follow are unchanged.

The ldmatrix / ``mma.sync`` here are PTX (CUDA), like the PDL trigger of the tiles that use it.
The partial stores and loads go through two inline device functions (:data:`PARTIAL_IO`) that
TileLang's sync planner does not see as shared-memory accesses: given them as buffer accesses it
placed two barriers per block more than the exchange needs, which made uniform blocks 7% slower
than the ``T.gemm`` tile (session 23). The exchange needs one barrier, placed here after the
stores; a later block's stores are ordered after these loads by the barriers between them (V's
wait before PV, the barrier after PV and the loop head's wait).

Not kept (session 24, probe ``.devrun/s24_ab.py``): each warp's own m16n8 tile of partials kept in
registers and added to the three loaded ones (a quarter fewer stores and loads; its own column
pair computed last so the tile is still in ``c_frag``). At the 128-register cap that build spilled
100 bytes a thread (8 here): paged kernel alone on sorted uniform ids 2773-2775 us against
2515-2523, over the L2-resident pool 2498 against 2422, decode 64 x 1 83.1-83.4 against 81.2-81.4.

No ``from __future__ import annotations`` here: TileLang reads macro annotations.
"""

from typing import Any

__all__ = ["PARTIAL_IO", "FeatureSplitQK"]

PARTIAL_IO = """
__device__ __forceinline__ void mate_sts_f2(float* p, float a, float b) {
  *reinterpret_cast<float2*>(p) = make_float2(a, b);
}
__device__ __forceinline__ float mate_lds_f(const float* p) { return *p; }
"""


class FeatureSplitQK:
    """Buffers, layout and macros of the feature-split QK for one tile shape.

    Parameters
    ----------
    dtype : str
        "bfloat16" or "float16" (Q, K).
    rows : int
        Rows of the score tile: 16 (one m16 MMA row block).
    block_n : int
        Score columns (selection slots) per block: a multiple of 16 and of ``8 * warps``.
    threads : int
        Threads of the CTA (``warps = threads / 32``).
    dim : int
        Features: a multiple of ``16 * warps``.

    The kernel allocates ``q_frag`` (``local``, :attr:`q_frag_shape`, ``dtype``), ``b_frag`` and
    ``c_frag`` (``local``, :attr:`frag_shape`, ``dtype`` / float32) and ``s_red`` (``shared``,
    :attr:`red_shape`, float32); imports :data:`PARTIAL_IO` (``T.import_source``); lays its
    score fragment (and any fragment combined with it element by element) out by
    :meth:`score_layout`; fills ``q_frag`` once, by :attr:`load_q` after Q is in shared memory or
    element by element from :meth:`q_element`; and calls :attr:`scores` on every block, with every
    thread of the CTA.
    """

    def __init__(self, dtype: str, rows: int, block_n: int, threads: int, dim: int) -> None:
        import tilelang.language as T

        warps = threads // 32
        if rows != 16 or threads % 32 or block_n % 16 or block_n % (8 * warps) or dim % (16 * warps):
            raise ValueError(
                f"FeatureSplitQK needs rows == 16, block_n a multiple of 16 and of 8 * warps and dim a multiple "
                f"of 16 * warps; got rows={rows}, block_n={block_n}, threads={threads}, dim={dim}"
            )
        ab = {"bfloat16": "bf16", "float16": "fp16"}[dtype]
        acc = "float32"
        slice_w = dim // warps  # features of one warp
        self.slice_w = slice_w
        k_steps = slice_w // 16
        self.cols_per_warp = block_n // warps
        self.q_frag_shape = [k_steps * 8]
        self.frag_shape = [8]
        # Rows padded by 8 floats: a warp's float2 stores of 8 rows take 2 wavefronts, not 8.
        self.red_shape = [warps, rows, block_n + 8]

        def partial_sum(s_red: Any, g: Any, j: Any) -> Any:
            total = T.call_extern(acc, "mate_lds_f", T.address_of(s_red[0, g, j]))
            for w in range(1, warps):
                total = total + T.call_extern(acc, "mate_lds_f", T.address_of(s_red[w, g, j]))
            return total

        @T.macro
        def load_q(q_frag, q_s):
            # This warp's Q features as k_steps m16k16 A fragments (ldmatrix.x4, 8 halves a thread each).
            tx = T.get_thread_binding()
            lane = tx % 32
            for ki in T.unroll(k_steps):
                col = (tx // 32) * slice_w + ki * 16 + (lane // 16) * 8
                T.ptx_ldmatrix(T.bool(False), 4, T.access_ptr(q_s[lane % 16, col], "r", extent=8),
                               T.access_ptr(q_frag[ki * 8], "w", extent=8))  # fmt: skip

        @T.macro
        def scores(k_s, q_frag, b_frag, c_frag, s_red, acc_s):
            tx = T.get_thread_binding()
            w = tx // 32
            lane = tx % 32
            # One statement: the pipeline then issues the next block's K gather after the stores,
            # and the barrier below also orders it after this block's K reads.
            for _one in T.serial(1):
                for nj in T.unroll(block_n // 16):  # 16 columns (two m16n8 tiles) at a time
                    for i in T.unroll(8):
                        c_frag[i] = T.float32(0)
                    for ki in T.unroll(k_steps):
                        T.ptx_ldmatrix(T.bool(False), 4,
                                       T.access_ptr(k_s[nj * 16 + lane % 8 + (lane // 16) * 8,
                                                        w * slice_w + ki * 16 + ((lane // 8) % 2) * 8], "r", extent=8),
                                       T.access_ptr(b_frag[0], "w", extent=8))  # fmt: skip
                        for nt in T.unroll(2):
                            T.ptx_mma(acc, "m16n8k16", "row", "col", ab, ab, "fp32", q_frag.data, ki * 8,
                                      b_frag.data, nt * 4, c_frag.data, nt * 4, T.bool(False))  # fmt: skip
                    for nt in T.unroll(2):
                        for h in T.unroll(2):  # accumulator rows lane / 4 and lane / 4 + 8
                            T.call_extern("handle", "mate_sts_f2",
                                          T.address_of(s_red[w, lane // 4 + h * 8, (nj * 2 + nt) * 8 + (lane % 4) * 2]),
                                          c_frag[nt * 4 + h * 2], c_frag[nt * 4 + h * 2 + 1])  # fmt: skip
                T.sync_threads()
            for g, j in T.Parallel(rows, block_n):
                acc_s[g, j] = partial_sum(s_red, g, j)

        self.load_q = load_q
        self.scores = scores

    def q_element(self, tx: Any, i: Any) -> tuple[Any, Any]:
        """``(tile row, feature)`` that :attr:`load_q` puts into element ``i`` of thread ``tx``'s ``q_frag``.

        Element ``i`` is half ``i % 2`` of register ``(i % 8) // 2`` of k16 step ``i // 8``: the
        m16k16 A fragment of ``mma.sync``, filled here from global memory instead of by ``ldmatrix``.
        """
        lane, w = tx % 32, tx // 32
        ki, m, e = i // 8, (i % 8) // 2, i % 2
        return lane // 4 + (m % 2) * 8, w * self.slice_w + ki * 16 + (m // 2) * 8 + (lane % 4) * 2 + e

    def score_layout(self, shape: list[int]) -> Any:
        """The m16n8 accumulator layout of a ``[16, block_n]`` tile whose columns are split over the warps."""
        import tilelang.language as T

        cw = self.cols_per_warp
        return T.Fragment(
            shape,
            forward_thread_fn=lambda i, j: (j // cw) * 32 + (i % 8) * 4 + (j % 8) // 2,
            forward_index_fn=lambda i, j: ((j % cw) // 8) * 4 + (i // 8) * 2 + j % 2,
        )
