"""Scalar options of qsa_sparse_attention and the physical-path exclusions."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

import torch

from .checks import FP8_DTYPES, describe, require_bool, require_int, require_none, resolve_scale
from .errors import MateTypeError, MateValueError

__all__ = ["Options", "check_options", "check_kv_scales", "check_compute_dtype", "check_physical_exclusions"]


class Options(NamedTuple):
    """Resolved scalars: scale multiplier, num_splits (0 = choose) and the bool flags."""

    scale: float
    num_splits: int
    return_lse: bool
    warp_specialized: bool


def check_options(
    scale: object,
    softmax_scale: object,
    head_dim: int,
    num_splits: object,
    return_lse: object,
    warp_specialized: object,
) -> Options:
    """Resolve scale/softmax_scale and check num_splits and the bool flags."""
    resolved = resolve_scale(
        scale, softmax_scale, default=1.0 / math.sqrt(head_dim), other_name="softmax_scale", other_is_denominator=False
    )
    splits = require_int("num_splits", num_splits, minimum=1, optional=True)
    return Options(
        resolved,
        0 if splits is None else splits,
        require_bool("return_lse", return_lse),
        require_bool("warp_specialized", warp_specialized),
    )


def check_kv_scales(k_scale: object, v_scale: object) -> None:
    """k_scale/v_scale dequantize FP8 K/V, which is unsupported: both must be 1."""
    for name, x in (("k_scale", k_scale), ("v_scale", v_scale)):
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise MateTypeError(f"{name}: got {describe(x)}; expected the float 1.0")
        if x != 1.0:
            raise MateValueError(f"{name}: got {x!r}; expected 1.0 (FP8 KV is unsupported; K/V are BF16/FP16)")


def check_compute_dtype(compute_dtype: object, query_dtype: torch.dtype, physical: bool) -> None:
    """bfloat16, or (logical path) the query dtype; FP8 compute is not enabled."""
    if not isinstance(compute_dtype, torch.dtype):
        raise MateTypeError(f"compute_dtype: got {describe(compute_dtype)}; expected a torch.dtype (torch.bfloat16)")
    if compute_dtype in FP8_DTYPES:
        raise MateValueError(
            f"compute_dtype: got {describe(compute_dtype)}; FP8 compute is not supported, expected torch.bfloat16"
        )
    accepted = (torch.bfloat16,) if physical else (torch.bfloat16, query_dtype)
    if compute_dtype not in accepted:
        names = " or ".join(dict.fromkeys(describe(d) for d in accepted))
        where = " (selected_kv_indices path)" if physical else " (bfloat16 or the query dtype)"
        raise MateValueError(f"compute_dtype: got {describe(compute_dtype)}; expected {names}{where}")


def check_physical_exclusions(logical_args: Mapping[str, object]) -> None:
    """selected_kv_indices replaces request/page metadata, causal filtering and gating."""
    for name, x in logical_args.items():
        require_none(
            name,
            x,
            "selected_kv_indices gives physical K/V rows and cannot be combined with logical "
            "request/page metadata, token/block indices or gating",
        )
