"""TileLang macros shared by the sparse-attention kernels.

No ``from __future__ import annotations`` here: TileLang reads macro annotations.
"""

from typing import Any

__all__ = [
    "row_mode", "cta_sum", "resolve_row_limit", "resolve_row_limit_parallel", "slot_page", "page_column", "slot_rule",
    "page_divisor", "fast_div",
    "kv_offsets", "UNSEEN_STORE_IO", "kv_tile_gather", "online_softmax_step", "online_softmax_step_flagged",
    "SOFTMAX_FLAG_IO", "RESCALE_SLACK", "gated_output_strides", "sigmoid_gate",
]  # fmt: skip


class row_mode:
    """How a query row finds its request (the kernel's runtime ``mode`` argument)."""

    PADDED = 0  # row r is request r // q_len at local index r % q_len
    CU_SEQLENS = 1  # binary search of cu_seqlens_q
    PER_ROW = 2  # a [3, rows] table (request, local index, row count) from the launcher
    # selected_kv_indices: every row is request 0 at local index 0 with one row and no
    # length metadata, so ``lim = cap - 1``: ids in [0, cap) are used, no causal filter.
    PHYSICAL = 3


def _row_limit() -> Any:
    """Macro ``limit(r, req, loc, cnt, ...) -> (req, lim)``: the part of row resolution after the request search."""
    import tilelang.language as T

    @T.macro
    def limit(r, req, loc, cnt, n_req, cap, SLQ, SLK, QP, has_slq, has_slk, has_qp):
        lim = T.alloc_var("int32", init=-1)
        valid = T.alloc_var("int32", init=0)
        if req >= 0 and req < n_req and loc >= 0:
            valid = 1
        req = T.min(T.max(req, 0), n_req - 1)
        slq = T.alloc_var("int32", init=cnt)
        if has_slq != 0:
            slq = SLQ[req]
        slk = T.alloc_var("int32", init=cap)
        if has_slk != 0:
            slk = SLK[req]
        pos = T.alloc_var("int32", init=slk - slq + loc)
        if has_qp != 0:
            pos = QP[r]
        if valid != 0 and loc < slq:
            lim = T.min(pos, T.min(slk, cap) - 1)
        return req, lim

    return limit


def _request_of() -> Any:
    """Macro ``request(r, mode, q_len, n_iter, n_req, CU, R3) -> (req, loc, cnt)``: row ``r``'s
    request, its index in the request and the request's row count (``cu_seqlens_q`` by binary
    search; unclamped, :func:`_row_limit` checks and clamps)."""
    import tilelang.language as T

    @T.macro
    def request(r, mode, q_len, n_iter, n_req, CU, R3):
        req = T.alloc_var("int32", init=0)
        loc = T.alloc_var("int32", init=0)
        cnt = T.alloc_var("int32", init=0)
        if mode == row_mode.PADDED:
            req = r // q_len
            loc = r % q_len
            cnt = q_len
        elif mode == row_mode.CU_SEQLENS:
            # Largest b in [0, R) with cu[b] <= r (= searchsorted(cu[1:], r, right=True)).
            lo = T.alloc_var("int32", init=0)
            hi = T.alloc_var("int32", init=n_req)
            for _ in T.serial(n_iter):
                mid = (lo + hi) // 2
                if hi - lo > 1:
                    if CU[mid] <= r:
                        lo = mid
                    else:
                        hi = mid
            req = lo
            loc = r - CU[lo]
            cnt = CU[lo + 1] - CU[lo]
        elif mode == row_mode.PER_ROW:
            req = R3[0, r]
            loc = R3[1, r]
            cnt = R3[2, r]
        else:
            cnt = 1
        return req, loc, cnt

    return request


