"""Rules found missing by an API audit (session 16): every entry point rejects sparse-layout
tensors, scales whose FP32 multiplier is not a normal number, ints past int32, and gives the
layout error, not an int32 demand, for metadata of layouts backend='tilelang' cannot run."""

from __future__ import annotations

import pytest
import torch

from mate_core import (
    MateTypeError,
    MateValueError,
    plan_indexer_score,
    plan_mqa_decode,
    plan_mqa_prefill,
    plan_sparse_attention,
)

BF16, I32 = torch.bfloat16, torch.int32


def _prefill(**kw):
    args = {"q": torch.randn(3, 4, 128).to(BF16), "k": torch.randn(16, 128).to(BF16),
            "row_starts": torch.zeros(3, dtype=I32), "row_ends": torch.full((3,), 16, dtype=I32)}  # fmt: skip
    return plan_mqa_prefill(**{**args, **kw}, backend="reference")


def _decode(**kw):
    args = {"q": torch.randn(2, 4, 128).to(BF16), "k_cache": torch.randn(3, 16, 1, 128).to(BF16),
            "page_table": torch.zeros(2, 2, dtype=I32), "context_lens": torch.full((2,), 20, dtype=I32),
            "max_model_len": 32}  # fmt: skip
    return plan_mqa_decode(**{**args, **kw}, backend="reference")


def _indexer(**kw):
    args = {"q_idx": torch.randn(2, 5, 4, 128).to(BF16), "block_keys": torch.randn(2, 3, 128).to(BF16)}
    return plan_indexer_score(**{**args, **kw}, backend="reference")


def _sparse(**kw):
    args = {"query": torch.randn(2, 3, 4, 16), "key": torch.randn(2, 8, 2, 16), "value": torch.randn(2, 8, 2, 16),
            "token_indices": torch.zeros(2, 3, 5, dtype=I32)}  # fmt: skip
    return plan_sparse_attention(**{**args, **kw}, backend="reference")


SPARSE_LAYOUT = [
    (_prefill, "row_starts", torch.zeros(3, dtype=I32)),
    (_prefill, "k", torch.randn(16, 128).to(BF16)),
    (_decode, "page_table", torch.zeros(2, 2, dtype=I32)),
    (_indexer, "q_idx", torch.randn(2, 5, 4, 128).to(BF16)),
    (_sparse, "token_indices", torch.zeros(2, 3, 5, dtype=I32)),
    (_sparse, "key", torch.randn(2, 8, 2, 16)),
]


@pytest.mark.parametrize(
    ("plan", "name", "dense"), SPARSE_LAYOUT, ids=[f"{p.__name__}-{n}" for p, n, _ in SPARSE_LAYOUT]
)
def test_sparse_layout_tensors_are_rejected(plan, name, dense):
    plan(**{name: dense})  # the dense tensor is accepted
    with pytest.raises(MateTypeError, match=f"^{name}: got a tensor with layout torch.sparse_coo; expected a dense"):
        plan(**{name: dense.to_sparse()})


@pytest.mark.parametrize(("plan", "kw", "name"), [
    (_prefill, {"score_scale": 1e-310}, "score_scale"),  # 1 / 1e-310 is inf
    (_prefill, {"scale": 1e39}, "scale"),  # finite in Python, inf in FP32
    (_indexer, {"scale": 1e-45}, "scale"),  # subnormal in FP32
    (_decode, {"scale": 1e300}, "scale"),
    (_sparse, {"softmax_scale": 1e39}, "softmax_scale"),
])  # fmt: skip
def test_scales_outside_fp32_normal_range_are_rejected(plan, kw, name):
    with pytest.raises(MateValueError, match=f"^{name}: got .*FP32's normal range"):
        plan(**kw)


@pytest.mark.parametrize("name", ["scale", "score_scale"])
def test_int_scales_past_float_range_are_value_errors(name):
    with pytest.raises(MateValueError, match=f"^{name}: got 1000.*expected a finite positive float"):
        _prefill(**{name: 10**400})


def test_fp32_extremes_are_accepted():
    assert _prefill(scale=3e38).scale == 3e38
    assert _prefill(score_scale=1e30).scale == pytest.approx(1e-30)


@pytest.mark.parametrize(("plan", "name"), [
    (_decode, "max_model_len"), (_indexer, "block_size"), (_sparse, "num_splits"), (_sparse, "num_requests"),
])  # fmt: skip
def test_sizes_past_int32_are_rejected(plan, name):
    with pytest.raises(MateValueError, match=f"^{name}: got {2**31}; expected an int <= {2**31 - 1}"):
        plan(**{name: 2**31})


def test_indexer_varlen_error_comes_before_the_int32_rule():
    # cu_seqlens_q only exists with varlen q_idx, which tilelang rejects: asking for int32 would not help.
    args = {"q_idx": torch.randn(7, 4, 128).to(BF16), "block_keys": torch.randn(2, 3, 128).to(BF16),
            "cu_seqlens_q": torch.tensor([0, 3, 7])}  # fmt: skip
    with pytest.raises(MateValueError, match=r"^q_idx: got varlen .*backend='reference'"):
        plan_indexer_score(**args)
