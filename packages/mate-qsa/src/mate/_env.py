"""Environment facts for ``mate check`` and ``mate show-config`` (host queries only).

Nothing here imports TileLang or launches device work: versions come from
package metadata, devices from torch's host-side properties.
"""

from __future__ import annotations

import importlib
import os
import platform
import shutil
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import torch

import mate_kernels_musa
from mate_core.arch import NATIVE_TARGETS, describe_device, native_target_for
from mate_core.errors import UnsupportedTargetError
from mate_kernels_musa.target import profile_for

__all__ = ["device_count", "devices", "native_targets", "package_versions", "supported_device", "tilelang_config"]

_DISTRIBUTIONS = ("mate-qsa", "mate-core", "mate-reference", "mate-kernels-musa", "torch", "rich")
_MODULES = {
    "mate-qsa": "mate",
    "mate-core": "mate_core",
    "mate-reference": "mate_reference",
    "mate-kernels-musa": "mate_kernels_musa",
    "torch": "torch",
}

# TileLang reads these; the cache key includes the template/CUTLASS paths, so a
# cache built on one machine is reused elsewhere only when they match.
_TILELANG_VARS = ("TILELANG_CACHE_DIR", "TL_TEMPLATE_PATH", "TL_CUTLASS_PATH", "TILELANG_DISABLE_CACHE", "CUDA_HOME")
_DEFAULT_CACHE_DIR = os.path.join("~", ".tilelang", "cache")


def _dist_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def package_versions() -> dict[str, str | None]:
    """Python, MATE packages, torch (+ its CUDA build) and TileLang versions; None if absent."""
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in _DISTRIBUTIONS:
        found[name] = _dist_version(name)
    # Source checkouts on PYTHONPATH have no distribution metadata: ask the modules.
    for name, module in _MODULES.items():
        if found[name] is None:
            found[name] = importlib.import_module(module).__version__
    # The module's own version: distribution metadata can omit the local build tag
    # (an image's torch reported "2.11.0" for torch.__version__ "2.11.0+cu130").
    found["torch"] = torch.__version__
    found["torch cuda build"] = torch.version.cuda
    found["tilelang"] = mate_kernels_musa.tilelang_version()
    return found


def device_count(device_type: str) -> int:
    """Usable devices of ``device_type`` in this torch (0 when the backend is absent or unavailable)."""
    module = getattr(torch, device_type, None)
    is_available = getattr(module, "is_available", None)
    try:
        return int(module.device_count()) if is_available is not None and is_available() else 0
    except (RuntimeError, AttributeError):  # a backend that is present but broken counts as absent
        return 0


def _device_names() -> list[str]:
    names = ["cpu"]
    for device_type in ("cuda", "musa"):  # the device types of the native target table
        names += [f"{device_type}:{i}" for i in range(device_count(device_type))]
    return names


def devices() -> list[dict[str, Any]]:
    """Every visible device with its native target (None when unsupported) and why not."""
    rows = []
    for name in _device_names():
        row: dict[str, Any] = {"device": name, "description": describe_device(name)}
        try:
            target = native_target_for(name)
            row.update(native_target=target.name, arch=target.arch, reason=None)
        except UnsupportedTargetError:
            row.update(native_target=None, arch=None, reason="not a supported native target")
        rows.append(row)
    return rows


def supported_device() -> str | None:
    """The first device the native backend supports, or None."""
    for row in devices():
        if row["native_target"] is not None:
            return row["device"]
    return None


def native_targets() -> list[dict[str, Any]]:
    """The native target table joined with the compile profile of each target."""
    rows = []
    for target in NATIVE_TARGETS:
        profile = profile_for(target)
        rows.append(
            {
                "name": target.name,
                "device_type": target.device_type,
                "capability": f"{target.capability[0]}.{target.capability[1]}",
                "arch": target.arch,
                "toolchain": target.toolchain,
                "status": "verified" if target.verified else "by design, untested here",
                "profile": profile.name,
                "compile_target": dict(profile.target),
            }
        )
    return rows


def tilelang_config() -> dict[str, Any]:
    """TileLang cache location, the environment variables it reads, and nvcc."""
    env = {name: os.environ.get(name) for name in _TILELANG_VARS}
    cache = env["TILELANG_CACHE_DIR"] or os.path.expanduser(_DEFAULT_CACHE_DIR)
    return {
        "installed": mate_kernels_musa.tilelang_version() is not None,
        "cache_dir": cache,
        "cache_dir_source": "TILELANG_CACHE_DIR" if env["TILELANG_CACHE_DIR"] else "default",
        "env": env,
        "nvcc": shutil.which("nvcc"),
    }
