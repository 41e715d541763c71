"""The sparse-attention launcher against the reference, on the CPU, with emulated kernels.

The TileLang kernels only run on the GPU; here ``build`` is replaced by float64
emulators that follow each kernel's documented argument contract line by line (row
resolution, split ranges, slot masking, 16-byte-row K/V addressing, merge and gate; for the
union path also the fused prep, the union kernel and the finalize kernel). The
launcher's argument binding, K/V flattening, row-metadata modes, schedules, the union
path's split of row groups between its kernels, and views are thereby checked against
``mate_reference`` on random problems without a GPU.
"""

from __future__ import annotations

import math

import mate_kernels_musa_tests_gpu_specializations as gpu_specs  # registered by conftest.py
import mate_kernels_musa_tests_sparse_cases as cases  # registered by conftest.py
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mate_core import MateValueError, plan_sparse_attention
from mate_kernels_musa import sparse_launch
from mate_kernels_musa._sparse_macros import row_mode
from mate_kernels_musa.sparse_schedule import W4, choose_schedule
from mate_kernels_musa.sparse_sort_kernel import SORT_CAP


def _resolve(r, mode, q_len, n_iter, n_req, cap, CU, R3, SLQ, SLK, QP, has_slq, has_slk, has_qp, parallel=False,
             count=False):  # fmt: skip
    """Python twin of ``_sparse_macros.resolve_row_limit`` (``parallel``: ``resolve_row_limit_parallel``;
    ``count``: ``resolve_row_limit(with_count=True)``, which also returns the request's row count)."""
    if mode == row_mode.PADDED:
        req, loc, cnt = r // q_len, r % q_len, q_len
    elif mode == row_mode.CU_SEQLENS:
        if parallel:  # count of b in [1, R) with cu[b] <= r
            lo = sum(int(CU[b]) <= r for b in range(1, n_req))
        else:
            lo, hi = 0, n_req
            for _ in range(n_iter):
                mid = (lo + hi) // 2
                if hi - lo > 1:
                    lo, hi = (mid, hi) if int(CU[mid]) <= r else (lo, mid)
        req, loc, cnt = lo, r - int(CU[lo]), int(CU[lo + 1]) - int(CU[lo])
    elif mode == row_mode.PER_ROW:
        req, loc, cnt = (int(x) for x in R3[:, r])
    else:  # PHYSICAL: request 0, local index 0 of a 1-row request
        req, loc, cnt = 0, 0, 1
    valid = 0 <= req < n_req and loc >= 0
    req = min(max(req, 0), n_req - 1)
    slq = int(SLQ[req]) if has_slq else cnt
    slk = int(SLK[req]) if has_slk else cap
    pos = int(QP[r]) if has_qp else slk - slq + loc
    lim = min(pos, min(slk, cap) - 1) if valid and loc < slq else -1
    return (req, lim, cnt) if count else (req, lim)


def _fast_divmod(page_size, magic, shift):
    """``t -> (t // page_size, t % page_size)`` for ``0 <= t < 2^31`` the way ``_sparse_macros.fast_div``
    computes it from the launcher's ``(magic, shift)``; wrong magic numbers give wrong pages here too."""

    def split(t):
        assert 0 <= t < 2**31 and 0 <= magic < 2**32
        total = ((t * magic) >> 32) + t
        assert total < 2**32  # the kernel adds in uint32
        q = total >> shift
        return q, t - q * page_size

    return split


