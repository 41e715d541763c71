"""Validation of qsa_indexer_mqa_score: every rule rejects its bad input, every layout is accepted."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from mate_core import LayoutError, MateTypeError, MateValueError, UnsupportedTargetError, plan_indexer_score
from mate_core.checks import VECTOR_LOAD_MESSAGE

sys.path.insert(0, str(Path(__file__).parent))  # shared helpers live next to this file
from message_checks import names_argument

BF16 = torch.bfloat16
I32 = torch.int32


def _t(*shape, dtype=BF16, device="cpu"):
    if dtype.is_floating_point:
        return torch.randn(*shape, device="cpu").to(dtype).to(device)
    return torch.zeros(*shape, dtype=dtype, device=device)


def padded(**kw):
    """B=2, Q=5, H=4, D=128 padded queries against logical keys [2, 3, 128]."""
    args = {"q_idx": _t(2, 5, 4, 128), "block_keys": _t(2, 3, 128)}
    return {**args, **kw}


def varlen(**kw):
    """7 packed rows of 2 requests (cu_seqlens_q)."""
    args = {"q_idx": _t(7, 4, 128), "block_keys": _t(2, 3, 128), "cu_seqlens_q": torch.tensor([0, 3, 7], dtype=I32)}
    return {**args, **kw}


def paged(**kw):
    """Padded queries against a paged cache of 6 pages of 4 blocks, table [2, 2]."""
    args = {"q_idx": _t(2, 5, 4, 128), "block_keys": _t(6, 4, 1, 128), "block_table": _t(2, 2, dtype=I32)}
    return {**args, **kw}


def expect(exc, name, kwargs, backend="reference"):
    with pytest.raises(exc) as info:
        plan_indexer_score(**kwargs, backend=backend)
    if exc is not UnsupportedTargetError:  # a rule must fire before the arch gate
        assert not isinstance(info.value, UnsupportedTargetError), str(info.value)
    assert names_argument(str(info.value), name, plan_indexer_score), str(info.value)
    return info.value


GENERIC_BAD = [
    ("q_idx", MateTypeError, lambda: padded(q_idx=[[1.0]])),
    ("q_idx", MateTypeError, lambda: padded(q_idx=_t(2, 5, 4, 128, dtype=I32))),
    ("q_idx", MateValueError, lambda: padded(q_idx=_t(10, 512))),
    ("q_idx", MateValueError, lambda: padded(q_idx=_t(2, 5, 4, 0), block_keys=_t(2, 3, 0))),
    ("q_idx", MateValueError, lambda: padded(q_idx=_t(2, 5, 0, 128))),
    ("block_keys", MateTypeError, lambda: padded(block_keys=None)),
    ("block_keys", MateTypeError, lambda: padded(block_keys=_t(2, 3, 128, dtype=torch.float16))),
    ("block_keys", MateValueError, lambda: padded(block_keys=_t(2, 3, 128, device="meta"))),
    ("cu_seqlens_q", MateValueError, lambda: padded(cu_seqlens_q=torch.tensor([0, 5, 10], dtype=I32))),
    ("token_to_req", MateValueError, lambda: padded(token_to_req=_t(10, dtype=I32), num_requests=2)),
    ("num_requests", MateValueError, lambda: padded(num_requests=3)),
    ("num_requests", MateTypeError, lambda: padded(num_requests=True)),
    ("num_requests", MateValueError, lambda: padded(num_requests=-1)),
    ("token_to_req", MateValueError, lambda: varlen(token_to_req=_t(7, dtype=I32), num_requests=2)),
    ("cu_seqlens_q", MateValueError, lambda: varlen(cu_seqlens_q=None)),
    ("cu_seqlens_q", MateTypeError, lambda: varlen(cu_seqlens_q=torch.tensor([0.0, 3.0, 7.0]))),
    ("cu_seqlens_q", MateTypeError, lambda: varlen(cu_seqlens_q=[0, 3, 7])),
    ("cu_seqlens_q", MateValueError, lambda: varlen(cu_seqlens_q=_t(1, 3, dtype=I32))),
    ("cu_seqlens_q", MateValueError, lambda: varlen(cu_seqlens_q=_t(0, dtype=I32))),
    ("cu_seqlens_q", MateValueError, lambda: varlen(cu_seqlens_q=_t(3, dtype=I32, device="meta"))),
    ("num_requests", MateValueError, lambda: varlen(num_requests=3)),
    ("num_requests", MateValueError, lambda: varlen(cu_seqlens_q=None, token_to_req=_t(7, dtype=I32))),
    ("token_to_req", MateValueError, lambda: varlen(cu_seqlens_q=None, token_to_req=_t(6, dtype=I32), num_requests=2)),
    ("token_to_req", MateTypeError, lambda: varlen(cu_seqlens_q=None, token_to_req=_t(7), num_requests=2)),
    ("block_keys", MateValueError, lambda: padded(block_keys=_t(2, 3, 1, 128))),
    ("block_keys", MateValueError, lambda: padded(block_keys=_t(3, 3, 128))),
    ("block_keys", MateValueError, lambda: padded(block_keys=_t(2, 3, 64))),
    ("block_keys", MateValueError, lambda: varlen(block_keys=_t(1, 3, 128))),
    ("page_size", MateValueError, lambda: padded(page_size=4)),
    ("block_table", MateValueError, lambda: paged(block_table=_t(2, dtype=I32))),
    ("block_table", MateValueError, lambda: paged(block_table=_t(3, 2, dtype=I32))),
    ("block_table", MateTypeError, lambda: paged(block_table=_t(2, 2))),
    ("block_table", MateValueError, lambda: paged(block_table=_t(2, 2, dtype=I32, device="meta"))),
    ("block_keys", MateValueError, lambda: paged(block_keys=_t(6, 4, 2, 128))),
    ("block_keys", MateValueError, lambda: paged(block_keys=_t(24, 128))),
    ("block_keys", MateValueError, lambda: paged(block_keys=_t(6, 0, 128))),
    ("block_keys", MateValueError, lambda: paged(block_keys=_t(6, 4, 64))),
    ("page_size", MateValueError, lambda: paged(page_size=8)),
    ("page_size", MateValueError, lambda: paged(page_size=0)),
    ("page_size", MateTypeError, lambda: paged(page_size="4")),
    ("query_positions", MateValueError, lambda: padded(query_positions=_t(2, 4, dtype=I32))),
    ("query_positions", MateValueError, lambda: padded(query_positions=_t(5, 2, dtype=I32))),
    ("query_positions", MateTypeError, lambda: padded(query_positions=_t(2, 5))),
    ("query_positions", MateValueError, lambda: varlen(query_positions=_t(2, 5, dtype=I32))),
    ("seq_lens_q", MateValueError, lambda: padded(seq_lens_q=_t(3, dtype=I32))),
    ("seq_lens_q", MateTypeError, lambda: padded(seq_lens_q=_t(2, dtype=torch.int16))),
    ("seq_lens_q", MateValueError, lambda: padded(seq_lens_q=_t(2, dtype=I32, device="meta"))),
    ("block_size", MateValueError, lambda: padded(block_size=0)),
    ("block_size", MateTypeError, lambda: padded(block_size=4.0)),
    ("scale and score_scale", MateValueError, lambda: padded(scale=0.1, score_scale=10.0)),
    ("scale", MateValueError, lambda: padded(scale=-1.0)),
    ("scale", MateValueError, lambda: padded(scale=math.nan)),
    ("scale", MateValueError, lambda: padded(scale=math.inf)),
    ("scale", MateTypeError, lambda: padded(scale="0.1")),
    ("score_scale", MateValueError, lambda: padded(score_scale=0.0)),
    ("score_scale", MateTypeError, lambda: padded(score_scale=True)),
]


@pytest.mark.parametrize(("name", "exc", "make"), GENERIC_BAD)
@pytest.mark.parametrize("backend", ["reference", "tilelang"])
def test_generic_rule_rejects(name, exc, make, backend):
    expect(exc, name, make(), backend)


@pytest.mark.parametrize(
    ("backend", "exc"), [("auto", MateValueError), ("cuda", MateValueError), (None, MateTypeError)]
)
def test_backend_names(backend, exc):
    expect(exc, "backend", padded(), backend)


def _misaligned(*shape):
    flat = _t(math.prod(shape) + 1)
    return flat[1:].view(*shape)


NATIVE_BAD = [
    (
        "q_idx",
        MateTypeError,
        lambda: padded(q_idx=_t(2, 5, 4, 128, dtype=torch.float32), block_keys=_t(2, 3, 128, dtype=torch.float32)),
    ),
    ("seq_lens_q", MateTypeError, lambda: padded(seq_lens_q=_t(2, dtype=torch.int64))),
    ("query_positions", MateTypeError, lambda: padded(query_positions=_t(2, 5, dtype=torch.int64))),
    ("qsa_mqa_prefill", MateValueError, lambda: varlen()),
    ("q_idx", MateValueError, lambda: varlen(cu_seqlens_q=None, token_to_req=_t(7, dtype=I32), num_requests=2)),
    ("qsa_mqa_decode", MateValueError, lambda: paged()),
    ("block_table", MateValueError, lambda: paged(block_keys=_t(6, 4, 128))),
    ("q_idx", MateValueError, lambda: padded(q_idx=_t(2, 5, 8, 128))),
    ("q_idx", MateValueError, lambda: padded(q_idx=_t(2, 5, 4, 64), block_keys=_t(2, 3, 64))),
    ("block_size", MateValueError, lambda: padded(block_size=8)),
    # B spans a grid axis of at most 65535 CTAs
    (
        "65535",
        MateValueError,
        lambda: padded(q_idx=_t(1, 1, 4, 128).expand(65536, 1, 4, 128), block_keys=_t(1, 3, 128).expand(65536, 3, 128)),
    ),
]


@pytest.mark.parametrize(("name", "exc", "make"), NATIVE_BAD)
def test_native_only_rule_rejects_on_cpu(name, exc, make):
    expect(exc, name, make(), "tilelang")


@pytest.mark.parametrize(("name", "exc", "make"), NATIVE_BAD)
def test_native_only_rule_is_accepted_by_reference(name, exc, make):
    plan_indexer_score(**make(), backend="reference")


LAYOUT_BAD = [
    ("q_idx", lambda: padded(q_idx=_t(2, 5, 4, 256)[..., ::2])),
    ("q_idx", lambda: padded(q_idx=_misaligned(2, 5, 4, 128))),
    ("q_idx", lambda: padded(q_idx=_t(2, 5, 4, 130)[..., :128])),
    ("q_idx", lambda: padded(q_idx=_t(2, 5, 128, 4).transpose(-1, -2))),
    ("q_idx", lambda: padded(q_idx=_t(1, 5, 4, 128).expand(2, 5, 4, 128))),
    ("block_keys", lambda: padded(block_keys=_misaligned(2, 3, 128))),
    ("block_keys", lambda: padded(block_keys=_t(2, 3, 132)[..., :128])),
    ("block_keys", lambda: padded(block_keys=_t(2, 3, 256)[..., 1::2])),
]


@pytest.mark.parametrize(("name", "make"), LAYOUT_BAD)
def test_vector_load_rule(name, make):
    err = expect(LayoutError, name, make(), "tilelang")
    assert VECTOR_LOAD_MESSAGE in str(err)
    plan_indexer_score(**make(), backend="reference")  # the reference reads any strides


# The spec's wording, verbatim: callers may match it.
SPEC_VECTOR_LOAD_TEXT = (
    "vector loads require unit feature stride and 16-byte alignment; "
    "pass a contiguous copy or adjust the slice offsets instead"
)


def test_vector_load_message_is_the_spec_text():
    _name, make = LAYOUT_BAD[0]
    assert SPEC_VECTOR_LOAD_TEXT in str(expect(LayoutError, _name, make(), "tilelang"))


NATIVE_OK = [
    padded,
    lambda: padded(q_idx=_t(2, 9, 4, 128)[:, 2:7]),  # sliced: aligned outer strides
    lambda: padded(q_idx=_t(2, 5, 4, 136)[..., 8:]),  # storage offset 16 bytes, stride 272 bytes
    lambda: padded(q_idx=_t(5, 4, 128).as_strided((1, 5, 4, 128), (3, 512, 128, 1)), block_keys=_t(1, 3, 128)),
    lambda: padded(q_idx=_t(2, 5, 4, 128, dtype=torch.float16), block_keys=_t(2, 3, 128, dtype=torch.float16)),
    lambda: padded(num_requests=2, query_positions=_t(2, 5, dtype=I32), seq_lens_q=_t(2, dtype=I32)),
    lambda: padded(scale=0.5),
    lambda: padded(score_scale=3.0),
]


@pytest.mark.parametrize("make", NATIVE_OK)
def test_valid_native_call_on_cpu_reaches_the_arch_gate(make):
    err = expect(UnsupportedTargetError, "cpu", make(), "tilelang")
    assert "backend='reference'" in str(err)


def test_meta_tensors_reach_the_arch_gate():
    expect(
        UnsupportedTargetError,
        "meta",
        padded(q_idx=_t(2, 5, 4, 128, device="meta"), block_keys=_t(2, 3, 128, device="meta")),
        "tilelang",
    )


def _check_plan(plan, *, lead, width, num_requests, q_len, page_size=0):
    assert plan.result.shape == (*lead, width)
    assert plan.result.dtype == torch.float32
    assert plan.out.shape == (math.prod(lead), width)
    assert plan.out.data_ptr() == plan.result.data_ptr() or plan.out.numel() == 0
    assert plan.out._base is plan.result or plan.out is plan.result
    assert (plan.num_requests, plan.q_len, plan.num_blocks, plan.page_size) == (num_requests, q_len, width, page_size)
    assert plan.backend == "reference"


def test_accepts_padded_and_views_rows_without_copy():
    args = padded()
    plan = plan_indexer_score(**args, backend="reference")
    _check_plan(plan, lead=(2, 5), width=3, num_requests=2, q_len=5)
    assert plan.q.shape == (10, 4, 128) and plan.q.data_ptr() == args["q_idx"].data_ptr()
    assert plan.block_keys is args["block_keys"] and plan.block_table is None
    assert plan.scale == pytest.approx(1 / math.sqrt(128)) and plan.block_size == 4
    assert plan.padded and not plan.paged


def test_accepts_sliced_padded_queries_as_four_d():
    q = _t(2, 9, 4, 128)[:, 2:7]
    plan = plan_indexer_score(**padded(q_idx=q), backend="reference")
    assert plan.q.shape == (2, 5, 4, 128) and plan.q.data_ptr() == q.data_ptr()
    _check_plan(plan, lead=(2, 5), width=3, num_requests=2, q_len=5)


def test_accepts_varlen_cu_seqlens():
    args = varlen(num_requests=2, query_positions=_t(7, dtype=torch.int64), seq_lens_q=_t(2, dtype=torch.int64))
    plan = plan_indexer_score(**args, backend="reference")
    _check_plan(plan, lead=(7,), width=3, num_requests=2, q_len=0)
    assert plan.cu_seqlens_q is args["cu_seqlens_q"] and plan.token_to_req is None and not plan.padded


def test_accepts_varlen_token_to_req():
    args = varlen(cu_seqlens_q=None, token_to_req=_t(7, dtype=torch.int64), num_requests=2)
    plan = plan_indexer_score(**args, backend="reference")
    _check_plan(plan, lead=(7,), width=3, num_requests=2, q_len=0)
    assert plan.token_to_req is args["token_to_req"] and plan.cu_seqlens_q is None


def test_accepts_zero_requests():
    args = varlen(
        q_idx=_t(3, 4, 128), cu_seqlens_q=None, token_to_req=_t(3, dtype=I32), num_requests=0, block_keys=_t(0, 3, 128)
    )
    _check_plan(plan_indexer_score(**args, backend="reference"), lead=(3,), width=3, num_requests=0, q_len=0)


@pytest.mark.parametrize("keys_shape", [(6, 4, 1, 128), (6, 4, 128)])
@pytest.mark.parametrize("page_size", [None, 4])
def test_accepts_paged(keys_shape, page_size):
    args = paged(block_keys=_t(*keys_shape), page_size=page_size)
    plan = plan_indexer_score(**args, backend="reference")
    _check_plan(plan, lead=(2, 5), width=8, num_requests=2, q_len=5, page_size=4)
    assert plan.block_keys.shape == (6, 4, 128) and plan.block_keys.data_ptr() == args["block_keys"].data_ptr()
    assert plan.paged


def test_accepts_paged_varlen_with_int64_metadata():
    args = varlen(
        block_keys=_t(6, 4, 128), block_table=_t(2, 3, dtype=torch.int64), cu_seqlens_q=torch.tensor([0, 3, 7])
    )
    _check_plan(
        plan_indexer_score(**args, backend="reference"), lead=(7,), width=12, num_requests=2, q_len=0, page_size=4
    )


@pytest.mark.parametrize("shape", [(2, 5), (10,)])
def test_accepts_padded_positions_as_rows(shape):
    pos = torch.arange(10, dtype=I32).view(shape)
    plan = plan_indexer_score(**padded(query_positions=pos), backend="reference")
    assert plan.query_positions.shape == (10,) and plan.query_positions.data_ptr() == pos.data_ptr()


def test_accepts_sliced_positions_without_copy():
    # Metadata may be any sliced view (spec); a [B, Q] slice with no [rows] view stays 2-D.
    pos = torch.arange(12, dtype=I32).view(2, 6)[:, :5]
    plan = plan_indexer_score(**padded(query_positions=pos), backend="reference")
    assert plan.query_positions is pos


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [({}, 1 / math.sqrt(128)), ({"scale": 0.25}, 0.25), ({"score_scale": 8.0}, 0.125), ({"scale": 2}, 2.0)],
)
def test_scale_resolution(kwargs, expected):
    assert plan_indexer_score(**padded(**kwargs), backend="reference").scale == pytest.approx(expected)


def test_reference_accepts_float32_and_any_block_size():
    args = padded(q_idx=_t(2, 5, 3, 16, dtype=torch.float32), block_keys=_t(2, 3, 16, dtype=torch.float32))
    plan = plan_indexer_score(**args, block_size=7, backend="reference")
    assert plan.block_size == 7 and plan.scale == pytest.approx(0.25)


@pytest.mark.parametrize(
    "make",
    [
        padded,
        varlen,
        paged,
        lambda: varlen(
            cu_seqlens_q=None,
            token_to_req=_t(7, dtype=I32),
            num_requests=2,
            block_table=_t(2, 2, dtype=I32),
            block_keys=_t(6, 4, 128),
        ),
    ],
)
def test_meta_tensors_validate_without_device_reads(make):
    args = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in make().items()}
    plan = plan_indexer_score(**args, seq_lens_q=torch.empty(2, dtype=I32, device="meta"), backend="reference")
    assert plan.out.device.type == "meta" and plan.result.dtype == torch.float32


def test_native_key_count_bound():
    # The score kernel's plain-store path puts 4096-key chunks on a grid axis of 65535 (meta: no memory).
    from mate_core._mqa_common import NATIVE_MAX_KEYS

    def call(keys: int):
        meta = {"device": "meta", "dtype": torch.bfloat16}
        return plan_indexer_score(torch.empty(1, 2, 4, 128, **meta), torch.empty(1, keys, 128, **meta))

    with pytest.raises(MateValueError, match=rf"^block_keys: got {NATIVE_MAX_KEYS + 1} keys; backend='tilelang'"):
        call(NATIVE_MAX_KEYS + 1)
    with pytest.raises(UnsupportedTargetError, match="meta"):
        call(NATIVE_MAX_KEYS)
