"""Native paged sparse attention on the H200 against the FP32 reference (marker ``gpu``).

Fresh random problems (see ``sparse_cases.py``): 1..4096 ragged rows, decode and prefill,
selections of 1..2051 slots with -1 padding, duplicates, future ids and ids past
``seq_len_k``, -1 and out-of-range pages (whose K/V are NaN), page sizes 16/32/64, gate
off / per head / elementwise in FP32 and the data dtype, LSE off / returned / buffer,
``num_splits`` None/1/2/7/64, strided ``out`` views, peaked softmax (scaled queries). Outputs are poisoned with NaN
before the call and must be fully overwritten. Also: group sizes 3/4/16, FP16, padded
K/V, rows outside ``cu_seqlens_q``, CUDA-graph replay with new metadata, bitwise determinism.

``-k memcheck`` selects the small subset meant for ``compute-sanitizer --tool memcheck``.
"""

from __future__ import annotations

import math

import mate_kernels_musa_tests_sparse_checks as checks  # registered by conftest.py
import pytest
import torch

pytestmark = pytest.mark.gpu

cases = checks.cases
_plans, _check, _run_case = checks.plans, checks.check, checks.run_case


@pytest.mark.parametrize("index", range(32))
def test_random_small(index: int, gen: torch.Generator) -> None:
    _run_case(cases.random_case(gen, max_rows=64, max_width=300))


@pytest.mark.parametrize("index", range(6))
def test_random_large(index: int, gen: torch.Generator) -> None:
    width = 2051 if index < 2 else None  # two full-width QSA selections, then random widths
    _run_case(cases.random_case(gen, max_rows=4096, max_width=2051, canonical=index % 2 == 0 or index < 2, width=width))


@pytest.mark.parametrize(("rows", "dtype"), [(4096, torch.bfloat16), (2500, torch.float16)], ids=["bf16", "fp16"])
def test_prefill_sized_with_lse(rows: int, dtype: torch.dtype, gen: torch.Generator) -> None:
    """A prefill chunk of ``rows`` rows with full 2051-slot QSA selections, the LSE returned:
    the prefill schedule (no split; the union search, then the union or the paged kernel per row
    group) on a draw that is never decode sized, every (row, head) and every LSE checked."""
    case = cases.random_case(gen, max_rows=rows, max_width=2051, width=2051, canonical=True, row_counts=[rows],
                             num_splits=None, dtype=dtype, lse="return")  # fmt: skip
    native = _run_case(case)
    assert native.lse is not None


@pytest.mark.parametrize("num_splits", cases.SPLITS)
def test_fp16(num_splits, gen: torch.Generator) -> None:
    _run_case(cases.random_case(gen, max_rows=48, max_width=400, dtype=torch.float16, num_splits=num_splits))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decode_groups(dtype: torch.dtype, gen: torch.Generator) -> None:
    """64 one-row requests over full 2051-slot selections: the decode schedule's four splits run as the
    thread groups of one CTA and merge there (``sparse_groups``, no merge kernel), with whatever gate,
    LSE and output view each draw brings."""
    from mate_kernels_musa import sparse_launch

    for _ in range(3):
        case = cases.random_case(gen, max_rows=64, max_width=2051, width=2051, canonical=True, row_counts=[1] * 64,
                                 query_kind="cu", num_splits=None, dtype=dtype)  # fmt: skip
        native = _run_case(case)
        assert sparse_launch.schedule_for(native).groups == 4


@pytest.mark.parametrize("out_kind", cases.OUT_KINDS)
def test_groups_match_merge_kernel(out_kind: str, gen: torch.Generator) -> None:
    """The group build's in-CTA merge does the merge kernel's arithmetic in the same order: its ``out``
    and LSE equal those of the same four splits merged by the merge kernel bitwise, with whatever gate
    each draw brings, into every kind of ``out`` (the vector and the element-wise stores)."""
    from mate_kernels_musa import sparse_launch
    from mate_kernels_musa.sparse_schedule import W4, Schedule

    for _ in range(2):
        case = cases.random_case(gen, max_rows=64, max_width=2051, canonical=True, lse="buffer",
                                 out_kind=out_kind).to("cuda")  # fmt: skip
        native, ref = _plans(case)
        got = []
        for groups in (1, 4):
            checks.poison(native)
            sparse_launch.sparse_attention(native, Schedule(W4, 4, groups=groups))
            _check(native, ref, case)
            got.append((native.out_result.clone(), native.lse.clone()))
        assert torch.equal(got[0][0], got[1][0]), case.notes
        assert torch.equal(got[0][1], got[1][1]), case.notes


