"""Native sparse attention beyond the paged core, on the H200 against the FP32 reference (marker ``gpu``).

* physical ids (``selected_kv_indices`` into ``[N, Hkv, D]``): random calls with masked,
  duplicated and out-of-range ids and empty rows; bitwise agreement with the paged path
  on translated selections; ``lse=`` written without ``return_lse``; CUDA-graph capture
  of the public call with new ids and data on replay;
* calls with nothing to read (T = 0, N = 0, no pages) -> zeros and LSE -inf;
* padded (contiguous) ``[B, S, Hkv, D]`` K/V with padded queries, ``num_splits`` None/1;
* head geometry: every GQA group 1..16 (Hkv 1..16) in BF16 and FP16 on the paged
  unsplit, paged SplitKV and padded-K/V paths, and a tensor-parallel shard check (24/2
  split into 8 shards of 3/1 reproduces the unsharded rows);
* strided views at odd storage offsets for every input, and K/V caches past 2^31
  elements read at their far end (reference on the selected rows only); the int64-offset
  kernel variant on ordinary caches;
* a device's first call captured in a CUDA graph raises (warm up first) and caches nothing.

Outputs are NaN-poisoned before each call; ``sparse_checks.check`` compares with the reference.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import mate_kernels_musa_tests_gpu_specializations as gpu_specs  # registered by conftest.py
import mate_kernels_musa_tests_sparse_checks as checks  # registered by conftest.py
import pytest
import torch

pytestmark = pytest.mark.gpu

cases = checks.cases

# (Hq, Hkv) covering every group 1..16 once, plus wider KV head counts.
GEOMETRIES = [(1, 1), (4, 2), (3, 1), (8, 2), (5, 1), (12, 2), (14, 2), (16, 2), (9, 1), (20, 2), (11, 1),
              (24, 2), (26, 2), (14, 1), (30, 2), (32, 2), (16, 16), (32, 8)]  # fmt: skip
PHYSICAL_GEOMETRIES = [(24, 2), (3, 1), (16, 1), (8, 2)]


# ---------------------------------------------------------------- physical path


@pytest.mark.parametrize("index", range(12))
def test_physical_random(index: int, gen: torch.Generator) -> None:
    hq, hkv = PHYSICAL_GEOMETRIES[index % len(PHYSICAL_GEOMETRIES)]
    big = index >= 9  # up to 2051-slot selections over up to 600 rows
    checks.run_case(cases.physical_case(gen, max_rows=600 if big else 64, max_width=2051 if big else 300,
                                        hq=hq, hkv=hkv, views=index % 3 == 2))  # fmt: skip


def _physical_ids(plan) -> torch.Tensor:
    """The paged plan's selection as physical rows of ``key.view(-1, Hkv, D)``; unused slots -1."""
    from mate_reference._gather import _paged_index
    from mate_reference._rows import resolve_rows

    tokens = plan.token_indices.long()
    (page, slot), used = _paged_index(plan, tokens, resolve_rows(plan), slice(None))
    return torch.where(used, page * plan.page_size + slot, torch.full_like(tokens, -1)).to(torch.int32)


@pytest.mark.parametrize("num_splits", [None, 1, 3])
def test_physical_matches_paged_bitwise(num_splits, gen: torch.Generator) -> None:
    """Translated to physical rows, a paged selection gives bitwise the paged output and LSE."""
    from mate_core import plan_sparse_attention
    from mate_kernels_musa import sparse_attention

    case = cases.random_case(gen, max_rows=48, max_width=600, query_kind="cu", num_splits=num_splits).to("cuda")
    kw = {k: v for k, v in case.kwargs.items() if k not in ("gate", "out", "lse", "return_lse")}
    paged = plan_sparse_attention(**kw, return_lse=True)
    sparse_attention(paged)
    key, value = kw["key"], kw["value"]
    physical = plan_sparse_attention(kw["query"], key.view(-1, *key.shape[2:]), value.view(-1, *value.shape[2:]),
                                     selected_kv_indices=_physical_ids(paged), scale=kw["scale"],
                                     num_splits=num_splits, return_lse=True)  # fmt: skip
    physical.out.fill_(float("nan"))
    sparse_attention(physical)
    torch.cuda.synchronize()
    assert torch.equal(physical.out, paged.out), case.notes
    assert torch.equal(physical.lse, paged.lse), case.notes


