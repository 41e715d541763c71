"""Checks shared by the native sparse-attention GPU tests: native plan vs the FP32 reference.

Registered as ``mate_kernels_musa_tests_sparse_checks`` by ``conftest.py`` (the suite uses
``--import-mode=importlib``, so helpers next to the tests are not importable by file name).
"""

from __future__ import annotations

import math

import mate_kernels_musa_tests_sparse_cases as cases  # registered by conftest.py
import torch

REL_L2 = 1e-2
LSE_TOL = 1e-2
# Per (row, head) vector of D = 256 features, the spec's bound applied to each: on the H200
# (session 17, 39 random draws, 170k vectors, bf16 and fp16, up to 4096 rows x 2051 slots, peaked
# softmax) the largest was 4.7e-3 in bf16 (p99 3.1e-3-3.8e-3 per draw) and 6.1e-4 in fp16.
ROW_REL_L2 = 1e-2


def reference(case):
    """The reference plan of ``case`` (own buffers, LSE always on), already run."""
    from mate_core import plan_sparse_attention
    from mate_reference import sparse_attention as run_reference

    ref_kwargs = {k: v for k, v in case.kwargs.items() if k not in ("out", "lse", "return_lse")}
    ref = plan_sparse_attention(**ref_kwargs, return_lse=True, backend="reference")
    run_reference(ref)
    return ref


def poison(native) -> None:
    """NaN-fill the native plan's outputs (out, and lse where bound) before a call, so that a
    call that leaves any of them unwritten fails the comparison instead of showing old values."""
    native.out.fill_(float("nan"))
    if native.lse is not None:
        native.lse.fill_(float("nan"))


def assert_rerun_bitwise(native, run) -> None:
    """After a call into ``native``, rerun ``run(native)`` into NaN-poisoned outputs: ``out`` (and the
    LSE, when bound) must come back bitwise equal."""
    first = native.out_result.clone()
    first_lse = None if native.lse is None else native.lse.clone()
    poison(native)
    run(native)
    torch.cuda.synchronize()
    assert torch.equal(first, native.out_result)
    assert first_lse is None or torch.equal(first_lse, native.lse)


def plans(case):
    """(native plan with NaN-poisoned outputs, reference plan already run)."""
    from mate_core import plan_sparse_attention

    native = plan_sparse_attention(**case.kwargs, backend="tilelang")
    poison(native)
    return native, reference(case)


def assert_out_close(out: torch.Tensor, want: torch.Tensor, notes: object = "") -> None:
    """``out`` within ``REL_L2`` of the reference output as a whole and ``ROW_REL_L2`` per (row, head)."""
    err = cases.rel_l2(out.float(), want.float())
    assert err < REL_L2, f"rel L2 {err:.3e}: {notes}"
    row_err = cases.rel_l2_rows(out.float(), want.float())
    assert row_err < ROW_REL_L2, f"rel L2 {row_err:.3e} on one (row, head): {notes}"


def check(native, ref, case) -> None:
    """Output fully written, within ``REL_L2`` as a whole and ``ROW_REL_L2`` per (row, head);
    empty rows zero; LSE within ``LSE_TOL``; no write outside ``out``."""
    torch.cuda.synchronize()
    out = native.out_result
    assert not torch.isnan(out).any(), f"NaN left in out: {case.notes}"
    assert_out_close(out, ref.out_result, case.notes)
    empty = ref.lse_result == -math.inf
    assert torch.equal(out[empty], torch.zeros_like(out[empty])), f"empty rows not zero: {case.notes}"
    if native.lse is not None:
        lerr = cases.lse_error(native.lse, ref.lse)
        assert lerr < LSE_TOL, f"LSE error {lerr}: {case.notes}"
    if case.out_base is not None:
        outside = torch.ones_like(case.out_base, dtype=torch.bool)
        outside.as_strided(out.shape, out.stride(), out.storage_offset()).fill_(False)
        assert torch.isnan(case.out_base[outside].float()).all(), f"storage around out was written: {case.notes}"


def run_case(case):
    """Move ``case`` to the GPU, run the native backend and ``check`` it; returns the native plan."""
    from mate_kernels_musa import sparse_attention

    case = case.to("cuda")
    native, ref = plans(case)
    sparse_attention(native)
    check(native, ref, case)
    return native


def graph_case(gen, query_kind, **kwargs):
    """A small case for the CUDA-graph tests, on the GPU: no ``out`` view, LSE returned."""
    case = cases.random_case(gen, max_rows=40, max_width=260, query_kind=query_kind, **kwargs)
    case.drop_out_view()
    case.kwargs["return_lse"] = True
    return case.to("cuda")


def check_graph_replay(case, run, draw_ids=None, before_replay=None):
    """Capture ``run(native)`` after a warm-up, then replay it twice with new data, ids, page
    mapping and lengths written into the captured tensors, and ``check`` each replay.

    ``draw_ids(shape, cap)`` draws the new ids (default: uniform in ``[-1, cap)``);
    ``before_replay(native)`` runs after they are written, before the replay."""
    native, _ = plans(case)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run(native)  # warm-up: compiles/loads kernels, creates placeholders
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run(native)
    kw = case.kwargs
    cap = kw["block_table"].shape[1] * kw["key"].shape[1]
    for _ in range(2):
        for name in ("query", "key", "value"):
            kw[name].copy_(torch.randn(kw[name].shape, device="cuda").to(kw[name].dtype))
        shape = kw["token_indices"].shape
        ids = draw_ids(shape, cap) if draw_ids else torch.randint(-1, cap, shape, device="cuda", dtype=torch.int32)
        kw["token_indices"].copy_(ids)
        perm = torch.randperm(kw["key"].shape[0], device="cuda")[: kw["block_table"].numel()]
        kw["block_table"].copy_(perm.view_as(kw["block_table"]).to(torch.int32))
        if "seq_lens_k" in kw:
            kw["seq_lens_k"].copy_(torch.randint(1, cap + 1, kw["seq_lens_k"].shape, device="cuda", dtype=torch.int32))
        if before_replay is not None:
            before_replay(native)
        native.out.fill_(float("nan"))
        native.lse.fill_(float("nan"))
        graph.replay()
        check(native, reference(case), case)
