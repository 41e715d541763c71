"""Measure the host overhead the ``mate::`` custom-op dispatcher adds per call (not a test).

Run: ``PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python packages/mate-qsa/tests/measure_dispatch_overhead.py``

Times, on the CPU with tiny MQA-decode inputs, (1) the backend function called
directly on a plan, (2) ``mate._ops.run`` in eager mode (what the public
functions do), (3) the same plan through ``torch.ops.mate.mqa_decode``; first
with a no-op backend (pure call-path cost), then with the real reference. The
numbers are quoted in the ``mate._ops`` docstring.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from mate import _backends, _ops
from mate_core import plan_mqa_decode


def _per_call_us(fn: Callable[[], None], calls: int = 20000, repeats: int = 5) -> float:
    for _ in range(calls // 10):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def _tiny_plan():
    q = torch.randn(1, 4, 128)
    cache = torch.randn(2, 8, 128)
    table = torch.tensor([[0, 1]], dtype=torch.int32)
    lens = torch.tensor([12], dtype=torch.int32)
    return plan_mqa_decode(q, cache, table, lens, 16, backend="reference")


def _measure(label: str, calls: int) -> None:
    plan = _tiny_plan()
    fn = _backends.backend_function("mqa_decode", "reference")
    op = _ops.OPS["mqa_decode"]
    direct = _per_call_us(lambda: fn(plan), calls)
    eager = _per_call_us(lambda: _ops.run("mqa_decode", plan), calls)
    via_op = _per_call_us(lambda: op(*_ops.op_arguments("mqa_decode", plan)), calls)
    print(
        f"{label}: direct {direct:.2f} us, mate._ops.run (eager) {eager:.2f} us, "
        f"torch.ops.mate.mqa_decode {via_op:.2f} us -> dispatcher adds {via_op - direct:.2f} us"
    )


def main() -> None:
    torch.set_num_threads(1)
    table = _backends._TABLE["reference"]
    real = table["mqa_decode"]
    table["mqa_decode"] = lambda plan: None
    try:
        _measure("no-op backend", 20000)
    finally:
        table["mqa_decode"] = real
    _measure("reference backend", 2000)
    print(f"torch {torch.__version__}")


if __name__ == "__main__":
    main()