@pytest.mark.parametrize("spread", [8.0, 30.0])
def test_running_max_updates(spread: float, gen: torch.Generator) -> None:
    """Peaked softmax: the query scaled so a row's scores span tens of log2 units, so its running
    max climbs by more than ``RESCALE_SLACK`` on later blocks too, not only on the first (the
    lazy-max update path of the softmax step), in the decode schedule and in one split."""
    for splits in (None, 1):
        case = cases.random_case(gen, max_rows=48, max_width=2051, width=2051, canonical=True, num_splits=splits)
        case.kwargs["query"] = case.kwargs["query"] * spread
        _run_case(case)


@pytest.mark.parametrize(("hq", "hkv"), [(3, 1), (8, 2), (16, 1)])
def test_group_sizes(hq: int, hkv: int, gen: torch.Generator) -> None:
    for _ in range(3):
        _run_case(cases.random_case(gen, max_rows=32, max_width=200, hq=hq, hkv=hkv))


@pytest.mark.parametrize("n_req", [130, 300])
def test_many_requests_with_empty_ones(n_req: int, gen: torch.Generator) -> None:
    """More requests than threads per CTA (the cu_seqlens search loops), a third of them with no rows."""
    for query_kind in ("cu", "t2r"):
        _run_case(cases.random_case(gen, max_rows=2 * n_req, max_width=64, n_req=n_req, empty_requests=True,
                                    query_kind=query_kind))  # fmt: skip


@pytest.mark.parametrize("schedule", ["decode", "one split", "4 splits (groups)", "7 splits", "prefill union"])
def test_rows_outside_cu_seqlens_are_padded(schedule: str, gen: torch.Generator, monkeypatch) -> None:
    """Request ``b`` owns rows ``cu[b]:cu[b+1]``: rows before ``cu[0]`` and from ``cu[R]`` on belong
    to no request and come out as padded rows (zeros, LSE -inf), whatever their ids select; in
    the decode schedule, one split, seven splits, and a prefill whose first row group (three
    such rows and a real one, all selecting the same ids) takes the union kernel."""
    from mate_kernels_musa import sparse_launch
    from mate_kernels_musa.sparse_union import prepare_union

    if schedule == "prefill union":
        monkeypatch.setenv(sparse_launch.UNION_ENV, "1")
        case = cases.random_case(gen, max_rows=400, max_width=300, query_kind="cu", num_splits=None, lse="return",
                                 row_counts=[150, 160], canonical=True)  # fmt: skip
    else:
        splits = {"decode": None, "one split": 1, "4 splits (groups)": 4, "7 splits": 7}[schedule]
        case = cases.random_case(gen, max_rows=40, max_width=300, query_kind="cu", num_splits=splits, lse="return")
    kw, lead, trail = case.drop_out_view().kwargs, 3, 2
    for name in ("query", "token_indices", "gate", "query_positions"):
        if name in kw:  # the extra rows repeat real rows' data, so only the row rule can zero them
            t = kw[name]
            kw[name] = torch.cat([t[:1].expand(lead, *t.shape[1:]), t, t[-1:].expand(trail, *t.shape[1:])])
    kw["cu_seqlens_q"] = kw["cu_seqlens_q"] + lead
    case.notes.update(lead=lead, trail=trail)
    native = _run_case(case)
    for rows in (slice(0, lead), slice(-trail, None)):
        assert torch.equal(native.out_result[rows], torch.zeros_like(native.out_result[rows]))
        assert bool((native.lse[rows] == -math.inf).all())
    if schedule == "prefill union":
        assert sparse_launch.schedule_for(native).union_rows == 4
        _, nu, _ = prepare_union(native, 4, "fused")
        assert int(nu[0]) <= sparse_launch.UNION_MAX_FILL * 4 * kw["token_indices"].shape[-1], nu[:4]


