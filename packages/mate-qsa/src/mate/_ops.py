"""``torch.library`` custom ops ``mate::<operation>`` over the validated plans.

Each op takes the fields of one ``mate_core`` plan (tensors, optional tensors,
ints, floats, bools, strs), mutates the plan's output buffers and returns
nothing. Its schema is derived from the plan dataclass, so ``plans.py`` stays the
single contract between validation and backends. The op body rebuilds the plan
from its arguments and runs the backend named by the plan. It does not validate
the call again: the public function did, before calling it. Only the rules that need
data pointers run again (:mod:`mate_core.pointer_checks`), because validation under
``torch.compile`` saw fake tensors without addresses. The ops are the compile path of
the public functions, not a second API: their arguments are a plan's fields. The fake (meta)
implementation does nothing: the outputs are caller-allocated buffers, so
shapes are already known to the tracer.

Host overhead (why eager calls bypass the op)
---------------------------------------------
Measured with ``tests/measure_dispatch_overhead.py`` on the 2-core CPU machine
(torch 2.13.0+cpu, Python 3.11, MQA-decode plan with tiny inputs, a no-op
backend so that only the call path is timed; median of 5 x 20000 calls):

* backend function called directly on the plan:           0.06 us per call
* ``mate._ops.run`` in eager mode (what the API does):     0.25 us per call
* through ``torch.ops.mate.mqa_decode`` (dispatcher,
  boxing into the Python kernel, plan rebuild):           10.6 us per call
* for comparison, a ``torch.library.custom_op`` with a
  5-argument schema and an empty body:                    ~90 us per call

The dispatcher adds about 10 us, which matters next to microsecond-scale decode
kernels, so :func:`run` calls the backend directly in eager mode and goes
through the op only while ``torch.compile`` traces (there the op is what keeps
the graph whole: the fake implementation stands in for the kernel, and the
compiled graph calls the op). The ops are defined with ``torch.library.Library``
rather than ``custom_op`` for the same reason: a ~9x cheaper call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from mate_core.checks import check_backend
from mate_core.plans import IndexerScorePlan, MQADecodePlan, MQAPrefillPlan, SparseAttentionPlan
from mate_core.pointer_checks import check_plan_pointers

from ._backends import backend_function

__all__ = ["OPS", "op_arguments", "rebuild_plan", "run"]

_NAMESPACE = "mate"

# Annotation strings used in plans.py -> torch schema types. Ints are SymInt so
# dynamic-shape tracing can pass symbolic sizes.
_SCHEMA_TYPES = {
    "Tensor": "Tensor",
    "Tensor | None": "Tensor?",
    "int": "SymInt",
    "float": "float",
    "bool": "bool",
    "str": "str",
}


@dataclasses.dataclass(frozen=True)
class _OpSpec:
    """How one plan class maps onto one op.

    mutated: plan fields the backend writes (become ``Tensor(x!)`` arguments).
    derived: plan fields not passed to the op, rebuilt from a mutated field; they
    only serve the public return value, backends never read them.
    """

    plan_cls: type
    mutated: tuple[str, ...]
    derived: dict[str, str]

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self.plan_cls) if f.name not in self.derived)

    def schema(self) -> str:
        types = {f.name: f.type for f in dataclasses.fields(self.plan_cls)}
        args = []
        for name in self.arg_names:
            typ = _SCHEMA_TYPES.get(str(types[name]))
            if typ is None:  # pragma: no cover - a plans.py edit the op layer does not know
                raise TypeError(f"{self.plan_cls.__name__}.{name}: no op schema type for {types[name]!r}")
            if name in self.mutated:
                alias = "abcdefgh"[self.mutated.index(name)]
                typ = typ.replace("Tensor", f"Tensor({alias}!)")
            args.append(f"{typ} {name}")
        return f"({', '.join(args)}) -> ()"


_SPECS: dict[str, _OpSpec] = {
    "indexer_score": _OpSpec(IndexerScorePlan, ("out",), {"result": "out"}),
    "mqa_prefill": _OpSpec(MQAPrefillPlan, ("out",), {}),
    "mqa_decode": _OpSpec(MQADecodePlan, ("out",), {}),
    "sparse_attention": _OpSpec(SparseAttentionPlan, ("out", "lse"), {"out_result": "out", "lse_result": "lse"}),
}


def rebuild_plan(operation: str, *args: Any) -> Any:
    """The plan of ``operation`` from op arguments (no validation)."""
    spec = _SPECS[operation]
    fields = dict(zip(_ARG_NAMES[operation], args))
    for name, source in spec.derived.items():
        fields[name] = fields[source]
    return spec.plan_cls(**fields)


# Plain tuples of names, computed once: dynamo traces getattr over them, but not
# dataclasses.fields() on a plan class.
_ARG_NAMES: dict[str, tuple[str, ...]] = {operation: spec.arg_names for operation, spec in _SPECS.items()}


def op_arguments(operation: str, plan: Any) -> tuple[Any, ...]:
    """The op's positional arguments for ``plan``, in schema order."""
    return tuple(getattr(plan, name) for name in _ARG_NAMES[operation])


def _kernel(operation: str) -> Callable[..., None]:
    def kernel(*args: Any) -> None:
        plan = rebuild_plan(operation, *args)
        check_backend(plan.backend)
        # Validation skipped the pointer rules if it ran while torch.compile traced (fake tensors).
        check_plan_pointers(operation, plan)
        backend_function(operation, plan.backend)(plan)

    kernel.__name__ = f"{operation}_kernel"
    return kernel


def _fake(*args: Any) -> None:
    # Outputs are preallocated buffers: nothing to allocate or describe.
    return None


_LIB = torch.library.Library(_NAMESPACE, "DEF")


def _register() -> dict[str, torch._ops.OpOverload]:
    ops = {}
    for operation, spec in _SPECS.items():
        _LIB.define(operation + spec.schema())
        # CompositeExplicitAutograd: one Python kernel for every device (CPU, CUDA, MUSA).
        _LIB.impl(operation, _kernel(operation), "CompositeExplicitAutograd")
        torch.library.register_fake(f"{_NAMESPACE}::{operation}", _fake, lib=_LIB)
        ops[operation] = getattr(getattr(torch.ops, _NAMESPACE), operation).default
    return ops


OPS: dict[str, torch._ops.OpOverload] = _register()


def run(operation: str, plan: Any) -> None:
    """Execute a validated plan: directly in eager mode, through ``mate::<operation>`` under torch.compile."""
    if torch.compiler.is_compiling():
        OPS[operation](*op_arguments(operation, plan))
    else:
        backend_function(operation, plan.backend)(plan)
