"""plan_sparse_attention accepts every spec layout and fills the plan correctly (CPU, reference)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from mate_core import SparseAttentionPlan, plan_sparse_attention

sys.path.insert(0, str(Path(__file__).parent))  # shared case builders live next to this file
from test_validate_sparse_cases import (
    KV_LAYOUTS,
    PAGE_SIZE,
    QUERY_LAYOUTS,
    ROWS,
    B,
    Q,
    apply,
    ints,
    lead,
    same_memory,
    sparse_call,
)

EXPECTED_KV = {"paged": ("paged", PAGE_SIZE), "padded": ("padded", 0), "varlen": ("varlen", 0)}


def _check_common(plan: SparseAttentionPlan, args: dict) -> None:
    """Fields every plan shares: row views of query/out, allocated out, default scalars."""
    query = args["query"]
    hq, dim = query.shape[-2:]
    assert isinstance(plan, SparseAttentionPlan)
    assert plan.query.shape == (ROWS, hq, dim) and same_memory(plan.query, query)
    assert plan.out_result.shape == query.shape and plan.out_result.dtype == query.dtype
    assert plan.out.shape == (ROWS, hq, dim) and same_memory(plan.out, plan.out_result)
    assert plan.scale == pytest.approx(1.0 / math.sqrt(dim))
    assert plan.num_splits == 0
    assert plan.backend == "reference"
    assert plan.lse is None and plan.lse_result is None and plan.returned() is plan.out_result
    assert plan.rows == ROWS


@pytest.mark.parametrize("kv", KV_LAYOUTS)
@pytest.mark.parametrize("query", QUERY_LAYOUTS)
def test_logical_layouts(gen, query, kv):
    args = sparse_call(gen, query=query, kv=kv)
    plan = plan_sparse_attention(**args)
    _check_common(plan, args)
    assert (plan.kv_layout, plan.page_size) == EXPECTED_KV[kv]
    assert plan.key is args["key"] and plan.value is args["value"]
    assert plan.num_requests == B
    assert plan.q_len == (Q if query == "padded" else 0)
    assert plan.padded == (query == "padded")
    assert plan.token_indices.shape == (ROWS, 7) and same_memory(plan.token_indices, args["token_indices"])
    assert plan.selected_kv_indices is None and plan.block_indices is None
    for name in ("cu_seqlens_q", "token_to_req", "block_table", "cu_seqlens_k"):
        assert getattr(plan, name) is args.get(name)


def test_physical_path(gen):
    args = sparse_call(gen, query="physical")
    plan = plan_sparse_attention(**args)
    _check_common(plan, args)
    assert plan.kv_layout == "physical" and plan.page_size == 0
    assert plan.num_requests == 0 and plan.q_len == 0
    assert plan.token_indices is None and plan.block_table is None and plan.gate is None
    assert plan.selected_kv_indices is args["selected_kv_indices"]


def test_cu_seqlens_with_consistent_num_requests(gen):
    args = sparse_call(gen, query="cu_seqlens")
    plan = plan_sparse_attention(**apply(args, {"num_requests": B}))
    assert plan.num_requests == B


def test_padded_query_with_matching_num_requests_and_page_size(gen):
    args = sparse_call(gen)
    plan = plan_sparse_attention(**apply(args, {"num_requests": B, "page_size": PAGE_SIZE}))
    assert plan.num_requests == B and plan.page_size == PAGE_SIZE


@pytest.mark.parametrize("query", QUERY_LAYOUTS)
@pytest.mark.parametrize("elementwise", [False, True])
@pytest.mark.parametrize("gate_dtype", [torch.float32, torch.bfloat16])
def test_gate_shapes(gen, query, elementwise, gate_dtype):
    args = sparse_call(gen, query=query, dtype=torch.bfloat16)
    shape = args["query"].shape if elementwise else args["query"].shape[:-1]
    gate = torch.randn(shape, generator=gen).to(gate_dtype)
    plan = plan_sparse_attention(**apply(args, {"gate": gate}))
    assert plan.gate.shape == (ROWS, *shape[len(lead(args)) :]) and same_memory(plan.gate, gate)


def test_metadata_row_views(gen):
    args = sparse_call(gen, index_dtype=torch.int64)  # the reference also takes int64 metadata
    extra = {"seq_lens_q": ints((B,), torch.int64), "seq_lens_k": ints((B,), torch.int64)}
    extra["query_positions"] = ints((B, Q), torch.int64)
    plan = plan_sparse_attention(**apply(args, extra))
    assert plan.seq_lens_q is extra["seq_lens_q"] and plan.seq_lens_k is extra["seq_lens_k"]
    assert plan.query_positions.shape == (ROWS,) and same_memory(plan.query_positions, extra["query_positions"])


@pytest.mark.parametrize("query", ["cu_seqlens", "token_to_req"])
def test_flattened_query_positions(gen, query):
    args = sparse_call(gen, query=query)
    positions = ints((ROWS,))
    plan = plan_sparse_attention(**apply(args, {"query_positions": positions}))
    assert plan.query_positions is positions


@pytest.mark.parametrize("nb", [1, 2, 512])
@pytest.mark.parametrize("query", ["padded", "cu_seqlens"])
def test_block_indices_hint(gen, query, nb):
    args = sparse_call(gen, query=query, width=4 * nb + 3)
    hint = torch.randint(-1, 3, (*lead(args), nb), generator=gen, dtype=torch.int32)
    plan = plan_sparse_attention(**apply(args, {"block_indices": hint, "assume_compact_blocks": True}))
    assert plan.block_indices.shape == (ROWS, nb) and same_memory(plan.block_indices, hint)
    assert plan.assume_compact_blocks is True


def test_empty_selection_width(gen):
    plan = plan_sparse_attention(**sparse_call(gen, width=0))
    assert plan.token_indices.shape == (ROWS, 0)


@pytest.mark.parametrize(
    ("changes", "scale"),
    [({"scale": 0.5}, 0.5), ({"softmax_scale": 0.25}, 0.25), ({"scale": 2}, 2.0)],
)
def test_scale_resolution(gen, changes, scale):
    plan = plan_sparse_attention(**apply(sparse_call(gen), changes))
    assert plan.scale == scale


def test_scalar_options_carried(gen):
    args = apply(sparse_call(gen), {"num_splits": 3, "warp_specialized": True, "compute_dtype": torch.float32})
    plan = plan_sparse_attention(**args)
    assert (plan.num_splits, plan.warp_specialized, plan.assume_compact_blocks) == (3, True, False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_reference_data_dtypes(gen, dtype):
    args = apply(sparse_call(gen, dtype=dtype), {"compute_dtype": dtype, "k_scale": 1, "v_scale": 1.0})
    plan = plan_sparse_attention(**args)
    assert plan.out_result.dtype == dtype


def test_sliced_inputs(gen):
    args = sparse_call(gen, kv="padded")
    big_q = torch.randn(B + 1, Q, 4, 12, generator=gen)
    big_k = torch.randn(B, 8, 2, 10, generator=gen)
    changes = {"query": big_q[1:, :, :, 2:10], "key": big_k[:, 1:7, :, 1:9], "value": big_k[:, 2:8, :, :8]}
    plan = plan_sparse_attention(**apply(args, changes))
    assert same_memory(plan.query, changes["query"]) and plan.key is changes["key"]


@pytest.mark.parametrize("query", ["padded", "token_to_req"])
def test_out_buffer_strided_view_is_bound(gen, query):
    args = sparse_call(gen, query=query)
    shape = args["query"].shape
    big = torch.randn(*shape[:-1], shape[-1] + 5, generator=gen)
    before = big.clone()
    out = big[..., 2 : 2 + shape[-1]]
    plan = plan_sparse_attention(**apply(args, {"out": out}))
    assert plan.out_result is out and plan.returned() is out
    written = torch.randn(plan.out.shape, generator=gen)
    plan.out.copy_(written)  # writing the plan's row view writes the caller's slice only
    assert torch.equal(out.reshape(written.shape), written)
    assert torch.equal(big[..., :2], before[..., :2]) and torch.equal(
        big[..., 2 + shape[-1] :], before[..., 2 + shape[-1] :]
    )


@pytest.mark.parametrize("return_lse", [False, True])
def test_lse_buffer_is_bound(gen, return_lse):
    args = sparse_call(gen)
    big = torch.randn(B, Q, 4, 3, generator=gen)
    lse = big[..., 1]  # a strided FP32 view
    plan = plan_sparse_attention(**apply(args, {"lse": lse, "return_lse": return_lse}))
    assert plan.lse_result is lse and plan.lse.shape == (ROWS, 4)
    written = torch.randn(ROWS, 4, generator=gen)
    plan.lse.copy_(written)
    assert torch.equal(lse.reshape(ROWS, 4), written)
    returned = plan.returned()
    if return_lse:
        assert returned[0] is plan.out_result and returned[1] is lse
    else:
        assert returned is plan.out_result  # lse is written but not returned


@pytest.mark.parametrize("query", ["padded", "physical"])
def test_return_lse_allocates(gen, query):
    args = sparse_call(gen, query=query)
    plan = plan_sparse_attention(**apply(args, {"return_lse": True}))
    assert plan.lse_result.shape == args["query"].shape[:-1] and plan.lse_result.dtype == torch.float32
    assert plan.lse.shape == (ROWS, 4) and same_memory(plan.lse, plan.lse_result)
    out, lse = plan.returned()
    assert out is plan.out_result and lse is plan.lse_result


@pytest.mark.parametrize("kv", KV_LAYOUTS)
def test_padded_query_with_no_rows(gen, kv):
    # Q == 0 is a padded query with no rows, not a flattened one (q_len is 0 for both).
    args = sparse_call(gen, query="padded", kv=kv)
    args["query"] = args["query"][:, :0]
    args["token_indices"] = args["token_indices"][:, :0]
    plan = plan_sparse_attention(**args, return_lse=True)
    assert plan.padded and plan.q_len == 0 and plan.rows == 0 and plan.num_requests == B
    assert plan.out_result.shape == args["query"].shape and plan.lse_result.shape == args["query"].shape[:-1]


@pytest.mark.parametrize("sliced", ["columns", "transposed"])
def test_sliced_positions_without_copy(gen, sliced):
    # Metadata may be any sliced view (spec); a [B, Q] slice with no [rows] view stays 2-D.
    args = sparse_call(gen, query="padded")
    table = ints((B, Q + 2)) if sliced == "columns" else ints((Q, B)).t()
    pos = table[:, :Q]
    plan = plan_sparse_attention(**args, query_positions=pos)
    assert plan.query_positions is pos and pos.shape == (B, Q)
