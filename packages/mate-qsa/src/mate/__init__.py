"""MATE-QSA: Qwen Sparse Attention (indexer scoring and sparse core attention) for PyTorch."""

from __future__ import annotations

__version__ = "0.1.0"
