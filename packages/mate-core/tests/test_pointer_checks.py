"""check_plan_pointers: the pointer rules of validation, applied to a plan's real tensors.

Validation cannot apply these rules while torch.compile traces (fake tensors have no
addresses); the custom op applies them to each compiled call (the ``mate-qsa`` tests check that).
Here each rule is broken on a plan that passed validation, and must raise the same error
as the eager validation of the same input would.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch

from mate_core import (
    LayoutError,
    MateValueError,
    SparseAttentionPlan,
    plan_mqa_prefill,
    plan_sparse_attention,
    validate_sparse,
)
from mate_core.checks import VECTOR_LOAD_MESSAGE, describe
from mate_core.pointer_checks import SPARSE_INPUT_FIELDS, check_plan_pointers
from mate_core.validate_indexer import plan_indexer_score

sys.path.insert(0, str(Path(__file__).parent))  # shared case builders live next to this file
from test_validate_sparse_cases import misaligned, sparse_call


def _sparse_plan(gen: torch.Generator, **changes) -> SparseAttentionPlan:
    return plan_sparse_attention(**{**sparse_call(gen, dtype=torch.bfloat16), "return_lse": True, **changes})


def test_sparse_input_fields_are_every_input_tensor_of_the_plan() -> None:
    outputs = {"out", "lse", "out_result", "lse_result"}
    tensors = {f.name for f in dataclasses.fields(SparseAttentionPlan) if "Tensor" in str(f.type)}
    assert set(SPARSE_INPUT_FIELDS) == tensors - outputs


def test_validation_checks_out_against_the_same_inputs(gen, monkeypatch) -> None:
    seen = {}
    original = validate_sparse.check_buffers

    def spy(out, lse, query, layout, inputs):
        seen.update(inputs)
        return original(out, lse, query, layout, inputs)

    monkeypatch.setattr(validate_sparse, "check_buffers", spy)
    _sparse_plan(gen)
    assert set(seen) == set(SPARSE_INPUT_FIELDS)


@pytest.mark.parametrize("backend", ["reference", "tilelang"])
def test_valid_plans_pass(gen, backend: str) -> None:
    plan = dataclasses.replace(_sparse_plan(gen), backend=backend)  # a CPU plan: tilelang only by replace
    check_plan_pointers("sparse_attention", plan)


def test_out_overlapping_an_input(gen) -> None:
    plan = _sparse_plan(gen)
    alias = plan.query.view(plan.out_result.shape)  # the padded query's own memory
    with pytest.raises(MateValueError, match=r"^out: its memory overlaps query"):
        check_plan_pointers("sparse_attention", dataclasses.replace(plan, out_result=alias))


def test_lse_overlapping_out(gen) -> None:
    plan = _sparse_plan(gen)
    lse = plan.out_result.view(torch.float32).flatten()[: plan.lse_result.numel()].view(plan.lse_result.shape)
    with pytest.raises(MateValueError, match=r"^lse: its memory overlaps out"):
        check_plan_pointers("sparse_attention", dataclasses.replace(plan, lse_result=lse))


def test_out_overlapping_itself(gen) -> None:
    plan = _sparse_plan(gen)
    shape = plan.out_result.shape
    folded = torch.empty(shape[-1], dtype=plan.out_result.dtype).expand(shape)  # every row at one address
    with pytest.raises(MateValueError, match=r"^out: got tensor.*elements overlap in memory"):
        check_plan_pointers("sparse_attention", dataclasses.replace(plan, out_result=folded))


@pytest.mark.parametrize("name", ["key", "value"])
def test_misaligned_native_kv(gen, name: str) -> None:
    plan = _sparse_plan(gen)
    broken = dataclasses.replace(plan, **{name: misaligned(getattr(plan, name))})
    check_plan_pointers("sparse_attention", broken)  # the reference has no vector-load rule
    with pytest.raises(LayoutError, match=f"^{name}: ") as info:
        check_plan_pointers("sparse_attention", dataclasses.replace(broken, backend="tilelang"))
    assert VECTOR_LOAD_MESSAGE in str(info.value)


def _prefill_plan(gen):
    q = torch.randn(3, 4, 128, generator=gen).to(torch.bfloat16)
    k = torch.randn(8, 128, generator=gen).to(torch.bfloat16)
    starts = torch.tensor([0, 1, 2], dtype=torch.int32)
    return plan_mqa_prefill(q, k, starts, starts + 4, backend="reference")


def _indexer_plan(gen):
    q = torch.randn(1, 8, 4, 128, generator=gen).to(torch.bfloat16)
    keys = torch.randn(1, 2, 128, generator=gen).to(torch.bfloat16)
    return plan_indexer_score(q, keys, backend="reference")


@pytest.mark.parametrize(
    ("operation", "build", "name", "field"),
    [
        ("mqa_prefill", _prefill_plan, "q", "q"),
        ("mqa_prefill", _prefill_plan, "k", "k"),
        ("indexer_score", _indexer_plan, "q_idx", "q"),
        ("indexer_score", _indexer_plan, "block_keys", "block_keys"),
    ],
)
def test_misaligned_native_mqa_operands(gen, operation, build, name, field) -> None:
    plan = build(gen)
    check_plan_pointers(operation, dataclasses.replace(plan, backend="tilelang"))
    broken = dataclasses.replace(plan, backend="tilelang", **{field: misaligned(getattr(plan, field))})
    with pytest.raises(LayoutError, match=f"^{name}: "):
        check_plan_pointers(operation, broken)


def test_describe_never_prints_tensor_values() -> None:
    values = torch.arange(5, dtype=torch.int32)
    text = describe([values, 2.0, "x", None, 7])
    assert "tensor([" not in text and "0, 1, 2" not in text
    assert text.startswith("list [tensor(shape=[5], dtype=int32") and text.endswith("... (5 items)]")
    assert describe((values,)).startswith("tuple (tensor(shape=[5]")
    assert describe({"a": values}) == "dict with 1 keys"
