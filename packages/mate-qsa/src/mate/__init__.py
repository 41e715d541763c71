"""MATE-QSA: Qwen Sparse Attention (indexer scoring and sparse core attention) for PyTorch.

QSA runs in two stages: a lightweight MQA indexer scores compressed 4-token
blocks (:func:`qsa_indexer_mqa_score`, :func:`qsa_mqa_prefill` / :func:`qsa_mqa`,
:func:`qsa_mqa_decode`); the caller keeps the top-scoring blocks
(:func:`topk_blocks`) and expands them to token ids (:func:`expand_blocks`);
core attention then runs over those tokens (:func:`qsa_sparse_attention`).

The four compute entry points (the indexer and attention functions, not the two selection
helpers) take ``backend="tilelang"`` (default: native kernels on a supported GPU, raising
otherwise) or ``backend="reference"`` (the FP32 PyTorch oracle, any device). Under
``torch.compile`` each goes through a ``torch.library`` custom op (``torch.ops.mate.*``), so
``torch.compile(fullgraph=True)`` traces through it.

Errors: every exception MATE-QSA raises itself is a :class:`MateError`, and also the builtin
its case calls for. :class:`MateValueError` (``ValueError``): a bad value, shape, device,
layout or combination; its subclasses :class:`UnsupportedTargetError` (a device without
native kernels, raised before anything compiles) and :class:`LayoutError` (a view that breaks
the native vector-load rule). :class:`MateTypeError` (``TypeError``): a wrong Python type or
an unsupported dtype. :class:`BackendUnavailableError` (``RuntimeError``): TileLang is not
installed. :class:`GraphCaptureError` (``RuntimeError``): a native call that a CUDA-graph
capture would not record correctly. Errors from torch, TileLang or the driver pass through.
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
