"""mate_kernels_musa: native TileLang kernels for NVIDIA Hopper (sm_90a) and MUSA MP31.

Importing this package does not import TileLang; kernels are compiled lazily
on first use, per specialization, after mate_core's architecture gate has
passed. The four backend functions each take the plan of the matching
``mate_core.plan_*(..., backend="tilelang")`` and write its output buffers; they never
validate again. Each runs with the plan's device
made current (as a torch op does): TileLang launches on the current device and its stream,
so a call on ``cuda:1`` from a process whose current device is ``cuda:0`` runs there too.
A call made while a CUDA graph is being captured on a stream of another device than its
tensors' raises (:func:`_check_capture_device`) instead of running unrecorded.

Each backend function raises :class:`mate_core.BackendUnavailableError` when TileLang is not
installed, :class:`mate_core.UnsupportedTargetError` (from the architecture gate, before
anything compiles) for a plan whose tensors are not on a native target,
:class:`mate_core.GraphCaptureError` for the capture misuses, and passes TileLang's or the
driver's errors (a failed compile, a launch error) through unchanged.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from typing import Any

import torch

from mate_core.errors import BackendUnavailableError, GraphCaptureError

__version__ = "0.1.0"

__all__ = ["__version__", "indexer_score", "mqa_prefill", "mqa_decode", "sparse_attention", "tilelang_version"]


def tilelang_version() -> str | None:
    """Installed TileLang version, or None (without importing TileLang)."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("tilelang", "tilelang-musa"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def _launcher(module: str, name: str) -> Any:
    if importlib.util.find_spec("tilelang") is None:
        raise BackendUnavailableError(
            "backend='tilelang' needs TileLang, which is not installed: pip install "
            "'tilelang==0.1.15' (CUDA sm_90a) or TileLang-MUSA 0.1.12+musa.4 (MP31), "
            "or pass backend='reference'"
        )
    try:
        mod = importlib.import_module(f"{__name__}.{module}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{module}":
            raise
        raise BackendUnavailableError(
            f"the native kernel for {name} is not available in mate-kernels-musa {__version__}; "
            "pass backend='reference'"
        ) from None
    return getattr(mod, name)


def _on_device(device: torch.device) -> Any:
    """Make ``device`` current for the duration (its module's device guard; nothing on the CPU)."""
    module = getattr(torch, device.type, None)
    guard = getattr(module, "device", None) if device.type != "cpu" else None
    return guard(device) if guard is not None else contextlib.nullcontext()


def _check_capture_device(device: torch.device) -> None:
    """Raise when the current stream is capturing a CUDA graph on another device than ``device``.

    The kernels run on ``device``'s current stream, which is then not the capturing one: they
    would run at once and the graph would not contain them (seen on an H200 x2 in session 9,
    where ``torch.cuda.graph``'s default capture stream belonged to the other GPU). A host-side
    query only: no device synchronization.
    """
    if device.type != "cuda":
        return
    current = torch.cuda.current_device()
    if current != device.index and torch.cuda.is_current_stream_capturing():
        raise GraphCaptureError(
            f"a CUDA graph is being captured on a stream of cuda:{current}, but this call's tensors are on "
            f"{device}: its kernels would run at once on {device} instead of being recorded. Capture on a "
            f"stream of {device}, e.g. torch.cuda.graph(graph, stream=torch.cuda.Stream(device='{device}')) "
            "(torch.cuda.graph's default capture stream belongs to the device that was current at the "
            "process's first capture)"
        )


def _native(module: str, name: str, plan: Any, out: torch.Tensor) -> None:
    launch = _launcher(module, name)
    _check_capture_device(out.device)
    with _on_device(out.device):
        launch(plan)


def indexer_score(plan: Any) -> None:
    """Native ``qsa_indexer_mqa_score`` on a ``mate_core.IndexerScorePlan``: writes ``plan.result``."""
    _native("mqa_launch", "indexer_score", plan, plan.result)


def mqa_prefill(plan: Any) -> None:
    """Native ``qsa_mqa_prefill`` on a ``mate_core.MQAPrefillPlan``: writes ``plan.out``."""
    _native("mqa_launch", "mqa_prefill", plan, plan.out)


def mqa_decode(plan: Any) -> None:
    """Native ``qsa_mqa_decode`` on a ``mate_core.MQADecodePlan``: writes ``plan.out``."""
    _native("mqa_launch", "mqa_decode", plan, plan.out)


def sparse_attention(plan: Any) -> None:
    """Native ``qsa_sparse_attention`` on a ``mate_core.SparseAttentionPlan``: writes ``plan.out``
    (and ``plan.lse`` when not None)."""
    _native("sparse_launch", "sparse_attention", plan, plan.out)
