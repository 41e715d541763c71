"""Compile-and-cache of kernel specializations.

A kernel module defines a factory whose arguments are the compile-time
constants (head geometry, dtype, tile sizes) and which returns a TileLang
``prim_func`` with dynamic runtime sizes; a ``pass_configs`` attribute on the factory adds
TileLang pass configs for its kernels, per device type of the profile (``{"cuda": {...}}``):
a config verified on one toolchain is not passed to another. A ``cuda_postproc`` attribute
(generated CUDA source -> source) rewrites the factory's kernels on CUDA profiles: it is
TileLang's global ``tilelang_callback_cuda_postproc`` only while :func:`build` compiles
(chained after any callback already registered, which is restored afterwards), and must return
sources it does not recognize unchanged. A factory may build other kernels for the same profile
(:func:`current_profile`). :func:`build` compiles one
specialization for one target profile and caches it for the process;
TileLang's on-disk cache (``TILELANG_CACHE_DIR``) persists it across processes.

Each build is logged on the ``mate_kernels_musa`` logger at INFO level, before it starts and
when it is ready, with the elapsed time: a first call that compiles (several to tens of
seconds per kernel with nvcc, much less from TileLang's on-disk cache) can be told from a
hang with ``logging.basicConfig(level=logging.INFO)``; ``mate precompile`` builds ahead of time.

A compiled kernel launches on the current CUDA device and that device's current stream (the
backends make the plan's device current, :func:`mate_kernels_musa._native`), whichever device
it was first launched on: on an H200 x2 (session 10), kernels first launched on ``cuda:0``
captured and replayed correctly in a CUDA graph on ``cuda:1``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from mate_core.arch import native_target_for

from .target import profile_for, profile_named

logger = logging.getLogger("mate_kernels_musa")

_CUDA_POSTPROC = "tilelang_callback_cuda_postproc"
_postproc_lock = threading.Lock()
_building = threading.local()  # the profile whose factory call is running (current_profile)


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


@contextlib.contextmanager
def cuda_postproc(rewrite: Callable[[str], str] | None) -> Iterator[None]:
    """Make ``rewrite`` TileLang's CUDA source callback for the duration of the block (none: no-op).

    A callback registered before runs first and is registered again on exit (none: the name is
    removed), so a user's own callback keeps working inside and outside the block.
    """
    if rewrite is None:
        yield
        return
    import tvm_ffi

    with _postproc_lock:
        previous = tvm_ffi.get_global_func(_CUDA_POSTPROC, allow_missing=True)

        def chained(code: str, target: Any) -> str:
            return rewrite(previous(code, target) if previous is not None else code)

        tvm_ffi.register_global_func(_CUDA_POSTPROC, f=chained, override=True)
        try:
            yield
        finally:
            if previous is not None:
                tvm_ffi.register_global_func(_CUDA_POSTPROC, f=previous, override=True)
            else:
                tvm_ffi.remove_global_func(_CUDA_POSTPROC)


def current_profile() -> str:
    """The target profile of the :func:`build` whose factory is running (a factory that builds another
    kernel for its own, such as the group shell of :mod:`.sparse_groups`, builds it for this profile).

    Raises
    ------
    RuntimeError
        Called outside a factory that :func:`build` runs.
    """
    profile = getattr(_building, "profile", None)
    if profile is None:
        raise RuntimeError("current_profile() is only defined while build() runs a kernel factory")
    return profile


@functools.cache
def build(factory: Callable[..., Any], profile: str, *consts: Any) -> Any:
    """Compile ``factory(*consts)`` for the named target profile (cached)."""
    import tilelang

    prof = profile_named(profile)
    name = f"{factory.__name__}{consts}"
    logger.info("building %s for %s (first use in this process)", name, profile)
    start = time.perf_counter()
    outer = getattr(_building, "profile", None)
    _building.profile = profile
    try:
        func = factory(*consts)
    finally:
        _building.profile = outer
    configs = pass_configs(factory, profile)
    rewrite = getattr(factory, "cuda_postproc", None) if prof.device_type == "cuda" else None
    with cuda_postproc(rewrite):
        kernel = tilelang.compile(
            func, target=prof.tvm_target(), pass_configs=configs or None, execution_backend="auto"
        )
    logger.info("built %s for %s in %.1f s", name, profile, time.perf_counter() - start)
    return kernel
