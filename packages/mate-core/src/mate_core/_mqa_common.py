"""Checks shared by the three MQA indexer entry points (score, packed prefill, paged decode).

Like everything in :mod:`mate_core.checks`, these read tensor metadata only.
"""

from __future__ import annotations

import math

import torch

from .arch import native_target_for
from .checks import (
    DATA_DTYPES,
    NATIVE_MAX_GRID_YZ,
    describe,
    require_dtype,
    require_same_device,
    require_tensor,
    resolve_scale,
)
from .errors import MateTypeError, MateValueError

NATIVE_HEADS = 4
NATIVE_DIM = 128
REFERENCE_DTYPES = (*DATA_DTYPES, torch.float32)
# The score kernel's CTAs take 64 key tiles of 64 keys each, one chunk per grid-y index on the
# plain-store path (mqa_score_kernel.BLOCK_KEYS * TILES_PER_CTA; the kernels' tests tie the two).
NATIVE_KEYS_PER_CHUNK = 4096
NATIVE_MAX_KEYS = NATIVE_MAX_GRID_YZ * NATIVE_KEYS_PER_CHUNK


def require_data(name: str, x: object, backend: str) -> torch.Tensor:
    """A query/key tensor: bf16/fp16 natively, float32 additionally on the reference."""
    t = require_tensor(name, x)
    if backend == "tilelang":
        require_dtype(name, t, DATA_DTYPES, "for backend='tilelang' (backend='reference' also accepts float32)")
    else:
        require_dtype(name, t, REFERENCE_DTYPES)
    return t


def require_like(name: str, t: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    """``t`` must share ``ref``'s dtype and device (Q and K dtypes are equal)."""
    if t.dtype != ref.dtype:
        raise MateTypeError(
            f"{name}: got dtype {describe(t.dtype)}; expected the dtype of {ref_name} ({describe(ref.dtype)})"
        )
    require_same_device(name, t, ref_name, ref)


def drop_unit_axis(name: str, t: torch.Tensor, axis: int, layout: str) -> torch.Tensor:
    """View of ``t`` without ``axis``, which must have size 1 (e.g. the shared key head)."""
    if t.shape[axis] != 1:
        raise MateValueError(f"{name}: got shape {list(t.shape)}; expected {layout} (axis {axis} must have size 1)")
    return t.select(axis, 0)


def heads_and_dim(name: str, t: torch.Tensor) -> tuple[int, int]:
    """``(H, D)`` of a ``[..., H, D]`` query; both must be positive."""
    heads, dim = t.shape[-2], t.shape[-1]
    if heads < 1 or dim < 1:
        raise MateValueError(f"{name}: got shape {list(t.shape)}; expected at least one head and a feature dim >= 1")
    return heads, dim


def require_feature_dim(name: str, t: torch.Tensor, dim: int, ref_name: str) -> None:
    if t.shape[-1] != dim:
        raise MateValueError(
            f"{name}: got shape {list(t.shape)} (feature dim {t.shape[-1]}); expected feature dim {dim} to match {ref_name}"
        )


def require_native_geometry(name: str, heads: int, dim: int) -> None:
    if (heads, dim) != (NATIVE_HEADS, NATIVE_DIM):
        raise MateValueError(
            f"{name}: got heads={heads}, dim={dim}; backend='tilelang' supports heads x dim == "
            f"{NATIVE_HEADS} x {NATIVE_DIM} only; pass backend='reference' for other geometries"
        )


def require_native_keys(name: str, keys: int) -> None:
    """backend='tilelang' scores at most :data:`NATIVE_MAX_KEYS` keys per request (a grid axis)."""
    if keys > NATIVE_MAX_KEYS:
        raise MateValueError(
            f"{name}: got {keys} keys; backend='tilelang' scores at most {NATIVE_MAX_KEYS} "
            f"({NATIVE_MAX_GRID_YZ} grid rows of {NATIVE_KEYS_PER_CHUNK} keys); split the keys across "
            "calls or pass backend='reference'"
        )


def mqa_scale(scale: object, score_scale: object, dim: int) -> float:
    """Resolved multiplier: ``scale``, or ``1 / score_scale``, or ``1 / sqrt(dim)``."""
    return resolve_scale(
        scale, score_scale, default=1.0 / math.sqrt(dim), other_name="score_scale", other_is_denominator=True
    )


def native_gate(backend: str, device: torch.device) -> None:
    """The architecture gate, run last (after every shape/dtype/layout rule)."""
    if backend == "tilelang":
        native_target_for(device)


def empty_scores(shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """FP32 score buffer; backends write every element, so it is never zero-filled."""
    return torch.empty(shape, dtype=torch.float32, device=device)
