"""Native calls on a GPU that is not the current device (marker ``gpu``; skipped below 2 GPUs).

TileLang launches on the current device and stream; the backends make the plan's device
current, as a torch op does. Every entry point runs on ``cuda:1`` while ``cuda:0`` is current
and is checked against the FP32 reference on ``cuda:1``; the current device is unchanged
afterwards. CUDA-graph capture on ``cuda:1`` works for kernels first launched there and
raises for kernels first launched on ``cuda:0`` (``_build.NativeKernel``: such a capture
would record nothing).

A kernel's first launch fixes its device for the rest of the process, so every test here runs
in a process of its own: the eager tests in a child pytest run started by
:func:`test_cuda1_tests_in_own_process` (in the parent run they are skipped), the capture tests
in a ``python -c`` child each. Run in the parent, they would pin the kernels to ``cuda:1`` and
make the CUDA-graph tests of the other files raise (seen on an H200 x2: 6 failures).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

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
CHILD_ENV = "MATE_TEST_CUDA1_CHILD"
IN_CHILD = os.environ.get(CHILD_ENV) == "1"
in_child = pytest.mark.skipif(
    torch.cuda.device_count() >= 2 and not IN_CHILD,
    reason="runs in a child process started by test_cuda1_tests_in_own_process",
)


@pytest.fixture(autouse=True)
def _current_is_cuda0():
    torch.cuda.set_device(0)
    yield
    assert torch.cuda.current_device() == 0, "a native call changed the current device"


@pytest.mark.skipif(IN_CHILD, reason="this is the child run")
def test_cuda1_tests_in_own_process() -> None:
    """Runs this file's ``in_child`` tests in a fresh pytest process and requires all of them to pass."""
    expected = 5  # test_mqa_entry_points_on_cuda1, 3 x test_sparse_attention_on_cuda1, the union path
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "gpu",
            "-k",
            "not own_process and not graph_capture",
            __file__,
        ],
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, CHILD_ENV: "1"},
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(rf"\b{expected} passed\b", summary) and "skipped" not in summary, summary


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


@in_child
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


@in_child
@pytest.mark.parametrize("num_splits", [None, 1, 7])
def test_sparse_attention_on_cuda1(num_splits, gen: torch.Generator) -> None:
    case = checks.cases.random_case(gen, max_rows=64, max_width=300, num_splits=num_splits).to(OTHER)
    plan, ref = checks.plans(case)
    native.sparse_attention(plan)
    checks.check(plan, ref, case)


@in_child
def test_sparse_union_path_on_cuda1(gen: torch.Generator) -> None:
    """The prefill schedule with its union prep, union and finalize kernels, on cuda:1."""
    case, _ = checks.cases.mixed_batch(gen, 300, 203)
    case = case.to(OTHER)
    plan, ref = checks.plans(case)
    native.sparse_attention(plan)
    checks.check(plan, ref, case)


_CAPTURE = """
import sys, torch
sys.path.insert(0, {tests!r})
import sparse_cases as cases
import mate_kernels_musa as native
from mate_core import plan_sparse_attention
torch.cuda.set_device(0)
gen = torch.Generator().manual_seed(7)
case = cases.random_case(gen, max_rows=32, max_width=200, num_splits=None, query_kind="cu")
first, capture = torch.device({first!r}), torch.device("cuda:1")
native.sparse_attention(plan_sparse_attention(**case.to(first).kwargs))  # loads the kernels on `first`
plan = plan_sparse_attention(**case.to(capture).kwargs)
native.sparse_attention(plan)
want = plan.out.clone()
with torch.cuda.device(capture):
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            native.sparse_attention(plan)
    except RuntimeError as exc:
        print("RAISED", exc)
        sys.exit(0)
    plan.out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize(capture)
print("REPLAYED", bool(torch.equal(plan.out, want)))
"""


@pytest.mark.skipif(IN_CHILD, reason="runs in its own python -c process")
@pytest.mark.parametrize("first", ["cuda:0", "cuda:1"])
def test_graph_capture_on_cuda1(first: str) -> None:
    """Kernels first launched on cuda:1 capture there and replay the same output; kernels first launched
    on cuda:0 raise a RuntimeError at capture on cuda:1 (the capture would record nothing). Each case
    runs in a fresh process (the first launch is per process)."""
    code = _CAPTURE.format(tests=str(Path(__file__).parent), first=first)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    if first == "cuda:1":
        assert "REPLAYED True" in done.stdout, done.stdout
    else:
        assert "RAISED this native kernel was first launched on cuda:0" in done.stdout, done.stdout
        assert "capture on cuda:1 would record nothing" in done.stdout
