"""The backends' device handling, CPU-only: the capture-device check that runs before every
native launch (``mate_kernels_musa._check_capture_device``), with torch's device queries faked."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

import mate_kernels_musa as native
from mate_core import GraphCaptureError


@pytest.fixture
def cuda_state(monkeypatch):
    state = {"device": 0, "capturing": False}
    monkeypatch.setattr(torch.cuda, "current_device", lambda: state["device"])
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: state["capturing"])
    return state


def test_capture_on_another_devices_stream_raises(cuda_state) -> None:
    cuda_state["capturing"] = True
    with pytest.raises(
        GraphCaptureError,
        match=r"captured on a stream of cuda:0, but this call's tensors are on cuda:1.*"
        r"torch\.cuda\.Stream\(device='cuda:1'\)",
    ):
        native._check_capture_device(torch.device("cuda", 1))


@pytest.mark.parametrize(
    ("current", "capturing", "target"),
    [(0, True, torch.device("cuda", 0)), (0, False, torch.device("cuda", 1)), (1, True, torch.device("cpu"))],
    ids=["capture-same-device", "eager-other-device", "cpu-tensors"],
)
def test_allowed_calls_pass(cuda_state, current: int, capturing: bool, target: torch.device) -> None:
    cuda_state.update(device=current, capturing=capturing)
    native._check_capture_device(target)  # no exception


def test_native_checks_before_it_launches(cuda_state, monkeypatch) -> None:
    launched = []
    monkeypatch.setattr(native, "_launcher", lambda module, name: launched.append)
    monkeypatch.setattr(native, "_on_device", lambda device: contextlib.nullcontext())
    cuda_state["capturing"] = True
    with pytest.raises(GraphCaptureError, match="would run at once on cuda:1"):
        native._native("sparse_launch", "sparse_attention", "plan", SimpleNamespace(device=torch.device("cuda", 1)))
    assert launched == []
    native._native("sparse_launch", "sparse_attention", "plan", SimpleNamespace(device=torch.device("cuda", 0)))
    assert launched == ["plan"]