def resolve_row_limit(with_count: bool = False) -> Any:
    """Build the macro ``resolve(r, ...) -> (req, lim)`` (``(req, lim, cnt)`` with ``with_count``).

    ``req`` is the row's request clamped into ``[0, R)`` (safe for block-table reads)
    and ``lim`` the last usable request-local token id: a selected id ``t`` is used iff
    ``0 <= t <= lim`` (and its page is valid). ``lim`` folds in the causal position
    (``query_positions`` or ``seq_len_k - seq_len_q + local``), ``seq_len_k`` and the KV
    capacity; padded rows (local index outside ``[0, seq_len_q)`` or request id out of
    range) get ``lim = -1``. In ``PHYSICAL`` mode ``lim = cap - 1`` (the launcher passes
    no length or position metadata there). ``cnt`` is the request's row count in the call
    (1 in ``PHYSICAL`` mode). All loads are scalar and uniform across the CTA.
    """
    import tilelang.language as T

    limit = _row_limit()
    request = _request_of()

    @T.macro
    def resolve(r, mode, q_len, n_iter, n_req, cap, CU, R3, SLQ, SLK, QP, has_slq, has_slk, has_qp):
        req, loc, cnt = request(r, mode, q_len, n_iter, n_req, CU, R3)
        return limit(r, req, loc, cnt, n_req, cap, SLQ, SLK, QP, has_slq, has_slk, has_qp)

    @T.macro
    def resolve_counted(r, mode, q_len, n_iter, n_req, cap, CU, R3, SLQ, SLK, QP, has_slq, has_slk, has_qp):
        req, loc, cnt = request(r, mode, q_len, n_iter, n_req, CU, R3)
        rq, lim = limit(r, req, loc, cnt, n_req, cap, SLQ, SLK, QP, has_slq, has_slk, has_qp)
        return rq, lim, cnt

    return resolve_counted if with_count else resolve


