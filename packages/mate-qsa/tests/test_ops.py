"""The ``mate::`` custom ops: schemas, opcheck, plan round trip, torch.compile without graph breaks."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import mate
import mate_core
from mate import _ops

OPERATIONS = ["indexer_score", "mqa_prefill", "mqa_decode", "sparse_attention"]


def _plan(operation: str, make_case, gen: torch.Generator, **overrides):
    _name, args, kwargs = make_case(operation, gen)
    return getattr(mate_core, f"plan_{operation}")(*args, **{**kwargs, **overrides})


@pytest.mark.parametrize("operation", OPERATIONS)
def test_schema_mutates_outputs_and_returns_nothing(operation: str) -> None:
    schema = _ops.OPS[operation]._schema
    assert str(schema).startswith(f"mate::{operation}(")
    assert not schema.returns
    mutated = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
    assert mutated == ({"out", "lse"} if operation == "sparse_attention" else {"out"})


@pytest.mark.parametrize("operation", OPERATIONS)
def test_rebuilt_plan_equals_the_validated_plan(operation: str, make_case, gen) -> None:
    plan = _plan(operation, make_case, gen)
    rebuilt = _ops.rebuild_plan(operation, *_ops.op_arguments(operation, plan))
    derived = {"result", "out_result", "lse_result"}
    for field in dataclasses.fields(plan):
        if field.name not in derived:
            assert getattr(rebuilt, field.name) is getattr(plan, field.name), field.name


@pytest.mark.parametrize(
    ("operation", "overrides"),
    [
        ("indexer_score", {}),
        ("mqa_prefill", {}),
        ("mqa_decode", {}),
        ("sparse_attention", {}),
        ("sparse_attention", {"return_lse": False}),  # lse=None: the optional mutable argument
    ],
)
def test_opcheck(operation: str, overrides: dict, make_case, gen) -> None:
    plan = _plan(operation, make_case, gen, **overrides)
    torch.library.opcheck(_ops.OPS[operation], _ops.op_arguments(operation, plan))


def test_sparse_plan_without_lse_passes_none(make_case, gen) -> None:
    plan = _plan("sparse_attention", make_case, gen, return_lse=False)
    assert plan.lse is None


def test_op_call_writes_what_the_eager_call_returns(make_case, gen) -> None:
    _name, args, kwargs = make_case("sparse_attention", gen)
    want_out, want_lse = mate.qsa_sparse_attention(*args, **kwargs)
    plan = mate_core.plan_sparse_attention(*args, **kwargs)
    plan.out.fill_(float("nan"))  # poisoned: the op must overwrite every element
    plan.lse.fill_(float("nan"))
    _ops.OPS["sparse_attention"](*_ops.op_arguments("sparse_attention", plan))
    torch.testing.assert_close(plan.out_result, want_out, rtol=0, atol=0)
    torch.testing.assert_close(plan.lse_result, want_lse, rtol=0, atol=0)


def _compiled_graph_ops(counter: CompileCounterWithBackend) -> set[str]:
    return {str(node.target) for graph in counter.graphs for node in graph.graph.nodes if node.op == "call_function"}


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_matches_eager(operation: str, dynamic: bool, make_case, gen) -> None:
    torch._dynamo.reset()
    name, args, kwargs = make_case(operation, gen)
    entry_point = getattr(mate, name)

    def fn(*tensors):
        return entry_point(*tensors, **kwargs)

    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(fn, fullgraph=True, backend=counter, dynamic=dynamic)
    got, want = compiled(*args), fn(*args)
    for g, w in zip(
        got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,), strict=True
    ):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    # fullgraph=True raises on any graph break; the compiled graph must call the op (not a
    # traced-through backend). With dynamic=True dynamo may restart once to specialize the
    # float scale, which yields an extra (empty) graph, so only the op's presence is checked.
    assert f"mate.{operation}.default" in _compiled_graph_ops(counter)


def test_compile_with_a_changing_scale_argument(make_case, gen) -> None:
    # A second value makes dynamo treat the float as dynamic (a SymFloat); validation and the
    # op must still trace without a graph break.
    torch._dynamo.reset()
    _name, args, _kwargs = make_case("mqa_prefill", gen)
    compiled = torch.compile(
        lambda *a, scale: mate.qsa_mqa(*a, scale=scale, backend="reference"), fullgraph=True, backend="aot_eager"
    )
    for scale in (0.5, 0.25, 2.0):
        want = mate.qsa_mqa(*args, scale=scale, backend="reference")
        torch.testing.assert_close(compiled(*args, scale=scale), want, rtol=0, atol=0)


def test_compiled_out_overlapping_query(make_case, gen) -> None:
    # Validation traces fake tensors without addresses. Where the compiled graph hands the op the
    # caller's buffers (dynamo's "eager" backend), the op rejects the overlap as an eager call does.
    # AOT backends (aot_eager, inductor) functionalize the op: it writes a fresh buffer that is copied
    # into ``out`` afterwards, so the result is right even though ``out`` is the query.
    _name, args, kwargs = make_case("sparse_attention", gen)
    kwargs = {**kwargs, "return_lse": False}
    want = mate.qsa_sparse_attention(*args, **kwargs)
    with pytest.raises(mate.MateValueError, match=r"^out: its memory overlaps query"):
        mate.qsa_sparse_attention(*args, **kwargs, out=args[0])
    for backend in ("eager", "aot_eager"):
        torch._dynamo.reset()
        compiled = torch.compile(
            lambda *a, out: mate.qsa_sparse_attention(*a, **kwargs, out=out), fullgraph=True, backend=backend
        )
        query = args[0].clone()
        torch.testing.assert_close(compiled(query, *args[1:], out=torch.empty_like(query)), want, rtol=0, atol=0)
        if backend == "eager":
            with pytest.raises(mate.MateValueError, match=r"^out: its memory overlaps query"):
                compiled(query, *args[1:], out=query)
            assert torch.equal(query, args[0])  # rejected before the backend wrote anything
        else:
            got = compiled(query, *args[1:], out=query)
            assert got.data_ptr() == query.data_ptr()
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_op_checks_pointers_and_backend_before_running(make_case, gen, monkeypatch) -> None:
    plan = _plan("sparse_attention", make_case, gen)
    ran = []
    monkeypatch.setattr(_ops, "backend_function", lambda operation, backend: ran.append)
    flat = torch.empty(plan.key.numel() + 1, dtype=plan.key.dtype)
    misaligned = flat[1:].view(plan.key.shape)  # 4-byte float32 offset: not 16-byte aligned
    misaligned.copy_(plan.key)
    native = dataclasses.replace(plan, backend="tilelang", key=misaligned)
    with pytest.raises(mate.LayoutError, match=r"^key: "):
        _ops.OPS["sparse_attention"](*_ops.op_arguments("sparse_attention", native))
    with pytest.raises(mate.MateValueError, match=r"^backend: got 'bogus'"):
        _ops.OPS["sparse_attention"](*_ops.op_arguments("sparse_attention", dataclasses.replace(plan, backend="bogus")))
    assert not ran
    _ops.OPS["sparse_attention"](*_ops.op_arguments("sparse_attention", plan))
    assert len(ran) == 1  # the same op runs a valid plan
