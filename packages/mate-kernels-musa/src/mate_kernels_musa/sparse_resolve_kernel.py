"""Slot resolution of sparse attention: the physical K/V token row of every (row, slot).

One CTA per query row (rows past the call's last row, up to a multiple of the union
group size, are written as unused). For selection slot ``j`` of row ``r`` with
request-local id ``t = TI[r, j]`` the kernel writes

    PH[r, j] = page * page_size + t % page_size   if t is used, else ``unused``

with ``page = block_table[req, t // page_size]``; ``t`` is used under exactly the paged
kernel's rule (:mod:`.sparse_paged_kernel`): ``0 <= t <= lim`` (the row limit from
:func:`._sparse_macros.resolve_row_limit`) and ``page`` in ``[0, pages)``. The result
names a token of the cache independently of the request, so rows of different requests
can share a union of physical tokens (:mod:`.sparse_union`).
"""

# No `from __future__ import annotations`: TileLang evaluates the prim_func annotations.
from typing import Any

from ._sparse_macros import resolve_row_limit, slot_page

__all__ = ["sparse_resolve_kernel"]


def sparse_resolve_kernel(threads: int) -> Any:
    """Build the resolve prim_func (``threads`` slots per step).

    Kernel arguments
    ----------------
    TI [rows, T] int32 token ids (runtime strides); BT [R, max_pages] int32 block table;
    PH [rows_pad, T] int32 out (``rows_pad >= rows``; rows ``>= rows`` are all ``unused``);
    CU, R3, SLQ, SLK, QP and the scalars mode, q_len, n_iter, cap, has_slq, has_slk, has_qp:
    the row metadata of ``sparse_paged_kernel``; pages, page_size; unused: the value of
    unused slots (-1, or ``INT32_MAX`` so that they sort last).
    """
    import tilelang.language as T

    resolve = resolve_row_limit()
    slot = slot_page()
    rows, n_tok, n_req, max_pages, rows_pad = T.dynamic("rows, n_tok, n_req, max_pages, rows_pad")
    n_cu, n_r3, n_slq, n_slk, n_qp = T.dynamic("n_cu, n_r3, n_slq, n_slk, n_qp")
    st = T.dynamic("st0, st1", "int64")
    sb = T.dynamic("sb0, sb1", "int64")
    s_cu, s_slq, s_slk, s_qp = T.dynamic("s_cu, s_slq, s_slk, s_qp", "int64")

    @T.prim_func
    def main(
        TI: T.StridedTensor([rows, n_tok], st, "int32"),
        BT: T.StridedTensor([n_req, max_pages], sb, "int32"),
        PH: T.Tensor([rows_pad, n_tok], "int32"),
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
        unused: T.int32,
    ):
        with T.Kernel(rows_pad, threads=threads) as r:
            # Padding rows resolve as the last real row (in-bounds metadata reads), then use nothing.
            req, lim0 = resolve(T.min(r, rows - 1), mode, q_len, n_iter, n_req, cap, CU, R3, SLQ, SLK, QP,
                                has_slq, has_slk, has_qp)  # fmt: skip
            lim = T.alloc_var("int32", init=T.if_then_else(r < rows, lim0, -1))
            for c in T.serial(T.ceildiv(n_tok, threads)):
                for j in T.Parallel(threads):
                    tok = c * threads + j
                    if tok < n_tok:
                        t = TI[T.min(r, rows - 1), tok]
                        good, pg, sl = slot(t, lim, req, BT, pages, page_size, max_pages)
                        PH[r, tok] = T.if_then_else(good, pg * page_size + sl, unused)

    return main
