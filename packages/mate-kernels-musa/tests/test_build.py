"""``_build``: per-device pass configs and the first-launch device guard of compiled kernels (CPU)."""

from __future__ import annotations

import pytest
import torch

from mate_kernels_musa._build import NativeKernel


def test_native_kernel_refuses_capture_away_from_its_first_device(monkeypatch) -> None:
    """Eager launches run on any device; a capture on another device than the first launch's raises."""
    state = {"device": 0, "capturing": False}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: state["device"])
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: state["capturing"])
    calls = []

    class Compiled:
        source = "__global__ void k() {}"

        def __call__(self, *args):
            calls.append(args)
            return len(calls)

    kernel = NativeKernel(Compiled())
    assert kernel(1) == 1 and kernel.first_device == 0
    state["device"] = 1
    assert kernel(2) == 2  # eager on another device
    state["capturing"] = True
    with pytest.raises(RuntimeError, match=r"first launched on cuda:0 .* capture on cuda:1 would record nothing"):
        kernel(3)
    state["device"] = 0
    assert kernel(4) == 3  # capture on the first device
    assert calls == [(1,), (2,), (4,)]
    assert kernel.source == Compiled.source  # other attributes pass through


def test_native_kernel_without_cuda(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    kernel = NativeKernel(lambda *args: "ran")
    assert kernel(1) == "ran" and kernel.first_device is None
