"""Native calls on a GPU that is not the current device (marker ``gpu``; skipped below 2 GPUs).

TileLang launches on the current device and stream; the backends make the plan's device
current, as a torch op does. Every entry point runs on ``cuda:1`` while ``cuda:0`` is current
and is checked against the FP32 reference on ``cuda:1``; the current device is unchanged
afterwards.

CUDA-graph capture runs in fresh processes, because ``torch.cuda.graph``'s default capture
stream is created once per process, on the device current at the first capture:

* Kernels first launched on either GPU capture on ``cuda:1`` and replay the same output.
* A call on ``cuda:1`` tensors while a stream of ``cuda:0`` is capturing raises. The default
  capture stream belongs to ``cuda:0`` after a first capture there; a torch op in the same
  position runs at once and is not recorded either.
"""

from __future__ import annotations

import mate_kernels_musa_tests_sparse_checks as checks  # registered by conftest.py
import pytest
import torch

import mate_kernels_musa as native
from mate_core import plan_indexer_score, plan_mqa_decode, plan_mqa_prefill

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs"),
]

OTHER = torch.device("cuda:1")


@pytest.fixture(autouse=True)
def _current_is_cuda0():
    torch.cuda.set_device(0)
    yield
    assert torch.cuda.current_device() == 0, "a native call changed the current device"


def _scores_match(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.cuda.synchronize(OTHER)
    assert got.device == OTHER and not torch.isnan(got).any()
    assert torch.equal(torch.isneginf(got), torch.isneginf(want))
    finite = ~torch.isneginf(want)
    err = (got[finite].double() - want[finite].double()).norm() / want[finite].double().norm()
    assert err < 1e-2, err


def _both(plan_fn, name: str, *args, **kwargs) -> None:
    import mate_reference

    plan = plan_fn(*args, **kwargs)
    out = plan.result if hasattr(plan, "result") else plan.out
    out.fill_(float("nan"))
    getattr(native, name)(plan)
    ref = plan_fn(*args, **kwargs, backend="reference")
    getattr(mate_reference, name)(ref)
    _scores_match(out, ref.result if hasattr(ref, "result") else ref.out)


def test_mqa_entry_points_on_cuda1(gen: torch.Generator) -> None:
    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(torch.bfloat16).to(OTHER)

    i32 = {"dtype": torch.int32, "device": OTHER}
    _both(plan_indexer_score, "indexer_score", randn(2, 37, 4, 128), randn(2, 300, 128))
    rows, keys = 200, 1000
    ends = torch.randint(0, keys, (rows,), generator=gen).to(**i32)
    _both(plan_mqa_prefill, "mqa_prefill", randn(rows, 4, 128), randn(keys, 128), torch.zeros(rows, **i32), ends)
    table = torch.randperm(24, generator=gen)[:20].view(4, 5).to(**i32)
    lens = torch.tensor([1, 77, 160, 33], **i32)
    _both(plan_mqa_decode, "mqa_decode", randn(4, 4, 128), randn(24, 32, 1, 128), table, lens, 160)


@pytest.mark.parametrize("num_splits", [None, 1, 7])
def test_sparse_attention_on_cuda1(num_splits, gen: torch.Generator) -> None:
    case = checks.cases.random_case(gen, max_rows=64, max_width=300, num_splits=num_splits).to(OTHER)
    plan, ref = checks.plans(case)
    native.sparse_attention(plan)
    checks.check(plan, ref, case)


def test_sparse_union_path_on_cuda1(gen: torch.Generator) -> None:
    """The prefill schedule with its union prep, union and finalize kernels, on cuda:1."""
    case, _ = checks.cases.mixed_batch(gen, 300, 203)
    case = case.to(OTHER)
    plan, ref = checks.plans(case)
    native.sparse_attention(plan)
    checks.check(plan, ref, case)


_PRELUDE = """
import sys, torch
sys.path.insert(0, {tests!r})
import sparse_cases as cases
import mate_kernels_musa as native
from mate_core import plan_sparse_attention
torch.cuda.set_device(0)
gen = torch.Generator().manual_seed(7)
case = cases.random_case(gen, max_rows=32, max_width=200, num_splits=None, query_kind="cu")
cap = torch.device("cuda:1")
"""

_CAPTURE = """
native.sparse_attention(plan_sparse_attention(**case.to(torch.device({first!r})).kwargs))  # first launch
plan = plan_sparse_attention(**case.to(cap).kwargs)
native.sparse_attention(plan)  # warm-up on cuda:1
want = plan.out.clone()
plan.out.fill_(float("nan"))
with torch.cuda.device(cap):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # the process's first capture: the default stream is on cuda:1
        native.sparse_attention(plan)
    torch.cuda.synchronize(cap)
    print("RAN_DURING_CAPTURE", bool(not torch.isnan(plan.out).any()))
    graph.replay()
    torch.cuda.synchronize(cap)
print("REPLAYED", bool(torch.equal(plan.out, want)))
"""

_WRONG_STREAM = """
plan = plan_sparse_attention(**case.to(cap).kwargs)
native.sparse_attention(plan)
first = torch.cuda.CUDAGraph()
x0 = torch.zeros(4, device="cuda:0")
with torch.cuda.graph(first):  # creates torch's default capture stream on cuda:0
    x0.add_(1)
probe = torch.zeros(4, device=cap)
with torch.cuda.device(cap):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # the default capture stream: a stream of cuda:0
        probe.add_(1)
        try:
            native.sparse_attention(plan)
            print("LAUNCHED")
        except RuntimeError as exc:
            print("RAISED", exc)
    graph.replay()
    torch.cuda.synchronize(cap)
print("TORCH_OP_RECORDED", float(probe[0]) == 2.0)
"""


def _child(code: str) -> str:
    import subprocess
    import sys
    from pathlib import Path

    prelude = _PRELUDE.format(tests=str(Path(__file__).parent))
    done = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("first", ["cuda:0", "cuda:1"])
def test_graph_capture_on_cuda1(first: str) -> None:
    """Whichever GPU launched the kernels first, a capture on cuda:1 records them (nothing runs
    during the capture) and its replay writes the eager output bitwise."""
    out = _child(_CAPTURE.format(first=first))
    assert "RAN_DURING_CAPTURE False" in out and "REPLAYED True" in out, out


def test_capture_on_a_stream_of_another_device_raises() -> None:
    out = _child(_WRONG_STREAM)
    assert (
        "RAISED a CUDA graph is being captured on a stream of cuda:0, but this call's tensors are on cuda:1" in out
    ), out
    assert "TORCH_OP_RECORDED False" in out, out  # why: torch's own ops are not recorded there either
