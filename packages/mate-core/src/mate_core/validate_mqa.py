"""Validation of the MQA indexer entry points (placeholder until implemented)."""

from __future__ import annotations


def plan_indexer_score(*args, **kwargs):  # pragma: no cover - replaced by the implementation
    raise NotImplementedError("plan_indexer_score is not implemented yet")


def plan_mqa_prefill(*args, **kwargs):  # pragma: no cover
    raise NotImplementedError("plan_mqa_prefill is not implemented yet")


def plan_mqa_decode(*args, **kwargs):  # pragma: no cover
    raise NotImplementedError("plan_mqa_decode is not implemented yet")
