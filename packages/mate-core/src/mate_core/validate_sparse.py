"""Validation of qsa_sparse_attention (placeholder until implemented)."""

from __future__ import annotations


def plan_sparse_attention(*args, **kwargs):  # pragma: no cover
    raise NotImplementedError("plan_sparse_attention is not implemented yet")
