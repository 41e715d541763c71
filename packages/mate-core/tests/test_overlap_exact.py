"""check_no_overlap decides overlap exactly from metadata: disjoint interleaved views pass, shared bytes fail.

The exact test (checks._strided_overlap) is compared with brute force, the set of
byte addresses each view touches, on random small views of one storage.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mate_core import MateValueError, checks, plan_sparse_attention
from mate_core.checks import _strided_overlap, check_no_overlap

sys.path.insert(0, str(Path(__file__).parent))  # shared case builders live next to this file
from test_validate_sparse_cases import sparse_call

ROWS, H, D = 6, 4, 8


def _overlap(a: torch.Tensor, b: torch.Tensor, budget: int | None = None) -> bool | None:
    return _strided_overlap(
        a.data_ptr(),
        a.shape,
        a.stride(),
        a.element_size(),
        b.data_ptr(),
        b.shape,
        b.stride(),
        b.element_size(),
        budget,
    )


def _bytes(ptr: int, shape, stride, itemsize: int) -> set[int]:
    """Every byte address a strided view touches, enumerated from its indices."""
    touched: set[int] = set()
    for index in itertools.product(*(range(n) for n in shape)):
        start = ptr + sum(i * s for i, s in zip(index, stride)) * itemsize
        touched.update(range(start, start + itemsize))
    return touched


def _tensor_bytes(t: torch.Tensor) -> set[int]:
    return _bytes(t.data_ptr(), t.shape, t.stride(), t.element_size())


# --- (a) disjoint interleaved views are accepted ---------------------------------------------


def test_interleaved_halves_query_out_accepted():
    ws = torch.empty(ROWS, H, 2 * D)
    query, out = ws[..., :D], ws[..., D:]
    assert _overlap(out, query) is False
    check_no_overlap("out", out, {"query": query})
    check_no_overlap("out", query, {"query": out})  # either half as the output


def test_interleaved_halves_gate_out_mixed_dtypes_accepted():
    """FP32 gate and BF16 out interleaved in one byte buffer: 4*D bytes of gate, then 2*D of out per row."""
    raw = torch.empty(ROWS, H, 6 * D, dtype=torch.uint8)
    gate = raw[..., : 4 * D].view(torch.float32)
    out = raw[..., 4 * D :].view(torch.bfloat16)
    assert gate.shape == out.shape == (ROWS, H, D)
    assert gate.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()
    assert _overlap(out, gate) is False
    check_no_overlap("out", out, {"gate": gate})


def test_interleaved_with_gap_and_element_steps_accepted():
    """Even/odd elements of one vector, and every other row of one matrix."""
    base = torch.empty(64)
    check_no_overlap("out", base[0::2], {"query": base[1::2]})
    mat = torch.empty(8, 16)
    check_no_overlap("out", mat[0::2], {"query": mat[1::2]})
    check_no_overlap("out", mat[:, :8], {"query": mat[:, 8:], "key": mat[:, 8:].t()})


def test_plan_accepts_interleaved_workspace_views():
    """End to end: query/out halves of one workspace, then FP32 gate / BF16 out halves of one byte buffer."""
    gen = torch.Generator().manual_seed(0)
    args = sparse_call(gen)
    shape = args["query"].shape
    ws = torch.randn(*shape[:-1], 2 * shape[-1], generator=gen)
    args["query"], args["out"] = ws[..., : shape[-1]], ws[..., shape[-1] :]
    plan_sparse_attention(**args)

    args = sparse_call(gen, dtype=torch.bfloat16)
    shape = args["query"].shape
    raw = torch.zeros(*shape[:-1], 6 * shape[-1], dtype=torch.uint8)
    args["gate"] = raw[..., : 4 * shape[-1]].view(torch.float32)
    args["out"] = raw[..., 4 * shape[-1] :].view(torch.bfloat16)
    plan_sparse_attention(**args)


# --- (b) real overlaps are rejected --------------------------------------------------------------


def _overlapping_pairs():
    base = torch.empty(ROWS, H, D)
    flat = torch.empty(64)
    square = torch.empty(8, 8)
    raw = torch.empty(64, dtype=torch.uint8)
    ws = torch.empty(ROWS, H, 2 * D)
    return {
        "same-tensor": (base, base),
        "shifted-by-one-element": (flat[1:33], flat[:32]),
        "transposed-same-storage": (square, square.t()),
        "transposed-strided-halves": (square[:, :4], square.t()[:, :4]),
        "one-shared-element-at-end": (flat[:32], flat[31:40]),
        "one-shared-byte-mixed-dtypes": (raw[:16].view(torch.float32), raw[15:17]),
        "halves-off-by-one": (ws[..., : D + 1], ws[..., D:]),
        "strided-hits-last-row": (flat[0:64:9], flat[63:64]),
    }


@pytest.mark.parametrize("case", list(_overlapping_pairs()))
def test_real_overlap_rejected(case):
    out, other = _overlapping_pairs()[case]
    assert _overlap(out, other) is True
    assert _overlap(other, out) is True
    with pytest.raises(
        MateValueError,
        match=r"^out: its memory overlaps query; native paths bind out directly and "
        r"reject input/output overlap\. Pass a separate buffer",
    ):
        check_no_overlap("out", out, {"query": other})


def test_plan_still_rejects_gate_out_overlap_in_one_buffer():
    gen = torch.Generator().manual_seed(0)
    args = sparse_call(gen, dtype=torch.bfloat16)
    shape = args["query"].shape
    raw = torch.zeros(*shape[:-1], 6 * shape[-1], dtype=torch.uint8)
    args["gate"] = raw[..., : 4 * shape[-1]].view(torch.float32)
    args["out"] = raw[..., 4 * shape[-1] - 2 : 6 * shape[-1] - 2].view(torch.bfloat16)  # one BF16 into the gate
    with pytest.raises(MateValueError, match=r"^out: its memory overlaps gate"):
        plan_sparse_attention(**args)


def test_budget_exhausted_rejects_conservatively(monkeypatch):
    ws = torch.empty(ROWS, H, 2 * D)
    query, out = ws[..., :D], ws[..., D:]
    assert _overlap(out, query, budget=1) is None
    monkeypatch.setattr(checks, "_OVERLAP_SEARCH_BUDGET", 1)
    with pytest.raises(MateValueError, match=r"^out: its memory could not be proven disjoint from query") as info:
        check_no_overlap("out", out, {"query": query})
    assert "Pass separate buffers for out and query" in str(info.value)


def test_large_nested_layouts_decided_within_a_small_budget():
    """Metadata only: workspace-sized views (no allocation) resolve with a handful of nodes."""
    rows, heads, dim, isz = 1 << 16, 64, 256, 2
    stride = (heads * 2 * dim, 2 * dim, 1)
    shape = (rows, heads, dim)
    ptr = 1 << 40
    assert _strided_overlap(ptr, shape, stride, isz, ptr + dim * isz, shape, stride, isz, budget=64) is False
    assert _strided_overlap(ptr, shape, stride, isz, ptr + (dim - 1) * isz, shape, stride, isz, budget=64) is True
    last_row = ptr + (rows - 1) * stride[0] * isz + dim * isz
    assert _strided_overlap(ptr, shape, stride, isz, last_row, (1,), (1,), isz, budget=64) is False
    assert _strided_overlap(ptr, shape, stride, isz, last_row - isz, (1,), (1,), isz, budget=64) is True


# --- (c) property tests against brute force ------------------------------------------------------

DTYPES = (torch.uint8, torch.bfloat16, torch.float32)


@st.composite
def _view(draw, base: torch.Tensor) -> torch.Tensor:
    """A random in-bounds strided view (rank 1-3, dtype of size 1/2/4) of the uint8 ``base``."""
    typed = base.view(draw(st.sampled_from(DTYPES)))
    numel = typed.numel()
    offset = draw(st.integers(0, numel - 1))
    room = numel - 1 - offset  # elements still free past the view's last one
    shape, stride = [], []
    for _ in range(draw(st.integers(1, 3))):
        s = draw(st.integers(1, max(1, min(room, 48))))
        n = draw(st.integers(1, min(8, 1 + room // s)))
        room -= (n - 1) * s
        shape.append(n)
        stride.append(s)
    return torch.as_strided(typed, shape, stride, offset)


@st.composite
def _view_pair(draw):
    base = torch.empty(draw(st.integers(16, 128)) * 4, dtype=torch.uint8)
    return draw(_view(base)), draw(_view(base))


@settings(max_examples=300, deadline=None)
@given(_view_pair())
def test_matches_brute_force_on_torch_views(pair):
    a, b = pair
    expected = bool(_tensor_bytes(a) & _tensor_bytes(b))
    got = _overlap(a, b)
    assert got is not None, "gave up on a small case"
    assert got == expected
    assert _overlap(b, a) == expected
    if expected:
        with pytest.raises(MateValueError, match=r"^out: its memory overlaps query"):
            check_no_overlap("out", a, {"query": b})
    else:
        check_no_overlap("out", a, {"query": b})


_axes = st.lists(st.tuples(st.integers(1, 6), st.integers(-40, 40)), min_size=0, max_size=3)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 300),
    _axes,
    st.sampled_from((1, 2, 3, 4, 8)),
    st.integers(0, 300),
    _axes,
    st.sampled_from((1, 2, 3, 4, 8)),
)
def test_matches_brute_force_on_raw_metadata(ptr_a, axes_a, isa, ptr_b, axes_b, isb):
    """Unaligned byte pointers, odd item sizes, zero and negative strides: beyond what torch makes."""
    shape_a, stride_a = [n for n, _ in axes_a], [s for _, s in axes_a]
    shape_b, stride_b = [n for n, _ in axes_b], [s for _, s in axes_b]
    expected = bool(_bytes(ptr_a, shape_a, stride_a, isa) & _bytes(ptr_b, shape_b, stride_b, isb))
    got = _strided_overlap(ptr_a, shape_a, stride_a, isa, ptr_b, shape_b, stride_b, isb)
    assert got is not None, "gave up on a small case"
    assert got == expected
