"""MATE-QSA: Qwen Sparse Attention (indexer scoring and sparse core attention) for PyTorch.

QSA runs in two stages: a lightweight MQA indexer scores compressed 4-token
blocks (:func:`qsa_indexer_mqa_score`, :func:`qsa_mqa_prefill` / :func:`qsa_mqa`,
:func:`qsa_mqa_decode`); the caller keeps the top-scoring blocks
(:func:`topk_blocks`) and expands them to token ids (:func:`expand_blocks`);
core attention then runs over those tokens (:func:`qsa_sparse_attention`).

Every entry point takes ``backend="tilelang"`` (default: native kernels on a
supported GPU, raising otherwise) or ``backend="reference"`` (the FP32 PyTorch
oracle, any device). Under ``torch.compile`` each goes through a ``torch.library``
custom op (``torch.ops.mate.*``), so ``torch.compile(fullgraph=True)`` traces through it.
"""

from __future__ import annotations

__version__ = "0.1.0"

from mate_core.errors import (
    BackendUnavailableError,
    GraphCaptureError,
    LayoutError,
    MateError,
    MateTypeError,
    MateValueError,
    UnsupportedTargetError,
)
from mate_reference.selection import expand_blocks, topk_blocks

from .mqa import qsa_indexer_mqa_score, qsa_mqa, qsa_mqa_decode, qsa_mqa_prefill
from .sparse import qsa_sparse_attention

__all__ = [
    "BackendUnavailableError",
    "GraphCaptureError",
    "LayoutError",
    "MateError",
    "MateTypeError",
    "MateValueError",
    "UnsupportedTargetError",
    "__version__",
    "expand_blocks",
    "qsa_indexer_mqa_score",
    "qsa_mqa",
    "qsa_mqa_decode",
    "qsa_mqa_prefill",
    "qsa_sparse_attention",
    "topk_blocks",
]