@pytest.mark.parametrize("query_kind", ["cu", "padded"])
def test_prefill_union_and_paged_groups(query_kind: str, gen: torch.Generator, monkeypatch) -> None:
    """MATE_SPARSE_UNION=1 prefill: groups with small unions take the union kernel, the paged kernel the others."""
    from mate_kernels_musa import sparse_attention, sparse_launch
    from mate_kernels_musa.sparse_union import prepare_union

    monkeypatch.setenv(sparse_launch.UNION_ENV, "1")
    for _ in range(50):  # draw until the problem is prefill-sized (rows * Hkv >= 4 waves of 132 SMs)
        case = cases.random_case(gen, max_rows=700, max_width=600, num_splits=None, query_kind=query_kind,
                                 canonical=True)  # fmt: skip
        if case.kwargs["query"].numel() // (24 * 256) >= 300 and case.kwargs["token_indices"].shape[-1] >= 100:
            break
    else:
        pytest.fail("no prefill-sized case (>= 300 rows, width >= 100) in 50 draws")
    ids = case.kwargs["token_indices"]
    flat = ids.view(-1, ids.shape[-1])
    r = 4
    for g in range(0, flat.shape[0] // r, 2):  # every other group: its rows select what its first row selects
        flat[g * r + 1 : g * r + r] = flat[g * r]
    case = case.to("cuda")
    native, ref = _plans(case)
    sched = sparse_launch.schedule_for(native)
    assert sched.union_rows == r, sched
    _, nu, _ = prepare_union(native, r, "fused")
    # Threshold at the median union size, so that both kernels get groups whatever the draw.
    limit = int(nu.float().median().item())
    monkeypatch.setattr(sparse_launch, "UNION_MAX_FILL", (limit + 0.5) / (r * flat.shape[1]))
    assert (nu <= limit).any() and (nu > limit).any(), nu
    sparse_attention(native)
    _check(native, ref, case)


def test_mixed_batch_default_union(gen: torch.Generator, monkeypatch) -> None:
    """Default rule, a 300-row prefill chunk among decode rows: the fused prep measures only the
    chunk's groups (decode groups get NU = UNMEASURED, no union work) and the call is correct."""
    from mate_kernels_musa import sparse_attention, sparse_launch
    from mate_kernels_musa.sparse_union import prepare_union
    from mate_kernels_musa.sparse_union_fused_kernel import UNMEASURED

    monkeypatch.delenv(sparse_launch.UNION_ENV, raising=False)
    case, in_chunk = cases.mixed_batch(gen, 300, 411)
    case = case.to("cuda")
    native, ref = _plans(case)
    assert sparse_launch.schedule_for(native).union_rows == 4
    max_nu = int(sparse_launch.UNION_MAX_FILL * 4 * 411)
    _, nu, _ = prepare_union(native, 4, "fused", max_nu=max_nu, min_rows=sparse_launch.union_min_rows())
    assert [int(n) != UNMEASURED for n in nu] == in_chunk, (nu.tolist(), in_chunk)
    assert (nu[torch.tensor(in_chunk, device="cuda")] <= max_nu).all(), "no chunk group takes the union"
    sparse_attention(native)
    _check(native, ref, case)


def test_decode_canonical_width(gen: torch.Generator) -> None:
    """64 decode rows, 2051-slot QSA selections, every split count."""
    for splits in cases.SPLITS:
        case = cases.random_case(gen, max_rows=64, canonical=True, width=2051, num_splits=splits,
                                 query_kind="cu", bad_pages=False)  # fmt: skip
        _run_case(case)


@pytest.mark.parametrize("query_kind", ["cu", "t2r", "padded"])
def test_pipeline_modes(query_kind: str, gen: torch.Generator) -> None:
    """Both gather pipelines (one per split / one per chunk) on selections of several 512-slot chunks."""
    from mate_kernels_musa.sparse_launch import sparse_attention
    from mate_kernels_musa.sparse_schedule import W4, Schedule

    width = 1500 + int(torch.randint(0, 552, (1,), generator=gen))
    case = cases.random_case(gen, max_rows=40, max_width=2051, width=width, query_kind=query_kind,
                             num_splits=None).to("cuda")  # fmt: skip
    case.kwargs["return_lse"] = True  # every schedule's LSE is compared too
    native, ref = _plans(case)
    for splits in (1, 3):
        for one_pipe in (True, False):
            checks.poison(native)
            sparse_attention(native, Schedule(W4, splits, one_pipe=one_pipe))
            _check(native, ref, case)


@pytest.mark.parametrize("num_splits", [1, None])
def test_padded_kv(num_splits: int | None, gen: torch.Generator) -> None:
    """Padded [R, S, Hkv, D] K/V with a padded query runs as one page per request; ``None``
    may split it (only an explicit count above 1 is rejected with padded K/V)."""
    from mate_kernels_musa import sparse_attention, sparse_launch

    b, q, s, t = 3, 5, 200, 300  # 300 slots: None picks 4 splits (at least 64 slots each)
    ids = torch.randint(-1, s + 20, (b, q, t), generator=gen, dtype=torch.int32)
    kwargs = {
        "query": torch.randn(b, q, 24, 256, generator=gen).to(torch.bfloat16),
        "key": torch.randn(b, s, 2, 256, generator=gen).to(torch.bfloat16),
        "value": torch.randn(b, s, 2, 256, generator=gen).to(torch.bfloat16),
        "token_indices": ids,
        "seq_lens_k": torch.tensor([200, 150, 17], dtype=torch.int32),
        "num_splits": num_splits,
        "return_lse": True,
    }
    case = cases.Case(kwargs).to("cuda")
    native, ref = _plans(case)
    assert (sparse_launch.schedule_for(native).splits > 1) == (num_splits is None)
    sparse_attention(native)
    _check(native, ref, case)
    # [B, Q] positions sliced from a wider table (no [rows] view without a copy): the launcher flattens them.
    table = torch.randint(0, s + 10, (b, q + 4), generator=gen, dtype=torch.int32).cuda()
    case = cases.Case({**case.kwargs, "query_positions": table[:, 2 : q + 2]})
    native, ref = _plans(case)
    assert native.query_positions.shape == (b, q)
    sparse_attention(native)
    _check(native, ref, case)


@pytest.mark.parametrize("kv", ["paged", "padded"])
def test_padded_query_with_no_rows(kv: str, gen: torch.Generator) -> None:
    """A padded query [B, 0, Hq, D] through the public call: empty out and LSE, no launch, no error."""
    import mate

    b, t = 3, 40
    kw = {"query": torch.randn(b, 0, 24, 256, device="cuda", dtype=torch.bfloat16),
          "token_indices": torch.zeros(b, 0, t, dtype=torch.int32, device="cuda"), "return_lse": True}  # fmt: skip
    if kv == "paged":
        kv_shape = (8, 64, 2, 256)
        kw["block_table"] = torch.randint(0, 8, (b, 2), generator=gen, dtype=torch.int32).cuda()
    else:
        kv_shape = (b, 128, 2, 256)
    kw["key"] = torch.randn(kv_shape, device="cuda", dtype=torch.bfloat16)
    kw["value"] = torch.randn(kv_shape, device="cuda", dtype=torch.bfloat16)
    out, lse = mate.qsa_sparse_attention(**kw)
    assert out.shape == (b, 0, 24, 256) and lse.shape == (b, 0, 24)


@pytest.mark.parametrize("query_kind", ["cu", "t2r", "padded"])
def test_cuda_graph_replay_new_metadata(query_kind: str, gen: torch.Generator) -> None:
    """Capture after warm-up, then replay with new data and metadata values in the same tensors."""
    from mate_kernels_musa import sparse_attention

    checks.check_graph_replay(checks.graph_case(gen, query_kind, num_splits=None), sparse_attention)


def test_bitwise_deterministic(gen: torch.Generator) -> None:
    from mate_kernels_musa import sparse_attention

    case = cases.random_case(gen, max_rows=256, max_width=2051, canonical=True, num_splits=None).to("cuda")
    native, _ = _plans(case)
    sparse_attention(native)
    checks.assert_rerun_bitwise(native, sparse_attention)


@pytest.mark.parametrize("index", range(4))
def test_memcheck_invalid_pages(index: int, gen: torch.Generator) -> None:
    """Small cases with -1 / out-of-range pages and ids past the cache (run under memcheck); four splits
    take the group build (``sparse_groups``)."""
    case = cases.random_case(gen, max_rows=8, max_width=100, bad_pages=True, num_splits=[None, 1, 4, 7][index])
    _run_case(case)


@pytest.mark.parametrize("out_kind", cases.OUT_KINDS)
def test_memcheck_group_out_views(out_kind: str, gen: torch.Generator) -> None:
    """The group build's in-CTA merge (four splits, ``sparse_groups``) into each kind of ``out``, storage
    around it untouched (run under memcheck)."""
    case = cases.random_case(gen, max_rows=8, max_width=100, bad_pages=True, num_splits=4, out_kind=out_kind)
    _run_case(case)


@pytest.mark.parametrize("out_kind", cases.OUT_KINDS)
def test_memcheck_direct_out_views(out_kind: str, gen: torch.Generator) -> None:
    """The one-split epilogue into each kind of ``out`` (whole 16-byte rows through the flat view, or
    element stores where the view has none), storage around it untouched (run under memcheck)."""
    case = cases.random_case(gen, max_rows=8, max_width=100, bad_pages=True, num_splits=1, out_kind=out_kind)
    _run_case(case)
