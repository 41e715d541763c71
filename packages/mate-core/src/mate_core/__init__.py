"""mate_core: validation, normalized plans, errors and the native target table of MATE-QSA.

The public ``plan_*`` functions validate one call of the matching ``mate.qsa_*``
entry point (shape, dtype, device, layout, exclusions; never reading device
memory) and return a plan that backends execute without re-validating.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .arch import NATIVE_TARGETS, NativeTarget, describe_device, native_target_for
from .errors import (
    BackendUnavailableError,
    GraphCaptureError,
    LayoutError,
    MateError,
    MateTypeError,
    MateValueError,
    UnsupportedTargetError,
)
from .plans import IndexerScorePlan, MQADecodePlan, MQAPrefillPlan, SparseAttentionPlan
from .validate_mqa import plan_indexer_score, plan_mqa_decode, plan_mqa_prefill
from .validate_sparse import plan_sparse_attention

__all__ = [
    "__version__",
    "NATIVE_TARGETS",
    "NativeTarget",
    "describe_device",
    "native_target_for",
    "BackendUnavailableError",
    "GraphCaptureError",
    "LayoutError",
    "MateError",
    "MateTypeError",
    "MateValueError",
    "UnsupportedTargetError",
    "IndexerScorePlan",
    "MQADecodePlan",
    "MQAPrefillPlan",
    "SparseAttentionPlan",
    "plan_indexer_score",
    "plan_mqa_decode",
    "plan_mqa_prefill",
    "plan_sparse_attention",
]
