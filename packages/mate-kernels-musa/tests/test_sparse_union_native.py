"""Union-gather sparse attention (``sparse_attention_union``) on the H200 against the FP32 reference.

Marker ``gpu``. The same random problems as the paged kernel's tests (``sparse_cases.py``):
ragged requests, flattened (``cu_seqlens_q`` / ``token_to_req`` with padded rows) and padded
queries, -1 pads, duplicates, future ids and ids past ``seq_len_k``, -1 and out-of-range
pages (whose K/V are NaN), gate and LSE variants, strided ``out`` views; physical ids;
FP16; GQA groups 3 and 16. Row counts are not multiples of ``R`` and groups straddle
requests. Outputs are NaN-poisoned and must be fully overwritten (``sparse_checks.check``:
rel L2 < 1e-2, LSE error < 1e-2, identical -inf patterns). Also: CUDA-graph replay with
new metadata, empty selections, bitwise determinism, the per-row sort of the ids that the
default path hands to the paged kernel.

``-k memcheck`` selects the small subset meant for ``compute-sanitizer --tool memcheck``.
"""

from __future__ import annotations

import math
from typing import Any

import mate_kernels_musa_tests_sparse_checks as checks  # registered by conftest.py
import pytest
import torch

pytestmark = pytest.mark.gpu

cases = checks.cases
ROWS_PER_CTA = (2, 4, 5, 8)  # 5: the packed tile (5 rows x 12 heads in 64 rows)


def _run(case, r: int):
    """Run ``case`` through the union path with ``R = r`` and check it; returns the native plan."""
    from mate_kernels_musa.sparse_union import sparse_attention_union

    case = case.to("cuda")
    native, ref = checks.plans(case)
    sparse_attention_union(native, rows_per_cta=r)
    checks.check(native, ref, case)
    return native


@pytest.mark.parametrize("index", range(24))
def test_random_small(index: int, gen: torch.Generator) -> None:
    _run(cases.random_case(gen, max_rows=64, max_width=300), ROWS_PER_CTA[index % 4])


@pytest.mark.parametrize("index", range(3))
def test_random_large(index: int, gen: torch.Generator) -> None:
    """Up to 4096 rows with full 2051-slot QSA selections (and a random-width one)."""
    case = cases.random_case(gen, max_rows=4096, max_width=2051, canonical=index < 2, width=2051 if index < 2 else None)
    _run(case, 5 if index == 1 else 4)


@pytest.mark.parametrize("index", range(6))
def test_physical(index: int, gen: torch.Generator) -> None:
    _run(cases.physical_case(gen, max_rows=64 if index < 4 else 600, max_width=300 if index < 4 else 2051), 4)


def test_fp16(gen: torch.Generator) -> None:
    for _ in range(3):
        _run(cases.random_case(gen, max_rows=48, max_width=400, dtype=torch.float16), 4)


@pytest.mark.parametrize(("hq", "hkv"), [(3, 1), (16, 1)])
def test_group_sizes(hq: int, hkv: int, gen: torch.Generator) -> None:
    for _ in range(2):
        _run(cases.random_case(gen, max_rows=32, max_width=200, hq=hq, hkv=hkv), 4)


def test_groups_straddle_requests(gen: torch.Generator) -> None:
    """Several ragged requests in up to 31 rows: groups of 4 span request boundaries."""
    for _ in range(4):
        _run(cases.random_case(gen, max_rows=31, max_width=120, query_kind=cases._pick(gen, ["cu", "t2r"])), 4)


