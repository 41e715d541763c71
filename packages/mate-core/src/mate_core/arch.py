"""Native target table and the architecture gate.

The gate runs before anything is compiled: a device that is not in
:data:`NATIVE_TARGETS` is rejected with :class:`UnsupportedTargetError`, naming the
device, its capability and the supported list. It only queries host-side device
properties (no kernel launch, no synchronization).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import UnsupportedTargetError

__all__ = ["NativeTarget", "NATIVE_TARGETS", "native_target_for", "describe_device"]


@dataclass(frozen=True)
class NativeTarget:
    """One device family the TileLang backend compiles for."""

    name: str
    device_type: str  # torch device type: "cuda" or "musa"
    capability: tuple[int, int]
    arch: str  # compiler arch string
    toolchain: str
    verified: bool  # whether this project's native tests run on it

    def describe(self) -> str:
        cap = f"{self.capability[0]}.{self.capability[1]}"
        status = "verified" if self.verified else "by design, untested here"
        return f"{self.name} ({self.device_type} capability {cap}, {self.arch}, {self.toolchain}; {status})"


NATIVE_TARGETS: tuple[NativeTarget, ...] = (
    NativeTarget("NVIDIA Hopper (H100/H200)", "cuda", (9, 0), "sm_90a", "tilelang==0.1.15", True),
    NativeTarget("Moore Threads MP31 (S5000)", "musa", (3, 1), "mp_31", "TileLang-MUSA 0.1.12+musa.4", False),
)


def _capability(device: torch.device) -> tuple[int, int] | None:
    if device.type == "cuda" and torch.cuda.is_available():
        return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]
    if device.type == "musa":
        musa = getattr(torch, "musa", None)
        if musa is not None and musa.is_available():
            return tuple(musa.get_device_capability(device))
    return None


def describe_device(device: torch.device | str) -> str:
    """Human-readable name and capability of ``device`` (host query only).

    Parameters
    ----------
    device : torch.device or str
        Any torch device (``"cpu"``, ``"cuda:1"``, ``"meta"``, ...).

    Returns
    -------
    str
        E.g. ``"cuda:0 (NVIDIA H200, capability 9.0)"`` or ``"cpu (no native capability)"``.
    """
    device = torch.device(device)
    cap = _capability(device)
    if cap is None:
        return f"{device} (no native capability)"
    name = ""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device) + ", "
    return f"{device} ({name}capability {cap[0]}.{cap[1]})"


def native_target_for(device: torch.device | str) -> NativeTarget:
    """Return the native target of ``device`` or raise :class:`UnsupportedTargetError`."""
    device = torch.device(device)
    cap = _capability(device)
    for target in NATIVE_TARGETS:
        if device.type == target.device_type and cap == target.capability:
            return target
    supported = "; ".join(t.describe() for t in NATIVE_TARGETS)
    raise UnsupportedTargetError(
        f"backend='tilelang' does not support device {describe_device(device)}; "
        f"supported native targets: {supported}. Pass backend='reference' to run the "
        "FP32 PyTorch oracle on this device instead."
    )
