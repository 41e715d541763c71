"""mate_reference: the FP32 PyTorch oracle of every MATE-QSA entry point (runs on the CPU)."""

from __future__ import annotations

__version__ = "0.1.0"

from .api import qsa_indexer_mqa_score, qsa_mqa, qsa_mqa_decode, qsa_mqa_prefill
from .mqa import indexer_score, mqa_decode, mqa_prefill
from .selection import expand_blocks, topk_blocks
from .sparse import qsa_sparse_attention, sparse_attention

__all__ = [
    "__version__",
    "expand_blocks",
    "indexer_score",
    "mqa_decode",
    "mqa_prefill",
    "qsa_indexer_mqa_score",
    "qsa_mqa",
    "qsa_mqa_decode",
    "qsa_mqa_prefill",
    "qsa_sparse_attention",
    "sparse_attention",
    "topk_blocks",
]