def test_neighbour_overlap(gen: torch.Generator) -> None:
    """Prefill rows of one request sharing ~90% of their 4-token blocks (the benchmark's shape, small)."""
    rows, blocks, page, ctx = 95, 64, 16, 2048  # 95: no R divides it
    pos = ctx - rows + torch.arange(rows)
    cur = torch.randperm(int(pos[0] + 1) // 4, generator=gen)[:blocks]
    sel = []
    for p in pos.tolist():
        cur = cur.clone()
        cur[torch.randperm(blocks, generator=gen)[:6]] = torch.randint(0, (p + 1) // 4, (6,), generator=gen)
        ids = (cur[:, None] * 4 + torch.arange(4)).reshape(-1)
        sel.append(torch.cat([ids, torch.arange((p + 1) // 4 * 4, p + 1), torch.full((3 - (p + 1) % 4,), -1)]))
    kwargs = {
        "query": torch.randn(rows, 24, 256, generator=gen).to(torch.bfloat16),
        "key": torch.randn(ctx // page, page, 2, 256, generator=gen).to(torch.bfloat16),
        "value": torch.randn(ctx // page, page, 2, 256, generator=gen).to(torch.bfloat16),
        "block_table": torch.randperm(ctx // page, generator=gen).view(1, -1).to(torch.int32),
        "token_indices": torch.stack(sel).to(torch.int32),
        "cu_seqlens_q": torch.tensor([0, rows], dtype=torch.int32),
        "gate": torch.randn(rows, 24, generator=gen),
        "return_lse": True,
    }
    for r in ROWS_PER_CTA:
        _run(cases.Case(kwargs, notes={"neighbour_overlap": r}), r)


def _sorted_union(u: torch.Tensor, nu: torch.Tensor, c: torch.Tensor, width: int):
    """``(U, C, live)`` with each group's slots ``< NU`` reordered by ascending token (order-free comparison)."""
    live = torch.arange(width, device=u.device)[None, :] < nu[:, None]
    key = torch.where(live, u[:, :width], torch.iinfo(torch.int32).max)
    order = key.argsort(dim=1)
    cs = c[:, :, :width].gather(2, order[:, None, :].expand(-1, c.shape[1], -1))
    return key.gather(1, order), cs, live


def _seen_bound(u: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
    """Per group, the distinct bitmap bits (``seen_bit``) of the tokens ``U[g, s]`` with ``live[g, s]``:
    the fused prep's lower bound of their union, int32."""
    from mate_kernels_musa.sparse_union_fused_kernel import SEEN_BITS, seen_bit

    bits = torch.where(live, seen_bit(u.long()), SEEN_BITS).sort(dim=1).values
    new = torch.ones_like(bits, dtype=torch.bool)
    new[:, 1:] = bits[:, 1:] != bits[:, :-1]
    return (new & (bits < SEEN_BITS)).sum(1).to(torch.int32)


def _capped_nu(u: torch.Tensor, nu: torch.Tensor, c: torch.Tensor, width: int, cap: int) -> torch.Tensor:
    """The fused prep's ``NU`` under ``max_nu = cap`` from its uncapped outputs: after row ``i`` of a
    group (once ``(i + 1) * width > cap``) and after its last row, the bound of the rows so far
    (the union slots some of them count); the first bound above the cap is ``NU``, else the union."""
    r = c.shape[1]
    live = torch.arange(u.shape[1], device=u.device)[None, :] < nu[:, None]
    out = nu.clone()
    done = torch.zeros_like(nu, dtype=torch.bool)
    for i in range(r):
        if i + 1 < r and (i + 1) * width <= cap:
            continue
        bound = _seen_bound(u, live & (c[:, : i + 1].int().sum(1) > 0))
        hit = ~done & (bound > cap)
        out = torch.where(hit, bound, out)
        done |= hit
    return out


@pytest.mark.parametrize("r", ROWS_PER_CTA)
def test_fused_prep_matches_torch_prep(r: int, gen: torch.Generator) -> None:
    """The fused prep kernel equals the torch prep on every slot below NU, in its own order, deterministically.

    Random metadata kinds, -1 padding, duplicates, future ids, invalid pages, widths up to
    ``PREP_T_CAP``.
    """
    from mate_kernels_musa.sparse_union import PREP_T_CAP, prepare_union

    for width in (1, 37, 2051, PREP_T_CAP):
        case = cases.random_case(gen, max_rows=48, max_width=PREP_T_CAP, width=width, canonical=False).to("cuda")
        native, _ = checks.plans(case)
        w = r * width
        u0, c0, live = _sorted_union(*prepare_union(native, r, "torch"), w)
        nu0 = live.sum(1).to(torch.int32)
        u1, nu1, c1 = prepare_union(native, r, "fused")
        assert torch.equal(nu0, nu1), (width, case.notes)
        u1s, c1s, _ = _sorted_union(u1, nu1, c1, w)
        live_c = live[:, None, :].expand(-1, r, -1)
        assert torch.equal(u0[live], u1s[live]), (width, case.notes)
        assert torch.equal(c0[live_c].int(), c1s[live_c].int()), (width, case.notes)
        u2, _, c2 = prepare_union(native, r, "fused")
        live_u = torch.arange(u1.shape[1], device="cuda")[None, :] < nu1[:, None]
        live_u_c = live_u[:, None, :].expand(-1, r, -1)
        assert torch.equal(u1[live_u], u2[live_u]) and torch.equal(c1[live_u_c], c2[live_u_c]), (
            "order not deterministic"
        )
        # Under a union cap (the launcher's max_nu): the same NU, and the same U/C for the groups
        # within it (the others go to the paged kernel and are not written). Poisoned blocks of
        # the outputs' sizes are freed first, so the caching allocator hands them out again.
        cap = int(nu1.float().median().item())
        del u2, c2
        w3 = max(1, min(w, cap))  # slots per group of the capped outputs
        torch.full((u1.shape[0], w3), -7, dtype=u1.dtype, device="cuda")
        torch.full((u1.shape[0], r, w3), -7, dtype=c1.dtype, device="cuda")
        u3, nu3, c3 = prepare_union(native, r, "fused", max_nu=cap)
        assert u3.shape[1] == w3 and c3.shape[2] == w3, (u3.shape, c3.shape)
        kept = (live_u & (nu1 <= cap)[:, None])[:, :w3]
        kept_c = kept[:, None, :].expand(-1, r, -1)
        # A group whose bitmap bound exceeds the cap exits early with NU = that bound.
        assert torch.equal(nu3, _capped_nu(u1, nu1, c1, width, cap)), (width, case.notes)
        assert torch.equal(u3[kept], u1[:, :w3][kept]), (width, case.notes)
        assert torch.equal(c3[kept_c], c1[:, :, :w3][kept_c]), (width, case.notes)


def _one_group_plan(ids: torch.Tensor) -> Any:
    """A native plan of one request whose rows select ``ids`` ``[rows, T]`` from a 2^17-row pool."""
    from mate_core import plan_sparse_attention

    page_size, pages, rows = 64, 2048, ids.shape[0]
    cache = torch.randn(pages, page_size, 1, 256, dtype=torch.bfloat16, device="cuda")
    return plan_sparse_attention(
        query=torch.randn(rows, 1, 256, dtype=torch.bfloat16, device="cuda"), key=cache, value=cache,
        token_indices=ids.cuda(), cu_seqlens_q=torch.tensor([0, rows], dtype=torch.int32).cuda(),
        seq_lens_k=torch.tensor([pages * page_size], dtype=torch.int32).cuda(),
        block_table=torch.arange(pages, dtype=torch.int32).view(1, pages).cuda(), backend="tilelang",
    )  # fmt: skip


def test_prep_early_exit_bound() -> None:
    """The fused prep's early exit: rows ``x`` and ``(x ^ 1) + SEEN_BITS`` of a 2^17-row pool share a
    bitmap bit, so a union of 2000 rows has the bound 1000. Under a cap below the bound the group
    stops with ``NU`` = the bound; under a cap between bound and union it is measured exactly."""
    from mate_kernels_musa.sparse_union import prepare_union
    from mate_kernels_musa.sparse_union_fused_kernel import SEEN_BITS, seen_bit

    low = torch.arange(1000, dtype=torch.int32)
    ids = torch.cat([low, (low ^ 1) + SEEN_BITS])  # seen_bit((x ^ 1) + SEEN_BITS) == seen_bit(x) == x
    assert torch.equal(seen_bit(ids[1000:]), low)
    native = _one_group_plan(ids.repeat(4, 1))
    for cap, expect in ((None, 2000), (1500, 2000), (1000, 2000), (999, 1000), (0, 1000)):
        _, nu, _ = prepare_union(native, 4, "fused", **({} if cap is None else {"max_nu": cap}))
        assert nu.tolist() == [expect], (cap, nu.tolist())


def test_prep_early_exit_after_some_rows() -> None:
    """The bound is taken after each row once the rows so far could hold more than the cap (``(i + 1) T
    > max_nu``), so a group stops at the first row whose bound passes it: four rows of 1000 ids with
    distinct bitmap bits stop after two rows (``NU`` 2000) under a cap of 1500 and after three (3000)
    under 2500; under 3999 the bound of all four rows (4000) is ``NU``."""
    from mate_kernels_musa.sparse_union import prepare_union

    native = _one_group_plan(torch.arange(4000, dtype=torch.int32).view(4, 1000))
    for cap, expect in ((None, 4000), (4000, 4000), (3999, 4000), (2500, 3000), (2000, 3000), (1999, 2000),
                        (1500, 2000), (999, 1000)):  # fmt: skip
        _, nu, _ = prepare_union(native, 4, "fused", **({} if cap is None else {"max_nu": cap}))
        assert nu.tolist() == [expect], (cap, nu.tolist())


@pytest.mark.parametrize("method", ["torch", "fused"])
def test_prep_methods(method: str, gen: torch.Generator) -> None:
    """The attention results through each prep method."""
    from mate_kernels_musa.sparse_union import sparse_attention_union

    for r in (4, 5):
        case = cases.random_case(gen, max_rows=64, max_width=300).to("cuda")
        native, ref = checks.plans(case)
        sparse_attention_union(native, rows_per_cta=r, method=method)
        checks.check(native, ref, case)


def test_wide_selection_uses_torch_prep(gen: torch.Generator) -> None:
    """T > PREP_T_CAP goes through the torch prep; results still match the reference."""
    from mate_kernels_musa.sparse_union import PREP_T_CAP

    _run(cases.random_case(gen, max_rows=12, width=PREP_T_CAP + 40, canonical=False), 4)


@pytest.mark.parametrize("width", [1, 3, 300, 2051, 4096, 4097])
def test_sorted_ids(width: int, gen: torch.Generator) -> None:
    """``sorted_ids``: rows of groups the prep rejected or left unmeasured (or has not measured yet: the
    launcher's fill is ``UNMEASURED``) hold their ids ordered by context region (within a region by
    thread, then by slot: ``sparse_sort_kernel``), duplicates and -1 kept; the union's rows are not
    written. Without union sizes every row is ordered. Wider than ``SORT_CAP``: None."""
    from mate_core import plan_sparse_attention
    from mate_kernels_musa.sparse_launch import _ids, _paged_kv
    from mate_kernels_musa.sparse_sort_kernel import SORT_CAP, region_shift
    from mate_kernels_musa.sparse_union import SORT_THREADS, sorted_ids
    from mate_kernels_musa.sparse_union_fused_kernel import UNMEASURED

    case = cases.random_case(gen, max_rows=200, max_width=width, width=width, num_splits=None, query_kind="cu",
                             row_counts=[150, 50]).to("cuda")  # fmt: skip
    native = plan_sparse_attention(**case.kwargs, backend="tilelang")
    ids = _ids(native)
    r = 4
    n_grp = -(-ids.shape[0] // r)
    kind = torch.randint(0, 3, (n_grp,), generator=gen)  # 0: union row, 1: rejected, 2: unmeasured
    nu = torch.where(kind == 0, 3, torch.where(kind == 1, 9, UNMEASURED)).to(torch.int32).cuda()
    out = sorted_ids(native, nu, r, 4)
    every = sorted_ids(native)  # without the union path: every row ordered
    if width > SORT_CAP:
        assert out is None and every is None
        return
    kind = kind.cuda().repeat_interleave(r)[: ids.shape[0]]
    assert (kind == 1).any() and (kind == 2).any(), kind
    _, _, table, page_size = _paged_kv(native)
    expect = cases.region_order(ids, region_shift(table.shape[1] * page_size), SORT_THREADS)
    assert torch.equal(out[kind != 0], expect[kind != 0])
    assert torch.equal(every, expect)


def _prefill_chunk(width: int, gen: torch.Generator, monkeypatch, union: str | None, expect) -> None:
    """One 600-row request of random, barely overlapping ``width``-token selections under
    ``MATE_SPARSE_UNION=union`` (None: the default rule): its schedule passes ``expect``, the call
    matches the reference, and a rerun is bitwise equal."""
    from mate_kernels_musa import sparse_attention, sparse_launch

    if union is None:
        monkeypatch.delenv(sparse_launch.UNION_ENV, raising=False)
    else:
        monkeypatch.setenv(sparse_launch.UNION_ENV, union)
    case = cases.random_case(gen, max_rows=600, max_width=width, width=width, num_splits=None, query_kind="cu",
                             row_counts=[600], canonical=False).to("cuda")  # fmt: skip
    native, ref = checks.plans(case)
    sched = sparse_launch.schedule_for(native)
    assert expect(sched), sched
    sparse_attention(native)
    checks.check(native, ref, case)
    checks.assert_rerun_bitwise(native, sparse_attention)


def test_memcheck_default_path_sorts_and_repeats(gen: torch.Generator, monkeypatch) -> None:
    """Default rule on a prefill chunk of random, barely overlapping selections: every group is
    left to the paged kernel, which reads the sorted ids; correct, and bitwise equal on a rerun."""
    _prefill_chunk(600, gen, monkeypatch, None, lambda s: s.union_rows and s.sort)


def test_memcheck_sorted_without_union(gen: torch.Generator, monkeypatch) -> None:
    """The prefill schedule with the union path off (``MATE_SPARSE_UNION=0``): the sort kernel orders
    every row's ids and the paged kernel reads them; correct, and bitwise equal on a rerun."""
    _prefill_chunk(600, gen, monkeypatch, "0", lambda s: s.splits == 1 and not s.union_rows and s.sort)


@pytest.mark.parametrize("width", [3000, 4096, 4097])
def test_sorted_past_union_width(width: int, gen: torch.Generator, monkeypatch) -> None:
    """Default rule past ``UNION_MAX_WIDTH``: no union path; the rows are ordered up to the sort's
    ``SORT_CAP`` and kept as given past it; correct either way, and bitwise repeatable."""
    from mate_kernels_musa.sparse_sort_kernel import SORT_CAP

    _prefill_chunk(width, gen, monkeypatch, None,
                   lambda s: s.splits == 1 and not s.union_rows and s.sort == (width <= SORT_CAP))  # fmt: skip


def test_empty_selection() -> None:
    """T = 0: zeros and LSE -inf (no kernel launch)."""
    from mate_core import plan_sparse_attention
    from mate_kernels_musa.sparse_union import sparse_attention_union

    plan = plan_sparse_attention(
        query=torch.randn(5, 24, 256, device="cuda").to(torch.bfloat16),
        key=torch.randn(4, 16, 2, 256, device="cuda").to(torch.bfloat16),
        value=torch.randn(4, 16, 2, 256, device="cuda").to(torch.bfloat16),
        block_table=torch.arange(4, device="cuda", dtype=torch.int32).view(1, 4),
        token_indices=torch.empty(5, 0, dtype=torch.int32, device="cuda"),
        cu_seqlens_q=torch.tensor([0, 5], dtype=torch.int32, device="cuda"),
        return_lse=True,
        backend="tilelang",
    )
    plan.out.fill_(float("nan"))
    plan.lse.fill_(float("nan"))
    sparse_attention_union(plan)
    assert torch.equal(plan.out, torch.zeros_like(plan.out))
    assert bool((plan.lse == -math.inf).all())


@pytest.mark.parametrize("query_kind", ["cu", "t2r"])
def test_cuda_graph_replay_new_metadata(query_kind: str, gen: torch.Generator) -> None:
    """Capture after warm-up, then replay with new data, ids, pages and lengths in the same tensors."""
    from mate_kernels_musa.sparse_union import sparse_attention_union

    checks.check_graph_replay(checks.graph_case(gen, query_kind), sparse_attention_union)


def _half_shared(shape: tuple[int, int], cap: int, gen: torch.Generator) -> torch.Tensor:
    """Token ids ``[rows, T]`` in ``[-1, cap)`` where a random half of the groups of ``UNION_ROWS``
    rows repeat their first row's selection (the default path's union kernel takes them) and the
    other rows draw their own (left to the paged kernel where ``cap`` is well above ``T``)."""
    from mate_kernels_musa.sparse_schedule import UNION_ROWS

    rows = shape[0]
    own = torch.randint(-1, cap, shape, generator=gen, dtype=torch.int32)
    group = torch.arange(rows) // UNION_ROWS
    shared = (torch.rand(int(group[-1]) + 1, generator=gen) < 0.5)[group]
    return torch.where(shared[:, None], own[group * UNION_ROWS], own).cuda()


def _half_shared_chunk(rows: int, width: int, gen: torch.Generator):
    """One request of ``rows`` prefill rows with ``width``-slot selections (:func:`_half_shared`), LSE
    on, ``out`` allocated by the call (a CUDA case)."""
    case = cases.random_case(gen, max_rows=rows, max_width=width, width=width, num_splits=None, query_kind="cu",
                             row_counts=[rows], canonical=True).to("cuda")  # fmt: skip
    case.drop_out_view()
    case.kwargs["return_lse"] = True
    kw = case.kwargs
    cap = kw["block_table"].shape[1] * kw["key"].shape[1]
    kw["token_indices"].copy_(_half_shared(tuple(kw["token_indices"].shape), cap, gen))
    return case


def test_cuda_graph_replay_default_prefill(gen: torch.Generator, monkeypatch) -> None:
    """The default prefill path, whose union prep, union and finalize kernels run on a second stream
    beside the sort and paged kernels, captured after warm-up and replayed with new data, pages and
    ids that change which groups each path computes; before every replay the prep confirms that both
    paths have rows. Each replay matches the reference."""
    from mate_kernels_musa import sparse_attention, sparse_launch
    from mate_kernels_musa.sparse_schedule import UNION_ROWS
    from mate_kernels_musa.sparse_union import prepare_union

    monkeypatch.setenv(sparse_launch.UNION_ENV, "1")  # every group measured (one request here anyway)
    width = 16  # a group of own draws holds more than UNION_MAX_FILL * 4 * 16 distinct ids
    case = _half_shared_chunk(600, width, gen)
    max_nu = int(sparse_launch.UNION_MAX_FILL * UNION_ROWS * width)  # the launcher's rule

    def both_paths(native) -> None:
        sched = sparse_launch.schedule_for(native)
        assert sched.union_rows == UNION_ROWS and sched.sort, sched
        _, nu, _ = prepare_union(native, UNION_ROWS, "fused", None, max_nu)
        assert bool((nu <= max_nu).any()) and bool((nu > max_nu).any()), nu

    checks.check_graph_replay(case, sparse_attention, lambda shape, c: _half_shared(shape, c, gen), both_paths)


def test_default_prefill_replays_repeat_bitwise(gen: torch.Generator, monkeypatch) -> None:
    """The default prefill path with the sort running beside the union prep (it reads NU while the prep
    writes it, so which rows it orders depends on the timing): a 1024-row chunk of 2051-slot selections,
    half of its groups shared, captured and replayed 30 times, every replay bitwise equal to the eager
    call, which matches the reference."""
    from mate_kernels_musa import sparse_attention, sparse_launch

    monkeypatch.setenv(sparse_launch.UNION_ENV, "1")
    case = _half_shared_chunk(1024, 2051, gen)
    native, ref = checks.plans(case)
    sched = sparse_launch.schedule_for(native)
    assert sched.union_rows and sched.sort, sched
    sparse_attention(native)
    checks.check(native, ref, case)
    first = (native.out.clone(), native.lse.clone())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        sparse_attention(native)
    for i in range(30):
        native.out.fill_(float("nan"))
        native.lse.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(native.out, first[0]) and torch.equal(native.lse, first[1]), i


def test_bitwise_deterministic(gen: torch.Generator) -> None:
    from mate_kernels_musa.sparse_union import sparse_attention_union

    case = cases.random_case(gen, max_rows=256, max_width=2051, canonical=True).to("cuda")
    native, _ = checks.plans(case)
    sparse_attention_union(native)
    checks.assert_rerun_bitwise(native, sparse_attention_union)


@pytest.mark.parametrize("gate_dtype", [torch.float32, torch.bfloat16])
def test_per_head_gate_matches_its_expansion(gate_dtype: torch.dtype, gen: torch.Generator) -> None:
    """A per-head gate ``[rows, Hq]`` (the finalize kernel loads it once per (row, head)) and the same
    values expanded to ``[rows, Hq, D]`` (loaded per feature) give the same bits, out and LSE."""
    case = cases.random_case(gen, max_rows=64, max_width=300, query_kind="cu", lse="return")
    q = case.kwargs["query"]
    head_gate = (2 * torch.randn(q.shape[:-1], generator=gen)).to(gate_dtype)
    case.kwargs["gate"] = head_gate
    per_head = _run(case, 4)
    case.kwargs["gate"] = head_gate.unsqueeze(-1).expand(q.shape).contiguous()
    per_elem = _run(case, 4)
    assert torch.equal(per_head.out_result, per_elem.out_result)
    assert torch.equal(per_head.lse, per_elem.lse)


@pytest.mark.parametrize("index", range(4))
def test_memcheck_invalid_pages(index: int, gen: torch.Generator) -> None:
    """Small cases with -1 / out-of-range pages and ids past the cache (run under memcheck)."""
    _run(cases.random_case(gen, max_rows=9, max_width=100, bad_pages=True), ROWS_PER_CTA[index])
