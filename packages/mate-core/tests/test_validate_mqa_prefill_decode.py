"""Validation of qsa_mqa_prefill (qsa_mqa) and qsa_mqa_decode."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from mate_core import (
    LayoutError,
    MateTypeError,
    MateValueError,
    UnsupportedTargetError,
    plan_mqa_decode,
    plan_mqa_prefill,
)
from mate_core.checks import VECTOR_LOAD_MESSAGE

sys.path.insert(0, str(Path(__file__).parent))  # shared helpers live next to this file
from message_checks import names_argument

BF16 = torch.bfloat16
I32 = torch.int32
I64 = torch.int64


def _t(*shape, dtype=BF16, device="cpu"):
    if dtype.is_floating_point:
        return torch.randn(*shape).to(dtype).to(device)
    return torch.zeros(*shape, dtype=dtype, device=device)


def prefill(**kw):
    """6 rows x 4 heads x 128 against 9 shared keys."""
    args = {"q": _t(6, 4, 128), "k": _t(9, 128), "row_starts": _t(6, dtype=I32), "row_ends": _t(6, dtype=I32)}
    return {**args, **kw}


def decode(**kw):
    """3 requests, 5 pages of 16 keys, table [3, 4], max_model_len 40."""
    args = {
        "q": _t(3, 4, 128),
        "k_cache": _t(5, 16, 1, 128),
        "page_table": _t(3, 4, dtype=I32),
        "context_lens": _t(3, dtype=I32),
        "max_model_len": 40,
    }
    return {**args, **kw}


PLANNERS = {"prefill": plan_mqa_prefill, "decode": plan_mqa_decode}
BUILDERS = {"prefill": prefill, "decode": decode}


def expect(exc, name, which, kwargs, backend="reference"):
    with pytest.raises(exc) as info:
        PLANNERS[which](**kwargs, backend=backend)
    if exc is not UnsupportedTargetError:  # a rule must fire before the arch gate
        assert not isinstance(info.value, UnsupportedTargetError), str(info.value)
    assert names_argument(str(info.value), name, plan_mqa_prefill, plan_mqa_decode), str(info.value)
    return info.value


def _misaligned(*shape):
    return _t(math.prod(shape) + 1)[1:].view(*shape)


GENERIC_BAD = [
    ("prefill", "q", MateTypeError, lambda: prefill(q=None)),
    ("prefill", "q", MateTypeError, lambda: prefill(q=_t(6, 4, 128, dtype=I32))),
    ("prefill", "q", MateValueError, lambda: prefill(q=_t(1, 6, 4, 128))),
    ("prefill", "q", MateValueError, lambda: prefill(q=_t(6, 0, 128))),
    ("prefill", "k", MateTypeError, lambda: prefill(k=_t(9, 128, dtype=torch.float16))),
    ("prefill", "k", MateValueError, lambda: prefill(k=_t(9 * 128))),
    ("prefill", "k", MateValueError, lambda: prefill(k=_t(9, 2, 128))),
    ("prefill", "k", MateValueError, lambda: prefill(k=_t(9, 64))),
    ("prefill", "k", MateValueError, lambda: prefill(k=_t(9, 128, device="meta"))),
    ("prefill", "row_starts", MateValueError, lambda: prefill(row_starts=_t(7, dtype=I32))),
    ("prefill", "row_starts", MateTypeError, lambda: prefill(row_starts=_t(6))),
    ("prefill", "row_starts", MateTypeError, lambda: prefill(row_starts=[0] * 6)),
    ("prefill", "row_starts", MateValueError, lambda: prefill(row_starts=_t(6, dtype=I32, device="meta"))),
    ("prefill", "row_ends", MateValueError, lambda: prefill(row_ends=_t(6, 1, dtype=I32))),
    ("prefill", "row_ends", MateTypeError, lambda: prefill(row_ends=_t(6, dtype=torch.int16))),
    ("prefill", "scale and score_scale", MateValueError, lambda: prefill(score_scale=2.0, scale=0.5)),
    ("prefill", "score_scale", MateValueError, lambda: prefill(score_scale=-2.0)),
    ("prefill", "scale", MateValueError, lambda: prefill(scale=0.0)),
    ("decode", "q", MateValueError, lambda: decode(q=_t(3, 512))),
    ("decode", "q", MateValueError, lambda: decode(q=_t(3, 2, 4, 128))),
    ("decode", "q", MateTypeError, lambda: decode(q=_t(3, 4, 128, dtype=torch.bool))),
    ("decode", "k_cache", MateTypeError, lambda: decode(k_cache=_t(5, 16, 1, 128, dtype=torch.float16))),
    ("decode", "k_cache", MateValueError, lambda: decode(k_cache=_t(80, 128))),
    ("decode", "k_cache", MateValueError, lambda: decode(k_cache=_t(5, 16, 2, 128))),
    ("decode", "k_cache", MateValueError, lambda: decode(k_cache=_t(5, 16, 1, 64))),
    ("decode", "k_cache", MateValueError, lambda: decode(k_cache=_t(5, 0, 128))),
    ("decode", "k_cache", MateValueError, lambda: decode(k_cache=_t(5, 16, 128, device="meta"))),
    ("decode", "page_table", MateValueError, lambda: decode(page_table=_t(12, dtype=I32))),
    ("decode", "page_table", MateValueError, lambda: decode(page_table=_t(2, 4, dtype=I32))),
    ("decode", "page_table", MateTypeError, lambda: decode(page_table=_t(3, 4))),
    ("decode", "page_table", MateValueError, lambda: decode(page_table=_t(3, 4, dtype=I32, device="meta"))),
    ("decode", "context_lens", MateValueError, lambda: decode(context_lens=_t(4, dtype=I32))),
    ("decode", "context_lens", MateTypeError, lambda: decode(context_lens=_t(3, dtype=torch.uint8))),
    ("decode", "max_model_len", MateValueError, lambda: decode(max_model_len=0)),
    ("decode", "max_model_len", MateTypeError, lambda: decode(max_model_len=40.0)),
    ("decode", "max_model_len", MateTypeError, lambda: decode(max_model_len=True)),
    ("decode", "scale and score_scale", MateValueError, lambda: decode(score_scale=2.0, scale=0.5)),
    ("decode", "score_scale", MateValueError, lambda: decode(score_scale=math.inf)),
    ("decode", "score_scale", MateTypeError, lambda: decode(score_scale="2")),
]


@pytest.mark.parametrize(("which", "name", "exc", "make"), GENERIC_BAD)
@pytest.mark.parametrize("backend", ["reference", "tilelang"])
def test_generic_rule_rejects(which, name, exc, make, backend):
    expect(exc, name, which, make(), backend)


@pytest.mark.parametrize("which", ["prefill", "decode"])
@pytest.mark.parametrize(
    ("backend", "exc"), [("auto", MateValueError), ("Reference", MateValueError), (0, MateTypeError)]
)
def test_backend_names(which, backend, exc):
    expect(exc, "backend", which, BUILDERS[which](), backend)


NATIVE_BAD = [
    (
        "prefill",
        "q",
        MateTypeError,
        lambda: prefill(q=_t(6, 4, 128, dtype=torch.float32), k=_t(9, 128, dtype=torch.float32)),
    ),
    ("prefill", "row_starts", MateTypeError, lambda: prefill(row_starts=_t(6, dtype=I64))),
    ("prefill", "row_ends", MateTypeError, lambda: prefill(row_ends=_t(6, dtype=I64))),
    ("prefill", "q", MateValueError, lambda: prefill(q=_t(6, 2, 128))),
    ("prefill", "q", MateValueError, lambda: prefill(q=_t(6, 4, 64), k=_t(9, 64))),
    (
        "decode",
        "q",
        MateTypeError,
        lambda: decode(q=_t(3, 4, 128, dtype=torch.float32), k_cache=_t(5, 16, 128, dtype=torch.float32)),
    ),
    ("decode", "page_table", MateTypeError, lambda: decode(page_table=_t(3, 4, dtype=I64))),
    ("decode", "context_lens", MateTypeError, lambda: decode(context_lens=_t(3, dtype=I64))),
    ("decode", "q", MateValueError, lambda: decode(q=_t(3, 1, 8, 128))),
    ("decode", "q", MateValueError, lambda: decode(q=_t(3, 4, 256), k_cache=_t(5, 16, 256))),
    ("decode", "k_cache", MateValueError, lambda: decode(k_cache=_t(5, 12, 1, 128))),
    ("decode", "k_cache", MateValueError, lambda: decode(k_cache=_t(5, 128, 128))),
    ("decode", "k_cache", MateValueError, lambda: decode(k_cache=_t(5, 1, 128))),
    # B spans a grid axis of at most 65535 CTAs
    (
        "decode",
        "65535",
        MateValueError,
        lambda: decode(
            q=_t(1, 4, 128).expand(65536, 4, 128), page_table=_t(65536, 4, dtype=I32), context_lens=_t(65536, dtype=I32)
        ),
    ),
]


@pytest.mark.parametrize(("which", "name", "exc", "make"), NATIVE_BAD)
def test_native_only_rule_rejects_on_cpu(which, name, exc, make):
    err = expect(exc, name, which, make(), "tilelang")
    if name == "k_cache":
        assert "backend='reference'" in str(err) and "[8, 16, 32, 64]" in str(err)


@pytest.mark.parametrize(("which", "name", "exc", "make"), NATIVE_BAD)
def test_native_only_rule_is_accepted_by_reference(which, name, exc, make):
    PLANNERS[which](**make(), backend="reference")


LAYOUT_BAD = [
    ("q", lambda: prefill(q=_t(6, 4, 256)[..., ::2])),
    ("q", lambda: prefill(q=_misaligned(6, 4, 128))),
    ("q", lambda: prefill(q=_t(6, 4, 129)[..., :128])),
    ("q", lambda: prefill(q=_t(1, 4, 128).expand(6, 4, 128))),
    ("k", lambda: prefill(k=_misaligned(9, 128))),
    ("k", lambda: prefill(k=_t(9, 130)[:, :128])),
    ("k", lambda: prefill(k=_t(128, 9).t())),
    ("k", lambda: prefill(k=_t(9, 1, 136)[..., 4:132])),
]


@pytest.mark.parametrize(("name", "make"), LAYOUT_BAD)
def test_prefill_vector_load_rule(name, make):
    err = expect(LayoutError, name, "prefill", make(), "tilelang")
    assert VECTOR_LOAD_MESSAGE in str(err)
    plan_mqa_prefill(**make(), backend="reference")


NATIVE_OK = [
    ("prefill", prefill),
    ("prefill", lambda: prefill(k=_t(9, 1, 128))),
    ("prefill", lambda: prefill(q=_t(8, 4, 136)[1:7, :, 8:], k=_t(12, 128)[2:11])),
    ("prefill", lambda: prefill(q=_t(6, 4, 128, dtype=torch.float16), k=_t(9, 128, dtype=torch.float16))),
    ("prefill", lambda: prefill(score_scale=2.0)),
    ("decode", decode),
    ("decode", lambda: decode(q=_t(3, 1, 4, 128), k_cache=_t(5, 64, 128))),
    # decode is not subject to the vector-load rule: broadcast and odd strides are fine natively
    ("decode", lambda: decode(q=_t(1, 4, 128).expand(3, 4, 128))),
    ("decode", lambda: decode(q=_t(3, 4, 256)[..., ::2], k_cache=_misaligned(5, 8, 128))),
    ("decode", lambda: decode(k_cache=_t(5, 32, 1, 128), scale=0.5)),
]


@pytest.mark.parametrize(("which", "make"), NATIVE_OK)
def test_valid_native_call_on_cpu_reaches_the_arch_gate(which, make):
    err = expect(UnsupportedTargetError, "cpu", which, make(), "tilelang")
    assert "backend='reference'" in str(err)


@pytest.mark.parametrize("which", ["prefill", "decode"])
def test_meta_tensors(which):
    args = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in BUILDERS[which]().items()}
    plan = PLANNERS[which](**args, backend="reference")
    assert plan.out.device.type == "meta" and plan.out.dtype == torch.float32
    expect(UnsupportedTargetError, "meta", which, args, "tilelang")


@pytest.mark.parametrize("k_shape", [(9, 128), (9, 1, 128)])
def test_prefill_plan(k_shape):
    args = prefill(k=_t(*k_shape), row_starts=_t(6, dtype=I64), score_scale=4.0)
    plan = plan_mqa_prefill(**args, backend="reference")
    assert plan.out.shape == (6, 9) and plan.out.dtype == torch.float32
    assert plan.q is args["q"] and plan.k.shape == (9, 128) and plan.k.data_ptr() == args["k"].data_ptr()
    assert plan.row_starts is args["row_starts"] and plan.row_ends is args["row_ends"]
    assert plan.scale == pytest.approx(0.25) and plan.backend == "reference"


def test_prefill_positional_score_scale_and_float32():
    args = prefill(q=_t(6, 3, 16, dtype=torch.float32), k=_t(9, 16, dtype=torch.float32))
    plan = plan_mqa_prefill(args["q"], args["k"], args["row_starts"], args["row_ends"], 2.0, backend="reference")
    assert plan.scale == pytest.approx(0.5)
    assert plan_mqa_prefill(**args, backend="reference").scale == pytest.approx(0.25)


@pytest.mark.parametrize("q_shape", [(3, 4, 128), (3, 1, 4, 128)])
@pytest.mark.parametrize("k_shape", [(5, 16, 1, 128), (5, 16, 128), (5, 7, 128)])
def test_decode_plan(q_shape, k_shape):
    args = decode(q=_t(*q_shape), k_cache=_t(*k_shape), page_table=_t(3, 4, dtype=I64))
    plan = plan_mqa_decode(**args, backend="reference")
    assert plan.out.shape == (3, 40) and plan.out.dtype == torch.float32
    assert plan.q.shape == (3, 4, 128) and plan.q.data_ptr() == args["q"].data_ptr()
    assert plan.k_cache.shape == (5, k_shape[1], 128) and plan.k_cache.data_ptr() == args["k_cache"].data_ptr()
    assert plan.page_size == k_shape[1] and plan.max_model_len == 40
    assert plan.page_table is args["page_table"] and plan.context_lens is args["context_lens"]
    assert plan.scale == pytest.approx(1 / math.sqrt(128))


def test_decode_positional_score_scale_and_broadcast_q():
    args = decode(q=_t(1, 4, 128).expand(3, 4, 128))
    plan = plan_mqa_decode(
        args["q"], args["k_cache"], args["page_table"], args["context_lens"], 40, 8.0, backend="reference"
    )
    assert plan.scale == pytest.approx(0.125) and plan.q.stride(0) == 0


def test_native_prefill_key_count_bound():
    # The score kernel's plain-store path puts 4096-key chunks on a grid axis of 65535 (meta: no memory).
    from mate_core._mqa_common import NATIVE_MAX_KEYS

    def call(keys: int):
        meta = {"device": "meta", "dtype": torch.bfloat16}
        ids = torch.empty(2, device="meta", dtype=torch.int32)
        return plan_mqa_prefill(torch.empty(2, 4, 128, **meta), torch.empty(keys, 128, **meta), ids, ids)

    assert NATIVE_MAX_KEYS == 65535 * 4096
    with pytest.raises(MateValueError, match=rf"^k: got {NATIVE_MAX_KEYS + 1} keys; backend='tilelang' scores at most"):
        call(NATIVE_MAX_KEYS + 1)
    with pytest.raises(UnsupportedTargetError, match="meta"):
        call(NATIVE_MAX_KEYS)
