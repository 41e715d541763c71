"""Compile-and-cache of kernel specializations.

A kernel module defines a factory whose arguments are the compile-time
constants (head geometry, dtype, tile sizes) and which returns a TileLang
``prim_func`` with dynamic runtime sizes; a ``pass_configs`` attribute on the factory adds
TileLang pass configs for its kernels, per device type of the profile (``{"cuda": {...}}``):
a config verified on one toolchain is not passed to another. :func:`build` compiles one
specialization for one target profile and caches it for the process;
TileLang's on-disk cache (``TILELANG_CACHE_DIR``) persists it across processes.

A compiled kernel keeps its module on the CUDA device of its first launch. On a host with two
H200s (session 9), launches from another device in the same process computed correct results
eagerly, but a CUDA-graph capture there recorded nothing (an empty graph, with either TileLang
execution backend). :class:`NativeKernel` therefore raises instead of letting such a capture
return a graph that does nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from mate_core.arch import native_target_for

from .target import profile_for, profile_named


@functools.cache
def profile_name(device: torch.device) -> str:
    """Compile profile of ``device`` through mate_core's architecture gate (cached per device).

    Raises :class:`mate_core.UnsupportedTargetError` for devices outside the native target
    table, before anything is compiled.
    """
    return profile_for(native_target_for(device)).name


def pass_configs(factory: Callable[..., Any], profile: str) -> dict[str, Any]:
    """TileLang pass configs of ``factory``'s kernels for the named profile: the profile's own,
    then the factory's for the profile's device type (a kernel that places every barrier itself)."""
    prof = profile_named(profile)
    return {**dict(prof.pass_configs), **getattr(factory, "pass_configs", {}).get(prof.device_type, {})}


class NativeKernel:
    """A compiled kernel that remembers the CUDA device of its first launch (attributes pass through).

    A launch from another device while that device's current stream is capturing a CUDA graph
    raises RuntimeError: the capture would record nothing (see the module docstring).
    """

    __slots__ = ("first_device", "kernel")

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.first_device: int | None = None

    def __call__(self, *args: Any) -> Any:
        if torch.cuda.is_available():
            device = torch.cuda.current_device()  # the launchers make the plan's device current
            if self.first_device is None:
                self.first_device = device
            elif device != self.first_device and torch.cuda.is_current_stream_capturing():
                raise RuntimeError(
                    f"this native kernel was first launched on cuda:{self.first_device} in this process and "
                    f"keeps its module there, so a CUDA-graph capture on cuda:{device} would record nothing. "
                    f"Capture on cuda:{self.first_device}, or give each GPU its own process (CUDA_VISIBLE_DEVICES); "
                    "eager calls on any device work"
                )
        return self.kernel(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kernel, name)


@functools.cache
def build(factory: Callable[..., Any], profile: str, *consts: Any) -> NativeKernel:
    """Compile ``factory(*consts)`` for the named target profile (cached)."""
    import tilelang

    prof = profile_named(profile)
    func = factory(*consts)
    configs = pass_configs(factory, profile)
    return NativeKernel(
        tilelang.compile(
            func,
            target=prof.tvm_target(),
            pass_configs=configs or None,
            execution_backend="auto",
        )
    )