def test_physical_lse_buffer_without_return_lse(gen: torch.Generator) -> None:
    """The public call returns ``out`` itself and still writes the supplied ``lse`` buffer."""
    import mate

    case = cases.physical_case(gen, max_rows=32, max_width=200, num_splits=None).to("cuda")
    kw = {k: v for k, v in case.kwargs.items() if k not in ("out", "lse", "return_lse")}
    rows, hq, dim = kw["query"].shape
    out = torch.full((rows, hq, dim), float("nan"), dtype=torch.bfloat16, device=kw["query"].device)
    lse = torch.full((rows, hq), float("nan"), device=kw["query"].device)
    result = mate.qsa_sparse_attention(**kw, out=out, lse=lse)
    assert result is out
    ref = checks.reference(case)
    checks.assert_out_close(out, ref.out_result)
    assert cases.lse_error(lse, ref.lse_result) < checks.LSE_TOL


def test_physical_cuda_graph_replay(gen: torch.Generator) -> None:
    """The public physical call, captured after warm-up, replays with new ids and data in the same tensors."""
    import mate

    case = cases.physical_case(gen, max_rows=40, max_width=260, num_splits=None, width=200).to("cuda")
    kw = {k: v for k, v in case.kwargs.items() if k not in ("out", "lse", "return_lse")}
    rows, hq, dim = kw["query"].shape
    out = torch.empty((rows, hq, dim), dtype=torch.bfloat16, device="cuda")
    lse = torch.empty((rows, hq), device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        mate.qsa_sparse_attention(**kw, out=out, lse=lse)  # warm-up: compiles/loads kernels
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mate.qsa_sparse_attention(**kw, out=out, lse=lse)
    n_kv = kw["key"].shape[0]
    for _ in range(2):
        for name in ("query", "key", "value"):
            kw[name].copy_(torch.randn(kw[name].shape, device="cuda").to(kw[name].dtype))
        ids = torch.randint(-2, n_kv + 2, kw["selected_kv_indices"].shape, device="cuda", dtype=torch.int32)
        ids[0] = -1  # one empty row
        kw["selected_kv_indices"].copy_(ids)
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = checks.reference(case)
        checks.assert_out_close(out, ref.out_result)
        assert cases.lse_error(lse, ref.lse_result) < checks.LSE_TOL
        assert torch.equal(out[0], torch.zeros_like(out[0]))


# ---------------------------------------------------------------- empty calls


def _empty_case(kind: str, gen: torch.Generator) -> cases.Case:
    if kind.startswith("physical"):
        case = cases.physical_case(gen, max_rows=8, max_width=40, width=0 if kind == "physical_t0" else None)
        if kind == "physical_n0":
            case.kwargs["key"] = case.kwargs["key"][:0]
            case.kwargs["value"] = case.kwargs["value"][:0]
        return case
    case = cases.random_case(gen, max_rows=8, max_width=40, query_kind="cu", width=0 if kind == "paged_t0" else None)
    if kind == "paged_no_pages":
        case.kwargs["block_table"] = case.kwargs["block_table"][:, :0]
    return case


@pytest.mark.parametrize("kind", ["physical_t0", "physical_n0", "paged_t0", "paged_no_pages"])
def test_empty_calls(kind: str, gen: torch.Generator) -> None:
    """Nothing to read: every output element zero (whatever the gate), LSE -inf."""
    native = checks.run_case(_empty_case(kind, gen))
    assert torch.equal(native.out_result, torch.zeros_like(native.out_result))
    if native.lse is not None:
        assert bool((native.lse == -math.inf).all())


# ---------------------------------------------------------------- padded K/V, geometry, views


@pytest.mark.parametrize("index", range(8))
def test_padded_kv_random(index: int, gen: torch.Generator) -> None:
    """Contiguous [B, S, Hkv, D] K/V with padded queries, num_splits None/1, BF16 and FP16."""
    dtype = torch.float16 if index % 2 else torch.bfloat16
    checks.run_case(cases.random_case(gen, max_rows=96 if index < 6 else 1024, max_width=300 if index < 6 else 2051,
                                      kv="padded", dtype=dtype))  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize(("hq", "hkv"), GEOMETRIES, ids=[f"{a}x{b}" for a, b in GEOMETRIES])
def test_head_geometry(hq: int, hkv: int, dtype: torch.dtype, gen: torch.Generator) -> None:
    """Paged unsplit, paged SplitKV and padded K/V for one (Hq, Hkv, dtype)."""
    for kv, splits in (("paged", 1), ("paged", 3), ("padded", None)):
        checks.run_case(cases.random_case(gen, max_rows=24, max_width=160, hq=hq, hkv=hkv, dtype=dtype, kv=kv,
                                          num_splits=splits))  # fmt: skip


def _shard(kwargs: dict, i: int, shards: int) -> dict:
    """Shard ``i`` of ``shards``: its Q heads and their one KV head, as head-slice views (no copies)."""
    q, gate = kwargs["query"], kwargs.get("gate")
    hq, hkv = q.shape[-2], kwargs["key"].shape[-2]
    per = hq // shards
    qs = slice(i * per, (i + 1) * per)
    kvh = i * per // (hq // hkv)
    shard = {k: v for k, v in kwargs.items() if k not in ("out", "lse")}
    shard["query"] = q[..., qs, :]
    shard["key"] = kwargs["key"][..., kvh : kvh + 1, :]
    shard["value"] = kwargs["value"][..., kvh : kvh + 1, :]
    if gate is not None:
        shard["gate"] = gate[..., qs] if gate.dim() == q.dim() - 1 else gate[..., qs, :]
    shard["return_lse"] = True
    return shard


@pytest.mark.parametrize(("num_splits", "query_kind"), [(1, "cu"), (3, "padded"), (2, "t2r")])
def test_tensor_parallel_shards(num_splits: int, query_kind: str, gen: torch.Generator) -> None:
    """24/2 heads split into 8 shards of 3/1 (head-slice views) give the unsharded call's rows."""
    from mate_core import plan_sparse_attention
    from mate_kernels_musa import sparse_attention

    case = cases.random_case(gen, max_rows=64, max_width=600, query_kind=query_kind, num_splits=num_splits).to("cuda")
    full_kw = {k: v for k, v in case.kwargs.items() if k not in ("out", "lse", "return_lse")}
    full = plan_sparse_attention(**full_kw, return_lse=True)
    sparse_attention(full)
    ref = checks.reference(case)
    for i in range(8):
        shard = plan_sparse_attention(**_shard(case.kwargs, i, 8))
        shard.out.fill_(float("nan"))
        sparse_attention(shard)
        torch.cuda.synchronize()
        heads = slice(3 * i, 3 * i + 3)
        assert cases.rel_l2(shard.out.float(), full.out[:, heads].float()) < 1e-3, (i, case.notes)
        assert cases.lse_error(shard.lse, full.lse[:, heads]) < 1e-4, (i, case.notes)
        checks.assert_out_close(shard.out, ref.out[:, heads], (i, case.notes))


@pytest.mark.parametrize("index", range(9))
def test_strided_views(index: int, gen: torch.Generator) -> None:
    """Q, K, V, indices, metadata, gate, out (and lse) as strided views at odd storage offsets."""
    kind = ["paged", "padded", "physical"][index % 3]
    if kind == "physical":
        case = cases.physical_case(gen, max_rows=48, max_width=300, views=True)
    else:
        dtype = torch.float16 if index % 2 else torch.bfloat16
        case = cases.random_case(gen, max_rows=48, max_width=300, kv=kind, views=True, dtype=dtype)
    checks.run_case(case)


def test_query_and_out_interleaved_in_one_workspace(gen: torch.Generator) -> None:
    """Query and out as the two halves of one [rows, Hq, 2 * D] workspace (no shared element, so
    the overlap check accepts them); out matches the reference and the query half is untouched."""
    import mate

    case = cases.random_case(gen, max_rows=40, max_width=200, query_kind="cu", num_splits=None).to("cuda")
    kw = {k: v for k, v in case.kwargs.items() if k not in ("out", "lse", "gate", "return_lse")}
    rows, hq, dim = kw["query"].shape
    ws = torch.full((rows, hq, 2 * dim), float("nan"), dtype=kw["query"].dtype, device="cuda")
    ws[..., :dim] = kw["query"]
    query, out = ws[..., :dim], ws[..., dim:]
    got = mate.qsa_sparse_attention(**{**kw, "query": query}, out=out)
    assert got is out and torch.equal(ws[..., :dim], kw["query"])  # the query half is untouched
    ref = checks.reference(cases.Case(kw))
    checks.assert_out_close(out, ref.out_result)


# ---------------------------------------------------------------- offsets past int32


def _far_cache(key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """NaN-filled K and V views ``[P, *key.shape[1:]]`` spanning > 2^31 elements, ``key.shape[0]`` rows at the end.

    The views skip the first of ``Hkv + 1`` heads (storage offset D, wider slot stride).
    Returns (big key view, big value view, first far row).
    """
    row = math.prod(key.shape[1:-2]) * (key.shape[-2] + 1) * key.shape[-1]
    n = (2**31 + row - 1) // row + key.shape[0] + 8
    shape = (n, *key.shape[1:-2], key.shape[-2] + 1, key.shape[-1])
    views = [torch.full(shape, float("nan"), dtype=key.dtype, device=key.device)[..., 1:, :] for _ in range(2)]
    first = n - key.shape[0]
    assert views[0][first:].storage_offset() >= 2**31
    return views[0], views[1], first


def test_paged_cache_past_int32_elements(gen: torch.Generator) -> None:
    """A > 2^31-element paged cache, the selected pages at its far end (reference: the small cache)."""
    from mate_core import plan_sparse_attention
    from mate_kernels_musa import sparse_attention

    case = cases.random_case(gen, max_rows=40, max_width=400, query_kind="cu", num_splits=None).to("cuda")
    kw = case.kwargs
    big_k, big_v, first = _far_cache(kw["key"])
    big_k[first:].copy_(kw["key"])
    big_v[first:].copy_(kw["value"])
    table = kw["block_table"]
    # -1 stays -1; out-of-range entries (>= pages of the small cache) stay out of range of the big one.
    far = torch.where(table >= 0, table + first, table)
    big_kw = {**{k: v for k, v in kw.items() if k not in ("out", "lse", "return_lse")},
              "key": big_k, "value": big_v, "block_table": far}  # fmt: skip
    native = plan_sparse_attention(**big_kw, return_lse=True)
    native.out.fill_(float("nan"))
    sparse_attention(native)
    checks.check(native, checks.reference(case), case)


def test_physical_cache_past_int32_elements(gen: torch.Generator) -> None:
    """Physical ids into > 2^31-element K/V, the used rows at the far end (reference: the small K/V)."""
    from mate_core import plan_sparse_attention
    from mate_kernels_musa import sparse_attention

    case = cases.physical_case(gen, max_rows=40, max_width=400, num_splits=None).to("cuda")
    kw = case.kwargs
    big_k, big_v, first = _far_cache(kw["key"])
    big_k[first:].copy_(kw["key"])
    big_v[first:].copy_(kw["value"])
    ids = kw["selected_kv_indices"]
    # Negative ids stay negative; ids >= N of the small K/V land past the end of the big one.
    far = torch.where(ids >= 0, ids + first, ids)
    assert int(far.max()) < 2**31
    native = plan_sparse_attention(kw["query"], big_k, big_v, selected_kv_indices=far,
                                   scale=kw.get("scale", kw.get("softmax_scale")), return_lse=True)  # fmt: skip
    native.out.fill_(float("nan"))
    sparse_attention(native)
    checks.check(native, checks.reference(case), case)


@pytest.mark.parametrize("index", range(4))
def test_wide_offset_variant(index: int, gen: torch.Generator, monkeypatch) -> None:
    """The int64-offset kernel (chosen for K/V spans >= 2^31 16-byte rows) forced on ordinary caches."""
    from mate_kernels_musa import sparse_launch

    monkeypatch.setattr(sparse_launch, "_INT32_LIMIT", 0)
    if index == 3:
        checks.run_case(cases.physical_case(gen, max_rows=32, max_width=300))
    else:
        checks.run_case(cases.random_case(gen, max_rows=48, max_width=300, kv="padded" if index == 2 else "paged"))


@pytest.mark.parametrize("num_splits", [2, 3, 7])
def test_l2_evict_first_changes_no_value(num_splits: int, gen: torch.Generator, monkeypatch) -> None:
    """Split builds gather K/V with an L2 evict-first policy: bitwise the output and LSE of the same build without it."""
    from mate_core import plan_sparse_attention
    from mate_kernels_musa import sparse_attention, sparse_launch

    width = int(torch.randint(1, 601, (1,), generator=gen))  # T > 0: the launcher builds the paged kernel
    case = cases.random_case(gen, max_rows=48, max_width=600, width=width, num_splits=num_splits).to("cuda")
    kw = {k: v for k, v in case.kwargs.items() if k not in ("out", "lse", "return_lse")}
    build, hints = sparse_launch.build, []

    def builder(strip: bool):
        def record(factory, profile, *consts):
            if factory.__name__ == "sparse_paged_kernel":
                plain = gpu_specs.without_l2_hint(factory, consts)
                hints.append(plain != consts)  # the launcher asked for the kv_evict_first build
                consts = plain if strip else consts
            return build(factory, profile, *consts)

        return record

    results = []
    for strip in (False, True):
        monkeypatch.setattr(sparse_launch, "build", builder(strip))
        plan = plan_sparse_attention(**kw, return_lse=True)
        plan.out.fill_(float("nan"))
        sparse_attention(plan)
        results.append((plan.out, plan.lse))
    torch.cuda.synchronize()
    assert hints == [True, True], case.notes
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1]), case.notes
    assert torch.isfinite(results[0][0]).all(), case.notes


@pytest.mark.parametrize("index", range(2))
def test_memcheck_physical_out_of_range(index: int, gen: torch.Generator) -> None:
    """Small physical calls with ids below 0 and past N, into views (run under memcheck)."""
    checks.run_case(cases.physical_case(gen, max_rows=6, max_width=64, num_splits=[None, 5][index], views=index == 1))


def test_first_call_inside_capture_raises() -> None:
    """A device's first call makes the launcher's placeholders: captured, it raises and caches nothing."""
    code = textwrap.dedent(
        """
        import torch
        from mate_core import GraphCaptureError
        from mate_kernels_musa import sparse_launch
        dev = torch.device("cuda", torch.cuda.current_device())
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                sparse_launch._dummies(dev)
        except GraphCaptureError as exc:
            assert "warm-up" in str(exc) and str(dev) in str(exc), exc
        else:
            raise SystemExit("no GraphCaptureError inside capture")
        table = sparse_launch._dummies(dev)["table"]  # eager: made and zeroed now
        assert int(table.abs().sum()) == 0
        print("OK")
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "OK" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]
