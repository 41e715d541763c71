"""SplitKV merge of sparse-attention partials: FP32 combine + sigmoid gate + LSE.

One CTA per (query row, Q head); each thread owns ``D / threads`` consecutive
features. With ``lse_s`` the partial natural-log LSEs and ``o_s`` the normalized
partial outputs::

    m = max_s lse_s;  w_s = exp(lse_s - m);  out = sigmoid(gate) * sum_s w_s o_s / sum_s w_s
    lse = m + log(sum_s w_s)

A row/head whose every split is empty (all ``lse_s = -inf``) gets zeros (even
where the gate holds NaN) and -inf. One split is the unsplit schedule: this is
then the single post-op that applies the gate and writes the caller's views.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.
from typing import Any

from .sparse_paged_kernel import DIM

__all__ = ["sparse_merge_kernel"]


def sparse_merge_kernel(dtype: str, gate_dtype: str, threads: int) -> Any:
    """Build the merge prim_func.

    Parameters
    ----------
    dtype : str
        Output dtype ("bfloat16" / "float16").
    gate_dtype : str
        Gate dtype ("float32" or ``dtype``); irrelevant when the call has no gate.
    threads : int
        Threads per CTA; ``DIM`` must be a multiple of it.

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
    acc = "float32"
    splits, rows, hq = T.dynamic("splits, rows, hq")
    sg = T.dynamic("sg0, sg1, sg2", "int64")
    so = T.dynamic("so0, so1, so2", "int64")
    sl = T.dynamic("sl0, sl1", "int64")

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
            o = T.alloc_local([V], acc)
            mx = T.alloc_var(acc, init=-T.infinity(acc))
            den = T.alloc_var(acc, init=0)
            for s in T.serial(splits):
                mx = T.max(mx, LP[s, r, h])
            for i in T.vectorized(V):
                o[i] = 0
            for s in T.serial(splits):
                # mx = -inf means every split is empty: w stays 0 (never exp(-inf + inf)).
                w = T.if_then_else(LP[s, r, h] > -T.infinity(acc), T.exp(LP[s, r, h] - mx), 0)
                den = den + w
                for i in T.vectorized(V):
                    o[i] = o[i] + w * OP[s, r, h, tx * V + i]
            for i in T.serial(V):
                g = T.alloc_var(acc, init=1)
                if has_gate != 0:
                    g = 1 / (1 + T.exp(-T.cast(GATE[r, h, tx * V + i], acc)))
                OUT[r, h, tx * V + i] = T.cast(T.if_then_else(den > 0, o[i] / den * g, 0), dtype)
            if has_lse != 0 and tx == 0:
                LSE[r, h] = T.if_then_else(den > 0, mx + T.log(den), -T.infinity(acc))

    return main
