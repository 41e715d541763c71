"""Union of a row group's selections, one group of ``R`` rows per CTA (the fast path of the union prep).

Input: each row's physical cache rows sorted ascending with unused slots as ``INT32_MAX``
(``torch.sort`` of the resolve kernel's output, rows padded to a multiple of ``R``).
The CTA loads its ``R`` sorted rows into shared memory (``T_CAP`` slots per row, the rest
filled with ``INT32_MAX``) and:

1. flags the canonical copy of each distinct token: its first occurrence in row ``i``
   when no earlier row ``j < i`` of the group holds it (binary search of row ``j``);
2. scans the flags of each row (shared-memory inclusive cumsum, one warp per row); their
   total is ``NU[g]``;
3. for each canonical token ``x``, its union slot is the number of canonical tokens below
   ``x``: ``u = sum_j canon(row j, positions < lower_bound_j(x))``; writes ``U[g, u] = x``
   and ``C[g, j, u] = upper_bound_j(x) - lower_bound_j(x)`` (row ``j``'s count of ``x``,
   duplicates included) for every row ``j``.

Every slot ``u < NU[g]`` of ``U`` and ``C`` is written; later slots are never read, so
neither output is zero-filled. Equals :func:`.sparse_union.union_prep` (the torch path)
on the same inputs.
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.
from typing import Any

__all__ = ["sparse_union_prep_kernel", "SENTINEL"]

SENTINEL = 2**31 - 1


def sparse_union_prep_kernel(rows_per_cta: int, t_cap: int, threads: int, count_dtype: str) -> Any:
    """Build the prep prim_func.

    Parameters
    ----------
    rows_per_cta : int
        ``R``, rows per group.
    t_cap : int
        Shared-memory slots per row; the call's selection width ``T`` must be ``<= t_cap``.
    threads : int
        Threads per CTA.
    count_dtype : str
        dtype of ``C`` ("int16" or "int32").

    Kernel arguments
    ----------------
    S [n_groups * R, T] int32 sorted physical rows (``SENTINEL`` = unused); U [n_groups, W]
    int32 and C [n_groups, R, W] count_dtype union outputs (``W >= R * T``); NU [n_groups] int32;
    steps: binary-search iterations, ``>= ceil(log2(T + 1))``.
    """
    import tilelang.language as T

    R = rows_per_cta
    TC = t_cap
    N = R * TC
    if N % threads:  # the element loops must be uniform: TileLang puts barriers inside them
        raise ValueError(f"rows_per_cta * t_cap ({N}) must be a multiple of threads ({threads})")
    per_thread = -(-N // threads)

    rows_pad, n_tok, n_grp, width = T.dynamic("rows_pad, n_tok, n_grp, width")

    @T.macro
    def lower_bound(s, j, x, n, steps, strict):
        """First position of sorted row ``s[j, :n]`` holding a value >= x (> x when not ``strict``)."""
        lo = T.alloc_var("int32", init=0)
        hi = T.alloc_var("int32", init=n)
        for _ in T.serial(steps):
            if lo < hi:
                v = s[j, (lo + hi) // 2]
                if (v < x) if strict else (v <= x):
                    lo = (lo + hi) // 2 + 1
                else:
                    hi = (lo + hi) // 2
        return lo

    @T.prim_func
    def main(
        S: T.Tensor([rows_pad, n_tok], "int32"),
        U: T.Tensor([n_grp, width], "int32"),
        C: T.Tensor([n_grp, R, width], count_dtype),
        NU: T.Tensor([n_grp], "int32"),
        steps: T.int32,
    ):
        with T.Kernel(n_grp, threads=threads) as g:
            s = T.alloc_shared([R, TC], "int32")
            f = T.alloc_shared([R, TC], "int32")
            tx = T.get_thread_binding()
            for k in T.serial(per_thread):
                e = k * threads + tx
                if e < N:
                    s[e // TC, e % TC] = T.if_then_else(
                        e % TC < n_tok, S[g * R + e // TC, T.min(e % TC, n_tok - 1)], SENTINEL
                    )
            T.sync_threads()
            for k in T.serial(per_thread):
                e = k * threads + tx
                if e < N:
                    i = e // TC
                    p = e % TC
                    x = s[i, p]
                    canon = T.alloc_var("int32", init=0)
                    if x != SENTINEL:
                        canon = 1
                    if p > 0:
                        if s[i, T.max(p - 1, 0)] == x:
                            canon = 0
                    for j in T.serial(R):
                        if canon != 0 and j < i:
                            lo = lower_bound(s, j, x, n_tok, steps, True)
                            if lo < n_tok:
                                if s[j, T.min(lo, TC - 1)] == x:
                                    canon = 0
                    f[i, p] = canon
            T.sync_threads()
            T.cumsum(src=f, dim=1)
            T.sync_threads()
            if tx == 0:
                total = T.alloc_var("int32", init=0)
                for j in T.serial(R):
                    total = total + f[j, TC - 1]
                NU[g] = total
            for k in T.serial(per_thread):
                e = k * threads + tx
                if e < N:
                    i = e // TC
                    p = e % TC
                    # Canonical iff the row's inclusive scan steps here.
                    if f[i, p] != T.if_then_else(p > 0, f[i, T.max(p - 1, 0)], 0):
                        x = s[i, p]
                        u = T.alloc_var("int32", init=0)
                        lbs = T.alloc_local([R], "int32")
                        for j in T.serial(R):
                            lbs[j] = lower_bound(s, j, x, n_tok, steps, True)
                            u = u + T.if_then_else(lbs[j] > 0, f[j, T.max(lbs[j] - 1, 0)], 0)
                        for j in T.serial(R):
                            top = lower_bound(s, j, x, n_tok, steps, False)
                            C[g, j, T.min(u, width - 1)] = T.cast(top - lbs[j], count_dtype)
                        U[g, T.min(u, width - 1)] = x

    return main