def cta_sum(threads: int) -> Any:
    """Build the macro ``total = sum(v, red_s, tx) -> int32``: the sum of every thread's int32 ``v``.

    A warp reduction, then one per-warp partial in ``red_s`` (int32 shared, ``threads // 32``
    elements) and one barrier; every thread of the CTA must reach it and gets the total.
    """
    import tilelang.language as T

    warps = threads // 32

    @T.macro
    def total(v, red_s, tx):
        part = T.alloc_var("int32", init=T.warp_reduce_sum(v))
        if tx % 32 == 0:
            red_s[tx // 32] = part
        T.sync_threads()
        part = red_s[0]
        for w in T.unroll(1, warps):
            part = part + red_s[w]
        return part

    return total


def resolve_row_limit_parallel(threads: int) -> Any:
    """:func:`resolve_row_limit` with the ``cu_seqlens_q`` search spread over the CTA's threads.

    The macro takes two more arguments, the thread index ``tx`` and an int32 shared buffer
    ``red_s`` of ``threads // 32`` elements, and must be reached by every thread (it has a
    barrier). For non-decreasing ``cu`` the request is ``#{b in [1, R): cu[b] <= r}``: each
    thread counts a strided share with independent loads, so the search costs one load
    latency instead of ``log2(R)`` dependent ones.
    """
    import tilelang.language as T

    limit = _row_limit()
    count = cta_sum(threads)

    @T.macro
    def resolve(r, mode, q_len, n_req, cap, CU, R3, SLQ, SLK, QP, has_slq, has_slk, has_qp, tx, red_s):
        req = T.alloc_var("int32", init=0)
        loc = T.alloc_var("int32", init=0)
        cnt = T.alloc_var("int32", init=0)
        if mode == row_mode.PADDED:
            req = r // q_len
            loc = r % q_len
            cnt = q_len
        elif mode == row_mode.CU_SEQLENS:
            below = T.alloc_var("int32", init=0)
            for i in T.serial(T.ceildiv(n_req, threads)):
                if 1 + i * threads + tx < n_req:
                    if CU[1 + i * threads + tx] <= r:
                        below = below + 1
            req = count(below, red_s, tx)
            loc = r - CU[req]
            cnt = CU[req + 1] - CU[req]
        elif mode == row_mode.PER_ROW:
            req = R3[0, r]
            loc = R3[1, r]
            cnt = R3[2, r]
        else:
            cnt = 1
        return limit(r, req, loc, cnt, n_req, cap, SLQ, SLK, QP, has_slq, has_slk, has_qp)

    return resolve


def slot_page() -> Any:
    """Build the macro ``page(t, lim, req, BT, pages, page_size, max_pages) -> (good, pg, sl)``: the slot rule.

    Request-local token id ``t`` is used iff ``0 <= t <= lim``; its page ``pg = BT[req, t //
    page_size]`` (the column clamped into the table, read only for used ids, else -1) must lie
    in ``[0, pages)``; ``sl = t % page_size`` is its slot in that page. ``good`` is the whole test.
    Used by the resolve kernel, the fused union prep and the paged kernel's lazy prologue; the
    paged kernel's eager path loads the page first (:func:`page_column`) and applies
    :func:`slot_rule`.
    """
    import tilelang.language as T

    rule = slot_rule()

    @T.macro
    def page(t, lim, req, BT, pages, page_size, max_pages):
        used = (t >= 0) & (t <= lim)
        pg = T.if_then_else(used, BT[req, page_column(t, page_size, max_pages)], -1)
        good, sl = rule(t, lim, pg, pages, page_size)
        return good, pg, sl

    return page


def page_divisor(page_size: int) -> tuple[int, int]:
    """``(magic, shift)`` of a page size ``d`` in ``[1, 2^31)`` for :func:`fast_div` (host side).

    The round-up method of Granlund and Montgomery: ``shift = ceil(log2 d)``, ``magic =
    floor(2^32 (2^shift - d) / d) + 1 < 2^32``. A runtime ``//`` or ``%`` by the page size costs
    ~20 instructions (a reciprocal and its correction); the prep kernel of the union path
    resolves every slot of every row with three of them (:mod:`.sparse_union_fused_kernel`).
    """
    if not 1 <= page_size < 2**31:
        raise ValueError(f"page_size must be in [1, 2**31), got {page_size}")
    shift = (page_size - 1).bit_length()
    return ((1 << 32) * ((1 << shift) - page_size)) // page_size + 1, shift


def fast_div(n: Any, magic: Any, shift: Any) -> Any:
    """``n // d`` for int32 ``0 <= n < 2^31`` with ``(magic, shift) = page_divisor(d)`` (runtime
    scalars): ``(umulhi(n, magic) + n) >> shift``; the sum stays below ``2^32`` for such ``n``."""
    import tilelang.language as T

    hi = T.cast(T.shift_right(T.cast(n, "uint64") * T.cast(magic, "uint64"), T.uint64(32)), "uint32")
    return T.cast(T.shift_right(hi + T.cast(n, "uint32"), T.cast(shift, "uint32")), "int32")


def page_column(t: Any, page_size: Any, max_pages: Any, div: tuple[Any, Any] | None = None) -> Any:
    """The block-table column of token id ``t``, clamped into ``[0, max_pages)`` (any ``t``).

    ``div``: the page size's ``(magic, shift)`` runtime scalars (:func:`page_divisor`) for
    :func:`fast_div`; None divides.
    """
    import tilelang.language as T

    n = T.max(t, 0)
    return T.min(n // page_size if div is None else fast_div(n, *div), max_pages - 1)


def slot_rule(fast: bool = False) -> Any:
    """Build the macro ``rule(t, lim, pg, pages, page_size) -> (good, sl)``: the slot rule given the page.

    ``pg`` is ``BT[req, page_column(t)]`` (any value when ``t`` is not used): ``good`` iff
    ``0 <= t <= lim`` and ``0 <= pg < pages``; ``sl = t % page_size``. With ``fast`` the macro
    takes two more arguments, the page size's ``magic`` and ``shift`` (:func:`fast_div`).
    """
    import tilelang.language as T

    def used(t, lim, pg, pages):
        return (t >= 0) & (t <= lim) & (pg >= 0) & (pg < pages)

    @T.macro
    def rule(t, lim, pg, pages, page_size):
        return used(t, lim, pg, pages), T.max(t, 0) % page_size

    @T.macro
    def rule_fast(t, lim, pg, pages, page_size, magic, shift):
        n = T.max(t, 0)
        return used(t, lim, pg, pages), n - fast_div(n, magic, shift) * page_size

    return rule_fast if fast else rule


# Shared-memory stores through an inline function: TileLang's sync planner does not see them, so
# it places no barrier for them and the kernel orders them itself (the chunk offsets, the
# softmax flag).
UNSEEN_STORE_IO = """
template <typename P, typename V>
__device__ __forceinline__ void mate_sts(P* p, V v) { *p = static_cast<P>(v); }
"""


def kv_offsets(off_t: str, unseen: bool = False) -> Any:
    """Build the macro ``put(j, good, pg, sl, hk, kp, ks, kh, vp, vs, vh, koff_s, voff_s, k_end, v_end)``.

    Writes slot ``j``'s K and V row offsets (``off_t`` elements of the ``[n, 8]`` row views) for
    slot ``sl`` of page ``pg`` and KV head ``hk``, given the caches' page, slot and head strides;
    a slot that is not ``good`` gets one past the end (``k_end``/``v_end``), which
    :func:`kv_tile_gather` zero-fills and the kernels mask. Shared by the paged and union kernels.

    With ``unseen`` the stores go through an inline device function (:data:`UNSEEN_STORE_IO`, which the
    kernel imports) that TileLang's sync planner does not see, so it places no barrier for them:
    the kernel must order them against the offsets' readers with barriers of its own.
    """
    import tilelang.language as T

    @T.macro
    def put(j, good, pg, sl, hk, kp, ks, kh, vp, vs, vh, koff_s, voff_s, k_end, v_end):
        koff_s[j] = T.if_then_else(good, T.cast(pg * kp + sl * ks + hk * kh, off_t), k_end)
        voff_s[j] = T.if_then_else(good, T.cast(pg * vp + sl * vs + hk * vh, off_t), v_end)

    @T.macro
    def put_unseen(j, good, pg, sl, hk, kp, ks, kh, vp, vs, vh, koff_s, voff_s, k_end, v_end):
        T.call_extern("handle", "mate_sts", T.address_of(koff_s[j]),
                      T.if_then_else(good, T.cast(pg * kp + sl * ks + hk * kh, off_t), k_end))  # fmt: skip
        T.call_extern("handle", "mate_sts", T.address_of(voff_s[j]),
                      T.if_then_else(good, T.cast(pg * vp + sl * vs + hk * vh, off_t), v_end))  # fmt: skip

    return put_unseen if unseen else put


def kv_tile_gather(block_n: int, dim: int) -> Any:
    """Macro ``gather(k_s, v_s, KF, VF, koff_s, voff_s, base)``: K/V rows of slots ``base ..
    base + block_n`` into shared memory.

    ``KF``/``VF`` are ``[n, 8]`` 16-byte-row views and ``koff_s``/``voff_s`` the slots' row
    offsets; an element copy with an indirect row index becomes 16-byte ``cp.async`` (and an
    offset one past the end a zero fill through the bounds predicate).
    """
    import tilelang.language as T

    @T.macro
    def gather(k_s, v_s, KF, VF, koff_s, voff_s, base):
        for j, d in T.Parallel(block_n, dim):
            k_s[j, d] = KF[koff_s[base + j] + d // 8, d % 8]
        for j, d in T.Parallel(block_n, dim):
            v_s[j, d] = VF[voff_s[base + j] + d // 8, d % 8]

    return gather


RESCALE_SLACK = 8.0  # log2 units a score may exceed the running max before the max is updated (P <= 2^8)


def _rescale(rows: int, dim: int) -> Any:
    """Macro ``rescale(acc_s, m_i, m_prev, alpha, l_acc, acc_o)``: raise the running max ``m_i`` to the
    tile's row max (a cross-warp reduction) and rescale ``acc_o`` and ``l_acc`` by ``2^(old - new)``."""
    import tilelang.language as T

    @T.macro
    def rescale(acc_s, m_i, m_prev, alpha, l_acc, acc_o):
        T.copy(m_i, m_prev)
        T.reduce_max(acc_s, m_i, dim=1, clear=False)
        for g in T.Parallel(rows):
            alpha[g] = T.exp2(m_prev[g] - m_i[g])
        for g, d in T.Parallel(rows, dim):
            acc_o[g, d] = acc_o[g, d] * alpha[g]
        for g, j in T.Parallel(rows, acc_s.shape[1]):
            l_acc[g, j] = l_acc[g, j] * alpha[g]

    return rescale


def online_softmax_step(rows: int, dim: int) -> Any:
    """Macro ``step(acc_s, m_i, m_prev, alpha, l_acc, acc_o, p_s, v_s)``: one FP32 online-softmax
    update (log2 domain) of ``rows`` score rows and the P V product.

    ``acc_s`` holds the masked, scaled (log2e folded in) scores of one tile; ``m_i`` the
    running max (the same in every thread of a row), ``acc_o`` the unnormalized output and
    ``l_acc`` (shaped and laid out like ``acc_s``) each thread's share of the running sums:
    the kernel reduces them once after its last tile (``T.reduce_sum(l_acc, l_i, dim=1)``).

    The max is only updated (a cross-warp reduction and a rescale of ``acc_o``/``l_acc``) when
    some score of the tile exceeds it by more than :data:`RESCALE_SLACK`, which one
    ``T.syncthreads_or`` barrier tells the whole CTA; otherwise the probabilities are taken
    against the stale max, so they stay <= 2^RESCALE_SLACK. Any common reference value gives the
    same softmax (``acc_o / l`` and ``m + log2 l`` do not depend on it); the slack only bounds P
    for its 16-bit cast. Every thread of the CTA must reach the step.
    """
    import tilelang.language as T

    rescale = _rescale(rows, dim)

    @T.macro
    def step(acc_s, m_i, m_prev, alpha, l_acc, acc_o, p_s, v_s):
        over = T.alloc_var("int32", init=0)
        for g, j in T.Parallel(rows, acc_s.shape[1]):
            if acc_s[g, j] > m_i[g] + RESCALE_SLACK:
                over = 1
        any_over = T.alloc_var("int32", init=T.syncthreads_or(over))
        if any_over != 0:
            rescale(acc_s, m_i, m_prev, alpha, l_acc, acc_o)
        for g, j in T.Parallel(rows, acc_s.shape[1]):
            acc_s[g, j] = T.exp2(acc_s[g, j] - m_i[g])
            l_acc[g, j] = l_acc[g, j] + acc_s[g, j]
        T.copy(acc_s, p_s)
        T.gemm(p_s, v_s, acc_o)

    return step


SOFTMAX_FLAG_IO = """
template <typename V> __device__ __forceinline__ int mate_flag_read(const int* p, V) { return *(const volatile int*)p; }
template <typename P> __device__ __forceinline__ void mate_sts_p2(P* p, float a, float b) { p[0] = P(a); p[1] = P(b); }
"""


def online_softmax_step_flagged(rows: int, dim: int, block_n: int, threads: int) -> Any:
    """Macro ``step(acc_s, p_tmp, m_i, m_prev, alpha, l_acc, acc_o, p_s, v_s, flag_s)``: the update of
    :func:`online_softmax_step` without its ``__syncthreads_or``, bitwise equal to it.

    For the paged kernel's feature-split score tile: warp ``w`` owns columns ``w * block_n / warps
    ..``, lane ``l`` rows ``l / 4`` and ``l / 4 + 8`` and columns ``2 (l % 4) + {0, 1}`` of each
    8-column tile of them. ``p_tmp`` is a float32 ``[rows, block_n]`` fragment laid out like
    ``acc_s``, ``flag_s`` a one-int shared buffer that is 0 when the step starts. A thread whose score exceeds the max by more than the
    slack sets the flag. Every thread stores P against the current max, then reads the flag behind
    the barrier the gather pipeline already places before PV: the read also takes a ``v_s`` element,
    so the pipeliner orders it after V's wait. Only when the flag is set (the first block, and rarely
    after) is the max raised, P recomputed and stored again (through :data:`SOFTMAX_FLAG_IO`, which
    the sync planner does not see), behind a barrier of its own. The kernel clears the flag at the
    start of each block (thread 0; the barriers after PV and before QK order it) and imports
    :data:`SOFTMAX_FLAG_IO` and :data:`UNSEEN_STORE_IO` (the flag's stores).
    """
    import tilelang.language as T

    cw = block_n // max(threads // 32, 1)  # score columns of one warp
    if rows != 16 or threads % 32 or cw % 8:
        raise ValueError(
            f"online_softmax_step_flagged needs the 16-row feature-split score tile (rows == 16, whole warps, "
            f"block_n / warps a multiple of 8); got rows={rows}, block_n={block_n}, threads={threads}"
        )
    rescale = _rescale(rows, dim)

    @T.macro
    def store_p(p_tmp, p_s):
        # This thread's probabilities (rows l / 4 and l / 4 + 8, a column pair in each 8-column tile of
        # its warp), as the score layout holds them.
        tx = T.get_thread_binding()
        for h in T.unroll(2):
            for n8 in T.unroll(cw // 8):
                g = (tx % 32) // 4 + h * 8
                j = (tx // 32) * cw + n8 * 8 + (tx % 4) * 2
                T.call_extern("handle", "mate_sts_p2", T.address_of(p_s[g, j]), p_tmp[g, j], p_tmp[g, j + 1])

    @T.macro
    def step(acc_s, p_tmp, m_i, m_prev, alpha, l_acc, acc_o, p_s, v_s, flag_s):
        # The slack test is written out here and in online_softmax_step: as a macro returning ``over``,
        # TileLang 0.1.15 emits the variable out of scope (nvcc: "over_2" is undefined).
        over = T.alloc_var("int32", init=0)
        for g, j in T.Parallel(rows, block_n):
            if acc_s[g, j] > m_i[g] + RESCALE_SLACK:
                over = 1
        if over != 0:
            T.call_extern("handle", "mate_sts", T.address_of(flag_s[0]), 1)
        for g, j in T.Parallel(rows, block_n):
            p_tmp[g, j] = T.exp2(acc_s[g, j] - m_i[g])
        T.copy(p_tmp, p_s)
        any_over = T.alloc_var(
            "int32", init=T.call_extern("int32", "mate_flag_read", T.address_of(flag_s[0]), v_s[0, 0])
        )
        if any_over != 0:
            rescale(acc_s, m_i, m_prev, alpha, l_acc, acc_o)
            for g, j in T.Parallel(rows, block_n):
                p_tmp[g, j] = T.exp2(acc_s[g, j] - m_i[g])
            store_p(p_tmp, p_s)
            T.sync_threads()
        for g, j in T.Parallel(rows, block_n):
            l_acc[g, j] = l_acc[g, j] + p_tmp[g, j]
        T.gemm(p_s, v_s, acc_o)

    return step


def gated_output_strides() -> tuple[Any, Any, Any]:
    """``(sg, so, sl)``: the runtime int64 strides of the gate ``[rows, Hq, D]``, output
    ``[rows, Hq, D]`` and LSE ``[rows, Hq]`` views, as the paged, merge and finalize kernels
    declare them (any validated view binds without a recompile)."""
    import tilelang.language as T

    return T.dynamic("sg0, sg1, sg2", "int64"), T.dynamic("so0, so1, so2", "int64"), T.dynamic("sl0, sl1", "int64")


def sigmoid_gate(x: Any) -> Any:
    """``sigmoid(x)`` in FP32 for a gate element ``x`` of any float dtype (the paged, merge and finalize kernels)."""
    import tilelang.language as T

    return 1 / (1 + T.exp(-T.cast(x, "float32")))