def _emulate_paged(group, dtype, block_n, threads, chunk_blocks, num_stages, min_blocks, wide, pdl, eager, gate_dtype,
                   split_qk, q_regs=False, kv_evict_first=False, groups=1):  # fmt: skip
    def run(Q, KF, VF, TI, BT, OP, LP, GATE, OUT, OUTF, LSE, UNU, CU, R3, SLQ, SLK, QP, mode, q_len, n_iter, cap,
            has_slq, has_slk, has_qp, pages, page_size, hkv, kp, ks, kh, vp, vs, vh, scale, splits, direct,
            has_gate, has_lse, u_rows, max_nu, one_pipe, ps_magic, ps_shift, out_vec, of0, of1):  # fmt: skip
        rows, hq, dim = Q.shape
        # The eager chunk resolution divides by the page size with the launcher's magic numbers.
        split = _fast_divmod(page_size, ps_magic, ps_shift) if eager else lambda t: divmod(t, page_size)
        if direct:  # one split: the epilogue applies the gate and writes OUT/LSE (OP/LP are dummies)
            assert splits == 1 and OP.numel() == dim and LP.numel() == 1
            OP = torch.empty(1, rows, hq, dim)
            LP = torch.empty(1, rows, hq)
        assert OP.shape == (splits, rows, hq, dim)
        if groups > 1:  # the CTA merges its splits (sparse_groups): OP/LP are not touched, OUT/LSE written
            assert splits == groups and not direct and not out_vec
            OP, LP = torch.empty(OP.shape), torch.empty(LP.shape)
        n_tok, n_req, max_pages = TI.shape[1], BT.shape[0], BT.shape[1]
        n_blk = -(-n_tok // block_n)
        per = -(-n_blk // splits)
        for r in range(rows):
            req, lim = _resolve(
                r, mode, q_len, n_iter, n_req, cap, CU, R3, SLQ, SLK, QP, has_slq, has_slk, has_qp, eager
            )
            for hk in range(hkv):
                q = Q[r, hk * group : (hk + 1) * group].double()
                for s in range(splits):
                    t0, t1 = s * per * block_n, min(n_tok, min(n_blk, s * per + per) * block_n)
                    keys, vals = [], []
                    for tok in range(t0, t1):
                        t = int(TI[r, tok])
                        if not 0 <= t <= lim:
                            continue
                        col, sl = split(t)
                        pg = int(BT[req, min(col, max_pages - 1)])
                        if not 0 <= pg < pages:
                            continue
                        ko = pg * kp + sl * ks + hk * kh
                        vo = pg * vp + sl * vs + hk * vh
                        keys.append(KF[ko : ko + dim // 8].reshape(dim).double())
                        vals.append(VF[vo : vo + dim // 8].reshape(dim).double())
                    heads = slice(hk * group, (hk + 1) * group)
                    if not keys:
                        OP[s, r, heads] = 0
                        LP[s, r, heads] = -math.inf
                        continue
                    sc = scale * q @ torch.stack(keys).T
                    lse = torch.logsumexp(sc, dim=1)
                    OP[s, r, heads] = (torch.exp(sc - lse[:, None]) @ torch.stack(vals)).float()
                    LP[s, r, heads] = lse.float()
        if groups > 1:
            _emulate_merge(dtype, gate_dtype, threads)(OP, LP, GATE, OUT, LSE, has_gate, has_lse)
        if direct:
            out0, lse0 = OUT.clone(), LSE.clone()
            # With out_vec the kernel stores through OUTF (16-byte rows at the launcher's strides).
            res = torch.empty(OUT.shape, dtype=OUT.dtype) if out_vec else OUT
            _emulate_merge(dtype, gate_dtype, threads)(OP, LP, GATE, res, LSE, has_gate, has_lse)
            for r in range(rows):  # rows of union-path groups are left as they were
                if u_rows > 0 and int(UNU[r // u_rows]) <= max_nu:
                    OUT[r] = out0[r]
                    if has_lse:  # else LSE is a broadcast dummy
                        LSE[r] = lse0[r]
                elif out_vec:
                    for h in range(hq):
                        base = r * of0 + h * of1
                        OUTF[base : base + dim // 8] = res[r, h].view(dim // 8, 8)

    return run


def _emulate_merge(dtype, gate_dtype, threads, pdl=False):
    def run(OP, LP, GATE, OUT, LSE, has_gate, has_lse):
        mx = LP.max(dim=0).values
        w = torch.where(LP > -math.inf, torch.exp(LP - mx), torch.zeros_like(LP)).double()
        den = w.sum(0)
        o = (w[..., None] * OP.double()).sum(0) / den.clamp_min(1e-300)[..., None]
        if has_gate:
            o = o * torch.sigmoid(GATE.double())
        OUT.copy_(torch.where(den[..., None] > 0, o, torch.zeros_like(o)))
        if has_lse:
            LSE.copy_(torch.where(den > 0, mx + torch.log(den), torch.full_like(mx, -math.inf)))

    return run


def _group_rows(g: int, size: int, rows: int) -> list[tuple[int, int]]:
    """``(i, r)`` for the rows ``r = g * size + i`` of row group ``g`` that exist (``r < rows``)."""
    return [(i, g * size + i) for i in range(size) if g * size + i < rows]


def _emulate_union_prep(rows_per_cta, t_cap, threads, buckets, count_dtype):
    """The fused union prep: per group of ``R`` rows, the distinct physical rows their used slots
    name and each row's count of each (in ascending order; the kernel's own order is another);
    ``U``/``C`` of groups with a union above ``max_nu`` are not written; groups with a row of a
    request of fewer than ``min_rows`` rows (not in ``PHYSICAL`` mode) get ``NU = UNMEASURED`` only; a
    group whose bitmap bound exceeds ``max_nu`` gets ``NU`` = that bound."""
    from mate_kernels_musa.sparse_union_fused_kernel import UNMEASURED, seen_bit

    def run(TI, BT, U, C, NU, CU, R3, SLQ, SLK, QP, mode, q_len, n_iter, cap, has_slq, has_slk, has_qp, pages,
            page_size, max_nu, min_rows, ps_magic, ps_shift):  # fmt: skip
        split = _fast_divmod(page_size, ps_magic, ps_shift)
        r_grp, (rows, n_tok), max_pages = rows_per_cta, TI.shape, BT.shape[1]
        meta = (mode, q_len, n_iter, BT.shape[0], cap, CU, R3, SLQ, SLK, QP, has_slq, has_slk, has_qp)
        for g in range(NU.shape[0]):
            sizes = [_resolve(r, *meta, count=True)[2] for _, r in _group_rows(g, r_grp, rows)]
            if mode != row_mode.PHYSICAL and min(sizes) < min_rows:
                NU[g] = UNMEASURED
                continue
            counts: dict[int, list[int]] = {}
            bound = 0  # the bitmap's popcount: early exit past max_nu, after the last row or before
            members = dict(_group_rows(g, r_grp, rows))  # padding rows of the last group use no slot
            for i in range(r_grp):
                r = members.get(i)
                if r is not None:
                    req, lim = _resolve(r, *meta)
                    for p in range(n_tok):
                        t = int(TI[r, p])
                        col, sl = split(max(t, 0))
                        pg = int(BT[req, min(col, max_pages - 1)]) if 0 <= t <= lim else -1
                        if 0 <= pg < pages:
                            counts.setdefault(pg * page_size + sl, [0] * r_grp)[i] += 1
                if i + 1 == r_grp or (i + 1) * n_tok > max_nu:
                    bound = len({seen_bit(x) for x in counts})
                    if bound > max_nu:
                        break
            NU[g] = bound if bound > max_nu else len(counts)
            if NU[g] > max_nu:
                continue
            for u, x in enumerate(sorted(counts)):
                U[g, u] = x
                C[g, :, u] = torch.tensor(counts[x], dtype=C.dtype)

    return run


def _emulate_union(group, dtype, rows_per_cta, block_n, threads, chunk_blocks, min_blocks, wide, count_dtype,
                   num_stages=1, packed=False):  # fmt: skip
    """The union kernel: each row's softmax over its group's union slots, a slot counted as often as the row selected it."""

    def run(Q, KF, VF, U, NU, C, OP, LP, page_size, hkv, kp, ks, kh, vp, vs, vh, scale, max_nu):
        rows, _, dim = Q.shape
        for g in range(NU.shape[0]):
            nu = int(NU[g])
            if nu > max_nu:  # left to the paged kernel
                continue
            for hk in range(hkv):
                heads = slice(hk * group, (hk + 1) * group)
                pos = [(int(x) // page_size, int(x) % page_size) for x in U[g, :nu]]
                keys = [KF[p * kp + s * ks + hk * kh :][: dim // 8].reshape(dim).double() for p, s in pos]
                vals = [VF[p * vp + s * vs + hk * vh :][: dim // 8].reshape(dim).double() for p, s in pos]
                for i, r in _group_rows(g, rows_per_cta, rows):
                    cnt = C[g, i, :nu].double()
                    used = (cnt > 0).nonzero().flatten().tolist()
                    if not used:
                        OP[0, r, heads], LP[0, r, heads] = 0, -math.inf
                        continue
                    sc = scale * Q[r, heads].double() @ torch.stack([keys[u] for u in used]).T + cnt[used].log()
                    lse = torch.logsumexp(sc, dim=1)
                    OP[0, r, heads] = (torch.exp(sc - lse[:, None]) @ torch.stack([vals[u] for u in used])).float()
                    LP[0, r, heads] = lse.float()

    return run


def _emulate_finalize(dtype, gate_dtype, threads):
    """The union path's one-split post-op: gate and LSE for the rows of groups the union kernel computed."""

    def run(OP, LP, GATE, OUT, LSE, NU, has_gate, has_lse, u_rows, max_nu):
        for r in range(OUT.shape[0]):
            if int(NU[r // u_rows]) > max_nu:  # the paged kernel's row: untouched
                continue
            o = OP[0, r].double() * (torch.sigmoid(GATE[r].double()) if has_gate else 1)
            OUT[r] = torch.where(LP[0, r, :, None] > -math.inf, o, torch.zeros_like(o))
            if has_lse:
                LSE[r] = LP[0, r]

    return run


def _emulate_sort(threads):
    """The per-row order of ``sparse_sort_kernel``: every row of a group with ``NU > max_nu`` (rejected or
    unmeasured) in ``cases.region_order``; the union path's rows untouched."""

    def run(TI, NU, SO, shift, u_rows, max_nu):
        for r in range(TI.shape[0]):
            if int(NU[r // u_rows]) > max_nu:
                SO[r] = cases.region_order(TI[r], shift, threads)

    return run


_EMULATORS = {
    "sparse_paged_kernel": _emulate_paged,
    "sparse_merge_kernel": _emulate_merge,
    "sparse_union_fused_kernel": _emulate_union_prep,
    "sparse_union_kernel": _emulate_union,
    "sparse_finalize_kernel": _emulate_finalize,
    "sparse_sort_kernel": _emulate_sort,
}


@pytest.fixture
def emulated(monkeypatch):
    from mate_kernels_musa import sparse_union

    for module in (sparse_launch, sparse_union):
        monkeypatch.setattr(module, "profile_name", lambda device: "cpu-emulator")
        monkeypatch.setattr(module, "build", lambda factory, profile, *c: _EMULATORS[factory.__name__](*c))
    monkeypatch.setattr(sparse_launch, "_sm_count", lambda device: 132)


def _run_both(case: cases.Case):
    """(native out, native lse, reference out, reference lse) for one case."""
    from mate_reference import sparse_attention as reference

    native = plan_sparse_attention(**case.kwargs, backend="reference")
    sparse_launch.sparse_attention(native)
    ref_kwargs = {k: v for k, v in case.kwargs.items() if k not in ("out", "lse")}
    ref = plan_sparse_attention(**ref_kwargs, return_lse=True, backend="reference") if "return_lse" not in ref_kwargs \
        else plan_sparse_attention(**ref_kwargs, backend="reference")  # fmt: skip
    reference(ref)
    return native, ref


def _check_case(case: cases.Case) -> None:
    native, ref = _run_both(case)
    out = native.out_result
    assert not torch.isnan(out).any(), case.notes
    assert cases.rel_l2(out.float(), ref.out_result.float()) < 1e-2, case.notes
    empty = ref.lse_result == -math.inf
    assert torch.equal(out[empty], torch.zeros_like(out[empty])), case.notes
    if native.lse is not None:
        assert cases.lse_error(native.lse, ref.lse) < 1e-3, case.notes
    if case.out_base is not None:  # storage around the view is untouched (still NaN)
        outside = torch.ones_like(case.out_base, dtype=torch.bool)
        outside.as_strided(out.shape, out.stride(), out.storage_offset()).fill_(False)
        assert torch.isnan(case.out_base[outside].float()).all()


def _geometry(index: int) -> dict[str, int]:
    hq, hkv = [(24, 2), (8, 2), (3, 1), (5, 5), (14, 2)][index % 5]
    return {"hq": hq, "hkv": hkv}


@pytest.mark.parametrize("index", range(40))
def test_launcher_matches_reference(emulated, index: int, gen: torch.Generator) -> None:
    case = cases.random_case(gen, max_rows=12, max_width=70, hq=int([24, 8, 3][index % 3]),
                             hkv=int([2, 2, 1][index % 3]))  # fmt: skip
    _check_case(case)


@pytest.mark.parametrize("index", range(12))
def test_launcher_physical(emulated, index: int, gen: torch.Generator) -> None:
    """selected_kv_indices: one page of N rows in the PHYSICAL row mode; strided views every other case."""
    _check_case(cases.physical_case(gen, max_rows=10, max_width=60, views=index % 2 == 1, **_geometry(index)))


@pytest.mark.parametrize("index", range(10))
def test_launcher_padded_kv(emulated, index: int, gen: torch.Generator) -> None:
    """Padded [B, S, Hkv, D] K/V (padded query, num_splits None/1) as one page per request."""
    _check_case(cases.random_case(gen, max_rows=12, max_width=70, kv="padded", views=index % 2 == 1,
                                  **_geometry(index)))  # fmt: skip


@pytest.mark.parametrize("index", range(8))
def test_launcher_union_path(emulated, monkeypatch, index: int, gen: torch.Generator) -> None:
    """The union schedule (forced, ``MATE_SPARSE_UNION=1``): groups of 4 rows whose selections overlap take the
    union kernel + finalize, the other groups the paged kernel, in one call; the result is the reference's."""
    from mate_kernels_musa import sparse_union

    monkeypatch.setattr(sparse_launch, "_sm_count", lambda device: 1)  # the prefill schedule from 4 CTAs up
    monkeypatch.setenv(sparse_launch.UNION_ENV, "1")
    case = None
    while case is None or case.kwargs["query"].shape[0] < 8:
        case = cases.random_case(gen, max_rows=24, max_width=70, num_splits=None, query_kind="cu", **_geometry(index))
    ids = case.kwargs["token_indices"]
    rows, width = ids.shape
    for g in range(0, rows // 4, 2):  # every other group: its 4 rows select the same ids (union fill 1/4)
        ids[4 * g + 1 : 4 * g + 4] = ids[4 * g]
    plan = plan_sparse_attention(
        **{k: v for k, v in case.kwargs.items() if k not in ("out", "lse")}, backend="reference"
    )
    assert sparse_launch.schedule_for(plan).union_rows == 4
    _, nu, _ = sparse_union.prepare_union(plan, 4, "fused")
    max_nu = int(sparse_launch.UNION_MAX_FILL * 4 * width)
    assert (nu <= max_nu).any(), "no group takes the union path"
    _check_case(case)


@pytest.mark.parametrize("index", range(4))
def test_launcher_sorts_without_union(emulated, monkeypatch, index: int, gen: torch.Generator) -> None:
    """The prefill schedule without the union path (``MATE_SPARSE_UNION=0``): the sort kernel orders every
    row (one group of all rows, ``max_nu = -1``), the paged kernel reads the ordered ids, and the result is
    the reference's."""
    from mate_kernels_musa import sparse_sort_kernel, sparse_union

    monkeypatch.setattr(sparse_launch, "_sm_count", lambda device: 1)  # the prefill schedule from 4 CTAs up
    monkeypatch.setenv(sparse_launch.UNION_ENV, "0")
    calls: dict[str, tuple] = {}

    def spy(name, emulate):
        # The emulator of kernel `name`, recording the arguments of its launch.
        def factory(*consts):
            kernel = emulate(*consts)
            return lambda *args: (calls.__setitem__(name, args), kernel(*args))[1]

        return factory

    for name in ("sparse_sort_kernel", "sparse_paged_kernel"):
        monkeypatch.setitem(_EMULATORS, name, spy(name, _EMULATORS[name]))
    case = None
    while case is None or case.kwargs["query"].shape[0] < 4:
        case = cases.random_case(gen, max_rows=16, max_width=70, num_splits=None, query_kind="cu", **_geometry(index))
    plan = plan_sparse_attention(
        **{k: v for k, v in case.kwargs.items() if k not in ("out", "lse")}, backend="reference"
    )
    sched = sparse_launch.schedule_for(plan)
    assert sched.sort and sched.union_rows == 0 and sched.splits == 1
    _check_case(case)
    ti, nu, so, shift, u_rows, max_nu = calls["sparse_sort_kernel"]
    assert (u_rows, max_nu) == (ti.shape[0], -1) and int(nu[0]) > max_nu  # every row ordered
    capacity = case.kwargs["block_table"].shape[1] * case.kwargs["key"].shape[1]  # paged K/V: pages x page size
    assert shift == sparse_sort_kernel.region_shift(capacity)
    for r in range(ti.shape[0]):
        assert torch.equal(so[r], cases.region_order(ti[r], shift, sparse_union.SORT_THREADS)), r
    assert calls["sparse_paged_kernel"][3] is so  # the paged kernel reads the ordered ids


def test_launcher_mixed_batch(emulated, monkeypatch, gen: torch.Generator) -> None:
    """Default rule on a prefill chunk among decode rows: the prep measures only the chunk's groups (the
    others get NU = UNMEASURED and go to the paged kernel), and the call matches the reference."""
    from mate_kernels_musa import sparse_union
    from mate_kernels_musa.sparse_union_fused_kernel import UNMEASURED

    monkeypatch.setattr(sparse_launch, "_sm_count", lambda device: 1)
    monkeypatch.delenv(sparse_launch.UNION_ENV, raising=False)
    case, in_chunk = cases.mixed_batch(gen, 22, 43, hq=3, hkv=1)
    plan = plan_sparse_attention(
        **{k: v for k, v in case.kwargs.items() if k not in ("out", "lse")}, backend="reference"
    )
    assert sparse_launch.schedule_for(plan).union_rows == 4
    _, nu, _ = sparse_union.prepare_union(plan, 4, "fused", max_nu=1000, min_rows=sparse_launch.union_min_rows())
    assert [int(n) != UNMEASURED for n in nu] == in_chunk, (nu.tolist(), in_chunk)
    assert (nu[torch.tensor(in_chunk)] <= int(sparse_launch.UNION_MAX_FILL * 4 * 43)).all(), (
        "no chunk group takes the union"
    )
    with pytest.raises(ValueError, match="min_rows=16 needs max_nu < 2147483647"):
        sparse_union.prepare_union(plan, 4, "fused", min_rows=16)
    _check_case(case)


def test_padded_kv_block_table_is_a_cached_view(emulated, monkeypatch, gen: torch.Generator) -> None:
    """Padded K/V: request b owns page b. Up to IDENTITY_ROWS requests the block table is a view
    of the per-device cached table (nothing allocated or launched per call); past it, a fresh
    ``arange``. Both give the reference's results."""
    case = cases.random_case(gen, max_rows=12, max_width=70, kv="padded", n_req=3)
    plan = plan_sparse_attention(**case.kwargs, backend="reference")
    cached = sparse_launch._dummies(sparse_launch._dev(plan.query))["identity"]
    table = sparse_launch._paged_kv(plan)[2]
    assert table.shape == (3, 1) and table.data_ptr() == cached.data_ptr()
    assert table.flatten().tolist() == [0, 1, 2]
    _check_case(case)

    monkeypatch.setattr(sparse_launch, "IDENTITY_ROWS", 2)
    sparse_launch._dummies.cache_clear()
    try:
        table = sparse_launch._paged_kv(plan)[2]
        assert table.flatten().tolist() == [0, 1, 2]
        assert table.data_ptr() != sparse_launch._dummies(sparse_launch._dev(plan.query))["identity"].data_ptr()
        _check_case(case)
    finally:
        sparse_launch._dummies.cache_clear()  # the next test rebuilds the full-size table


@pytest.mark.parametrize("index", range(10))
def test_launcher_strided_views(emulated, index: int, gen: torch.Generator) -> None:
    """Every input a strided view at an odd storage offset: strides reach the kernels as arguments."""
    _check_case(cases.random_case(gen, max_rows=12, max_width=70, views=True, **_geometry(index)))


@pytest.mark.parametrize("kind", ["paged", "padded", "physical", "views"])
def test_cases_pass_native_rules(kind: str, gen: torch.Generator) -> None:
    """The generated calls satisfy every backend='tilelang' rule: on the CPU only the arch gate (last) fails."""
    from mate_core.errors import UnsupportedTargetError

    for index in range(4):
        if kind == "physical":
            case = cases.physical_case(gen, max_rows=6, max_width=20, views=index % 2 == 1)
        else:
            case = cases.random_case(gen, max_rows=6, max_width=20, kv="padded" if kind == "padded" else "paged",
                                     views=kind == "views", **_geometry(index))  # fmt: skip
        with pytest.raises(UnsupportedTargetError):
            plan_sparse_attention(**case.kwargs, backend="tilelang")


def test_case_views_at_odd_offsets(gen: torch.Generator) -> None:
    """Every embedded input sits at an odd storage offset (in 16-byte units for K/V); ``to`` keeps the views."""
    case = cases.random_case(gen, max_rows=6, max_width=20, views=True)
    moved = case.to("cpu")
    assert {"query", "key", "value", "token_indices", "block_table"} <= set(case.bases)
    for name in case.bases:
        a, b = case.kwargs[name], moved.kwargs[name]
        unit = 8 if name in ("key", "value") else 1
        assert a.storage_offset() % unit == 0 and (a.storage_offset() // unit) % 2 == 1, name
        assert (a.stride(), a.storage_offset()) == (b.stride(), b.storage_offset()), name
        assert torch.equal(a.nan_to_num(), b.nan_to_num()), name


def test_flat16_addresses_every_row() -> None:
    key = torch.randn(5, 16, 3, 256).to(torch.bfloat16)[1:4, :, 1:2]
    flat, (sp, ss, sh) = sparse_launch._flat16(key)
    assert sh == 0  # size-1 axis
    for p, s in [(0, 0), (2, 15), (1, 7)]:
        off = p * sp + s * ss
        assert torch.equal(flat[off : off + 32].reshape(256), key[p, s, 0])


@pytest.mark.parametrize("layout", ["contiguous", "padded rows", "heads outermost", "odd offset", "feature stride 2"])
def test_out_rows_view(layout: str) -> None:
    """The vectorized epilogue gets ``out`` as 16-byte rows only where every (row, head) starts on
    one and its features are contiguous; its strides address every (row, head)."""
    rows, hq, dim = 5, 3, 256
    base = torch.randn(2 * rows * hq * (dim + 8)).to(torch.bfloat16)
    out = {
        "contiguous": base[: rows * hq * dim].view(rows, hq, dim),
        "padded rows": base[8 : 8 + rows * hq * (dim + 8)].view(rows, hq, dim + 8)[..., :dim],
        "heads outermost": base[: rows * hq * dim].view(hq, rows, dim).transpose(0, 1),
        "odd offset": base[1 : 1 + rows * hq * (dim + 1)].view(rows, hq, dim + 1)[..., :dim],
        "feature stride 2": base[: rows * hq * dim * 2].view(rows, hq, dim, 2)[..., 0],
    }[layout]
    flat, vec, s0, s1 = sparse_launch._out_rows(out)
    assert vec == (layout in ("contiguous", "padded rows", "heads outermost"))
    assert flat.shape[1] == 8 and flat.data_ptr() == out.data_ptr()
    if vec:
        for r, h in [(0, 0), (4, 2), (2, 1)]:
            assert torch.equal(flat[r * s0 + h * s1 : r * s0 + h * s1 + dim // 8].reshape(dim), out[r, h])
    else:
        assert (s0, s1) == (0, 0)


def test_per_row_table() -> None:
    ids = torch.tensor([5, 1, 1, 1, -1, 0, 0, 2], dtype=torch.int32)

    class P:
        token_to_req = ids
        num_requests = 3

    table = sparse_launch._per_row_table(P)
    assert table.dtype == torch.int32 and table.shape == (3, len(ids))
    req, local, count = table.tolist()
    real = [r for r, i in enumerate(ids.tolist()) if 0 <= i < P.num_requests]
    # Rows of requests in [0, R): (request id, index from the request's first row, row count of the request).
    expected = [(1, 0, 3), (1, 1, 3), (1, 2, 3), (0, 0, 2), (0, 1, 2), (2, 0, 1)]
    assert [(req[r], local[r], count[r]) for r in real] == expected
    # Rows with ids outside [0, R) keep a padded id and share the spare bucket R (their local index is irrelevant).
    padded = [r for r in range(len(ids)) if r not in real]
    assert padded == [0, 4]
    assert all(not 0 <= req[r] < P.num_requests and count[r] == len(padded) for r in padded)


def test_schedule_heuristic() -> None:
    prefill = choose_schedule(4096, 2, 2051, 0, 132)
    assert prefill.splits == 1 and prefill.union_rows == 0  # prefill: one CTA per (row, head)
    assert prefill.one_pipe and choose_schedule(64, 2, 2051, 0, 132).one_pipe  # one gather pipeline per split
    assert choose_schedule(4096, 2, 2051, 0, 132, union=True).union_rows == 4  # opt-in: union groups of 4
    assert choose_schedule(4096, 2, 2561, 0, 132, union=True).union_rows == 0  # wider than the union prep holds
    assert choose_schedule(4096, 2, 2051, 1, 132, union=True).union_rows == 0  # a forced split count
    assert choose_schedule(64, 2, 2051, 0, 132, union=True).union_rows == 0  # decode
    assert choose_schedule(256, 2, 2051, 0, 132).splits == 1  # decode 64 x 4: enough CTAs
    decode = choose_schedule(64, 2, 2051, 0, 132)
    assert decode.tile is W4 and decode.splits == 4
    assert choose_schedule(1, 2, 2051, 0, 132).splits == 32  # one row: capped at 64 slots per split
    assert choose_schedule(64, 2, 2051, 7, 132).splits == 7
    assert choose_schedule(1, 2, 20, 0, 132).splits == 1  # too few slots to split
    # Prefill schedules order each row's ids by region, with or without the union path, up to
    # the width one sort CTA holds; decode and forced split counts keep the given order.
    assert prefill.sort and choose_schedule(4096, 2, 2051, 0, 132, union=True).sort
    assert choose_schedule(4096, 2, SORT_CAP, 0, 132).sort
    assert not choose_schedule(4096, 2, SORT_CAP + 1, 0, 132).sort
    assert not decode.sort and not choose_schedule(4096, 2, 2051, 1, 132).sort


@pytest.mark.parametrize("n_req", [1, 2, 7, 130, 300])
def test_parallel_request_search_matches_binary_search(n_req: int, gen: torch.Generator) -> None:
    """The eager prologue's count search and the binary search find the same request, empty requests included."""
    q_lens = torch.randint(0, 4, (n_req,), generator=gen)
    cu = torch.zeros(n_req + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(q_lens, 0)
    n_iter = max(1, n_req.bit_length())
    args = (0, n_iter, n_req, 100, cu, None, None, None, None, 0, 0, 0)
    for r in range(int(cu[-1]) + 2):  # rows past the last request too
        serial = _resolve(r, row_mode.CU_SEQLENS, *args)
        parallel = _resolve(r, row_mode.CU_SEQLENS, *args, parallel=True)
        assert serial == parallel, (r, cu.tolist())


@pytest.mark.parametrize("query_kind", ["cu", "t2r"])
def test_launcher_many_requests_with_empty_ones(emulated, query_kind: str, gen: torch.Generator) -> None:
    _check_case(cases.random_case(gen, max_rows=60, max_width=16, n_req=140, empty_requests=True, query_kind=query_kind,
                                  hq=3, hkv=1))  # fmt: skip


def test_union_env_switch(monkeypatch, gen: torch.Generator) -> None:
    """Unset: the union path when some request may hold UNION_MIN_ROWS_PER_REQUEST rows (rows - requests + 1),
    the prep measuring only groups of such requests; "1": always, every group; "0": never; anything else raises."""
    from types import SimpleNamespace

    per_req = sparse_launch.UNION_MIN_ROWS_PER_REQUEST
    prefill = SimpleNamespace(rows=4096, num_requests=1)
    mixed = SimpleNamespace(rows=per_req + 500, num_requests=501)  # one chunk of per_req rows + 500 decode rows
    decode = SimpleNamespace(rows=per_req + 499, num_requests=501)  # at most per_req - 1 rows in any request
    physical = SimpleNamespace(rows=per_req, num_requests=0)
    plans = (prefill, mixed, decode, physical)
    monkeypatch.delenv(sparse_launch.UNION_ENV, raising=False)
    assert [sparse_launch.union_enabled(p) for p in plans] == [True, True, False, True]
    assert sparse_launch.union_min_rows() == per_req
    monkeypatch.setenv(sparse_launch.UNION_ENV, "1")
    assert all(sparse_launch.union_enabled(p) for p in plans)
    assert sparse_launch.union_min_rows() == 0
    monkeypatch.setenv(sparse_launch.UNION_ENV, "0")
    assert not any(sparse_launch.union_enabled(p) for p in plans)
    monkeypatch.setenv(sparse_launch.UNION_ENV, "yes")
    with pytest.raises(MateValueError, match="MATE_SPARSE_UNION must be '0', '1' or unset, got 'yes'"):
        sparse_launch.union_enabled(prefill)
    with pytest.raises(MateValueError, match="MATE_SPARSE_UNION must be '0', '1' or unset, got 'yes'"):
        sparse_launch.union_min_rows()
    # Through a real plan: 64 rows of one request take the union schedule by default (4+ waves of 1 SM).
    monkeypatch.delenv(sparse_launch.UNION_ENV)
    monkeypatch.setattr(sparse_launch, "_sm_count", lambda device: 1)
    case = cases.random_case(gen, max_rows=64, max_width=40, num_splits=None, query_kind="cu", n_req=1)
    plan = plan_sparse_attention(
        **{k: v for k, v in case.kwargs.items() if k not in ("out", "lse")}, backend="reference"
    )
    assert sparse_launch.schedule_for(plan).union_rows == (4 if plan.rows >= per_req else 0)


def test_precompile_covers_the_launcher(emulated, monkeypatch, gen: torch.Generator) -> None:
    """Every kernel the launcher builds for 24 / 2 heads (split, unsplit and union schedules, both
    dtypes) is one of ``precompile.launcher_specializations()``."""
    from mate_kernels_musa import precompile, sparse_union

    built: set[tuple] = set()
    for module in (sparse_launch, sparse_union):
        monkeypatch.setattr(module, "build", lambda f, p, *c, inner=module.build: built.add((f, c)) or inner(f, p, *c))
    monkeypatch.setattr(sparse_launch, "_sm_count", lambda device: 1)  # the prefill schedule from 4 CTAs up
    for dtype in (torch.bfloat16, torch.float16):
        for num_splits in (None, 1, 7):
            case = cases.random_case(gen, max_rows=12, max_width=40, dtype=dtype, num_splits=num_splits,
                                     query_kind="cu")  # fmt: skip
            for union in ("0", "1"):
                monkeypatch.setenv(sparse_launch.UNION_ENV, union)
                _run_both(case)
    names = {f.__name__ for f, _ in built}
    assert names == {"sparse_paged_kernel", "sparse_merge_kernel", "sparse_union_fused_kernel", "sparse_union_kernel",
                     "sparse_finalize_kernel", "sparse_sort_kernel"}, names  # fmt: skip
    listed = {(s.factory, s.consts) for s in precompile.launcher_specializations()}
    assert built <= listed, built - listed


@settings(max_examples=400, deadline=None)
@given(d=st.one_of(st.integers(1, 4096), st.integers(1, 2**31 - 1), st.sampled_from([2**k for k in range(31)])),
       n=st.one_of(st.integers(0, 2**31 - 1), st.integers(0, 4096)))  # fmt: skip
def test_page_divisor_divides_exactly(d: int, n: int) -> None:
    """``page_divisor``'s magic numbers give ``divmod(n, d)`` for int32 ids ``n >= 0`` (sampled, also
    at a multiple of ``d`` and one below it), the way the kernels compute it (``_fast_divmod``)."""
    from mate_kernels_musa._sparse_macros import page_divisor

    magic, shift = page_divisor(d)
    assert 0 < magic < 2**32 and 0 <= shift <= 31
    split = _fast_divmod(d, magic, shift)
    for x in {n, n - n % d, max(n - n % d - 1, 0)}:
        assert split(x) == divmod(x, d), (d, x)


@pytest.mark.parametrize("bad", [0, -64, 2**31])
def test_page_divisor_rejects_out_of_range(bad: int) -> None:
    from mate_kernels_musa._sparse_macros import page_divisor

    with pytest.raises(ValueError, match="page_size"):
        page_divisor(bad)


def _record_builds(monkeypatch) -> tuple[list[dict], list[bool]]:
    """(the paged kernel's compile-time arguments by name, one entry per merge kernel) of every build the
    launcher makes from now on."""
    built, merges = [], []
    emulate = sparse_launch.build

    def record(factory, profile, *consts):
        if factory.__name__ == "sparse_paged_kernel":
            built.append(gpu_specs.compile_args(factory, consts))
        if factory.__name__ == "sparse_merge_kernel":
            merges.append(True)
        return emulate(factory, profile, *consts)

    monkeypatch.setattr(sparse_launch, "build", record)
    return built, merges


@pytest.mark.parametrize("num_splits", [1, 3, 4, None])
def test_launcher_picks_the_build_by_split_count(emulated, monkeypatch, num_splits, gen) -> None:
    """The paged kernel's ``q_regs`` build (Q straight into the QK fragments) serves one-split schedules only,
    its ``kv_evict_first`` build (K/V gathers with an L2 evict-first policy) split schedules only, its group
    build (``sparse_groups``: the CTA merges, no merge kernel) four-split schedules only."""
    built, merges = _record_builds(monkeypatch)
    case = cases.random_case(gen, max_rows=6, max_width=40, hq=24, hkv=2, num_splits=num_splits)
    _check_case(case)
    splits = sparse_launch.schedule_for(plan_sparse_attention(**case.kwargs, backend="reference")).splits
    assert [c["q_regs"] for c in built] == [splits == 1]
    assert [c["kv_evict_first"] for c in built] == [splits > 1]
    assert [c.get("groups", 1) for c in built] == [4 if splits == 4 else 1]
    assert merges == ([] if splits in (1, 4) else [True])


def test_wide_offsets_keep_the_merge_kernel(emulated, monkeypatch, gen) -> None:
    """int64 K/V offsets take no group build (four groups' offset arrays exceed the shared memory): four splits
    then write partials and the merge kernel merges them."""
    built, merges = _record_builds(monkeypatch)
    monkeypatch.setattr(sparse_launch, "_INT32_LIMIT", 0)
    _check_case(cases.random_case(gen, max_rows=6, max_width=40, hq=24, hkv=2, num_splits=4))
    assert [(c["wide"], c.get("groups", 1)) for c in built] == [(True, 1)] and merges == [True]
