"""backend='tilelang' rules of plan_sparse_attention on the CPU.

A CPU tensor is never a native target, so an otherwise valid call must end in
UnsupportedTargetError (the arch gate runs last); each tilelang-only rule
violation must raise its own error first.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from mate_core import LayoutError, MateTypeError, MateValueError, UnsupportedTargetError, plan_sparse_attention
from mate_core.checks import VECTOR_LOAD_MESSAGE

sys.path.insert(0, str(Path(__file__).parent))  # shared case builders live next to this file
from test_validate_sparse_cases import NATIVE, ROWS, B, apply, ints, lead, misaligned, sparse_call


def _native(gen, **layout):
    return sparse_call(gen, **{**NATIVE, **layout})


VALID = [
    ({}, {}),
    ({"query": "cu_seqlens"}, {}),
    ({"query": "token_to_req"}, {"num_splits": 4}),
    ({"kv": "padded"}, {}),
    ({"kv": "padded"}, {"num_splits": 1}),
    ({"query": "physical"}, {"return_lse": True}),
    ({"width": 11}, {"block_indices": lambda a: ints((*lead(a), 2)), "assume_compact_blocks": True}),
    ({}, {"gate": lambda a: torch.ones(a["query"].shape[:-1]), "out": lambda a: torch.empty_like(a["query"])}),
    ({}, {"seq_lens_q": ints((B,)), "seq_lens_k": ints((B,)), "query_positions": lambda a: ints(lead(a))}),
    ({"heads": (3, 1)}, {"warp_specialized": True}),
    ({"heads": (32, 2), "dtype": torch.float16}, {"compute_dtype": torch.float16}),
]


@pytest.mark.parametrize(("layout", "changes"), VALID, ids=[str(i) for i in range(len(VALID))])
def test_valid_native_call_reaches_arch_gate(gen, layout, changes):
    args = apply(_native(gen, **layout), changes)
    with pytest.raises(UnsupportedTargetError, match="backend='reference'") as info:
        plan_sparse_attention(**args)
    assert "cpu" in str(info.value)
    plan = plan_sparse_attention(**{**args, "backend": "reference"})  # the same call runs on the reference
    assert plan.backend == "reference"


def test_padded_query_with_no_rows_reaches_arch_gate(gen):
    # Not mistaken for a flattened query (which native padded K/V rejects): q_len is 0 for both.
    args = _native(gen, kv="padded")
    args["query"] = args["query"][:, :0]
    args["token_indices"] = args["token_indices"][:, :0]
    with pytest.raises(UnsupportedTargetError, match="backend='reference'"):
        plan_sparse_attention(**args)


INT64_METADATA = [
    ({}, "token_indices", lambda a: a["token_indices"].long()),
    ({}, "block_table", lambda a: a["block_table"].long()),
    ({}, "seq_lens_q", ints((B,), torch.int64)),
    ({}, "seq_lens_k", ints((B,), torch.int64)),
    ({}, "query_positions", lambda a: ints(lead(a), torch.int64)),
    ({"width": 7}, "block_indices", lambda a: ints((*lead(a), 1), torch.int64)),
    ({"query": "cu_seqlens"}, "cu_seqlens_q", lambda a: a["cu_seqlens_q"].long()),
    ({"query": "token_to_req"}, "token_to_req", lambda a: a["token_to_req"].long()),
    ({"query": "physical"}, "selected_kv_indices", lambda a: a["selected_kv_indices"].long()),
]


@pytest.mark.parametrize(("layout", "name", "value"), INT64_METADATA, ids=[c[1] for c in INT64_METADATA])
def test_native_metadata_must_be_int32(gen, layout, name, value):
    args = apply(_native(gen, **layout), {name: value})
    with pytest.raises(MateTypeError, match=f"^{name}: got dtype int64.*int32"):
        plan_sparse_attention(**args)


def test_varlen_kv_error_comes_before_the_int32_rule(gen):
    # cu_seqlens_k only exists with varlen K/V, which tilelang rejects: asking for int32 would not help.
    args = apply(_native(gen, kv="varlen"), {"cu_seqlens_k": lambda a: a["cu_seqlens_k"].long()})
    with pytest.raises(MateValueError, match=r"cu_seqlens_k: got flattened varlen K/V.*backend='reference'"):
        plan_sparse_attention(**args)


def _kv(transform):
    return {"key": lambda a: transform(a["key"]), "value": lambda a: transform(a["value"])}


def _padded_last(t, extra):
    """Same shape inside a wider last axis: outer strides of (D + extra) elements."""
    return torch.randn(*t.shape[:-1], t.shape[-1] + extra).to(t.dtype)[..., : t.shape[-1]]


RULES = [
    ({"dtype": torch.float32}, {}, MateTypeError, "query: .*float32 requires backend='reference'"),
    ({"dim": 128}, {}, MateValueError, "query: .*D == 256"),
    ({"heads": (34, 2)}, {}, MateValueError, "query/key: .*<= 16"),
    ({"kv": "varlen"}, {}, MateValueError, "cu_seqlens_k: .*backend='reference'"),
    ({"kv": "padded", "query": "cu_seqlens"}, {}, MateValueError, "query: .*padded"),
    ({"kv": "padded", "query": "token_to_req"}, {}, MateValueError, "query: .*padded"),
    (
        {"kv": "padded"},
        {"num_splits": 2},
        MateValueError,
        r"num_splits: got 2 with padded .*None \(the schedule chooses\) or 1",
    ),
    ({}, {"num_splits": 65536}, MateValueError, "num_splits: got 65536 splits.*at most 65535"),
    ({}, _kv(lambda t: torch.randn(*t.shape, 2).to(t.dtype)[..., 0]), LayoutError, "key: "),
    ({}, {"value": lambda a: misaligned(a["value"])}, LayoutError, "value: "),
    ({}, _kv(lambda t: _padded_last(t, 4)), LayoutError, "key: "),
    ({"query": "physical"}, {"value": lambda a: _padded_last(a["value"], 4)}, LayoutError, "value: "),
]


@pytest.mark.parametrize(("layout", "changes", "exc", "pattern"), RULES, ids=[c[3].split(":")[0] for c in RULES])
def test_native_only_rules(gen, layout, changes, exc, pattern):
    args = apply(_native(gen, **layout), changes)
    with pytest.raises(exc, match=f"^{pattern}") as info:
        plan_sparse_attention(**args)
    assert not isinstance(info.value, UnsupportedTargetError)
    if exc is LayoutError:
        assert VECTOR_LOAD_MESSAGE in str(info.value)


def test_aligned_outer_kv_slices_pass_the_vector_rule(gen):
    args = apply(_native(gen), _kv(lambda t: _padded_last(t, 8)))  # 264 elements = 528 bytes per head
    with pytest.raises(UnsupportedTargetError):
        plan_sparse_attention(**args)


def test_reference_accepts_what_native_rejects(gen):
    changes = {"backend": "reference", "num_splits": 2, **_kv(lambda t: _padded_last(t, 4))}
    args = apply(_native(gen, kv="varlen", dim=128, heads=(34, 2)), changes)
    plan = plan_sparse_attention(**args)
    assert plan.kv_layout == "varlen" and plan.rows == ROWS


@pytest.mark.parametrize(
    ("hq", "hkv", "pattern", "limit"),
    [
        (65536, 4096, r"query: got 65536 query heads \(Hq\)", (65520, 4095)),  # group 16 at most
        (65536, 65536, r"key: got 65536 KV heads \(Hkv\)", (65535, 65535)),
    ],
)
def test_head_counts_past_a_grid_axis(hq, hkv, pattern, limit):
    # The paged and union kernels launch the KV heads on a grid axis, the merge kernel the Q heads.
    # Meta tensors: the geometry without the memory (the arch gate comes after this rule).
    def call(hq: int, hkv: int) -> None:
        query = torch.empty(2, hq, 256, dtype=torch.bfloat16, device="meta")
        key = torch.empty(1, 64, hkv, 256, dtype=torch.bfloat16, device="meta")
        ids = {"dtype": torch.int32, "device": "meta"}
        plan_sparse_attention(query, key, key, torch.empty(2, 7, **ids), cu_seqlens_q=torch.empty(2, **ids),
                              block_table=torch.empty(1, 1, **ids))  # fmt: skip

    with pytest.raises(
        MateValueError, match=f"^{pattern}; backend='tilelang' launches them on a grid axis of at most 65535"
    ):
        call(hq, hkv)
    with pytest.raises(UnsupportedTargetError, match="meta"):  # the largest counts that fit pass the rule
        call(*limit)
