"""plan_sparse_attention never reads device memory.

Meta tensors have no data (any read such as .item(), .tolist() or bool(tensor)
raises), so validating meta inputs proves the checks are metadata-only; the
same planning must also trace under torch.compile(fullgraph=True).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from mate_core import MateTypeError, MateValueError, UnsupportedTargetError, plan_sparse_attention

sys.path.insert(0, str(Path(__file__).parent))  # shared case builders live next to this file
from test_validate_sparse_cases import (
    KV_LAYOUTS,
    NATIVE,
    QUERY_LAYOUTS,
    ROWS,
    B,
    apply,
    ints,
    lead,
    sparse_call,
    to_device,
)

FULL_OPTIONS = {
    "seq_lens_q": ints((B,)),
    "seq_lens_k": ints((B,)),
    "query_positions": lambda a: ints(lead(a)),
    "gate": lambda a: torch.randn(a["query"].shape),
    "out": lambda a: torch.randn(a["query"].shape),
    "lse": lambda a: torch.randn(a["query"].shape[:-1]),
    "return_lse": True,
    "num_splits": 2,
}


def test_meta_tensors_cannot_be_read():
    # The premise of this file: reading a meta tensor's data fails.
    with pytest.raises((RuntimeError, NotImplementedError)):
        torch.ones(2, device="meta").tolist()


@pytest.mark.parametrize("kv", KV_LAYOUTS)
@pytest.mark.parametrize("query", QUERY_LAYOUTS)
def test_meta_logical_layouts(gen, query, kv):
    args = to_device(apply(sparse_call(gen, query=query, kv=kv), FULL_OPTIONS), "meta")
    plan = plan_sparse_attention(**args)
    assert plan.out_result is args["out"] and plan.lse_result is args["lse"]
    assert plan.query.device.type == "meta" and plan.out.shape == (ROWS, *args["query"].shape[-2:])


@pytest.mark.parametrize("with_buffers", [False, True])
def test_meta_physical_path(gen, with_buffers):
    changes = {"out": FULL_OPTIONS["out"], "lse": FULL_OPTIONS["lse"]} if with_buffers else {"return_lse": True}
    args = to_device(apply(sparse_call(gen, query="physical"), changes), "meta")
    if with_buffers:  # the physical path is BF16
        args["out"] = args["out"].bfloat16()
    plan = plan_sparse_attention(**args)
    assert plan.lse_result.device.type == "meta" and plan.lse.shape == (ROWS, 4)


def test_meta_block_hint(gen):
    args = apply(
        sparse_call(gen, width=11), {"block_indices": lambda a: ints((*lead(a), 2)), "assume_compact_blocks": True}
    )
    plan = plan_sparse_attention(**to_device(args, "meta"))
    assert plan.block_indices.shape == (ROWS, 2)


def test_meta_native_rules_then_arch_gate(gen):
    args = to_device(sparse_call(gen, **NATIVE), "meta")
    # A native-only rule (int32 metadata) still applies to meta tensors, before the arch gate.
    with pytest.raises(MateTypeError, match=r"^token_indices: got dtype int64; expected one of \[int32\]"):
        plan_sparse_attention(**apply(args, {"token_indices": args["token_indices"].long()}))
    with pytest.raises(UnsupportedTargetError, match="meta"):
        plan_sparse_attention(**args)


def test_meta_rejection_still_names_the_argument(gen):
    args = to_device(sparse_call(gen), "meta")
    with pytest.raises(MateValueError, match=r"^block_table"):
        plan_sparse_attention(**apply(args, {"block_table": ints((B + 1, 3)).to("meta")}))


def _compiled_plan(fullgraph=True, **static):
    """torch.compile of planning followed by writes through the plan's out/lse row views."""

    def run(query, key, value, token_indices, block_table, gate, out):
        plan = plan_sparse_attention(
            query, key, value, token_indices, block_table=block_table, gate=gate, out=out, return_lse=True, **static
        )
        plan.out.copy_(plan.query * plan.scale)
        plan.lse.fill_(1.5)
        return plan.out_result, plan.lse_result

    # dynamic=False: ints that differ between compiles (num_splits) stay constants, as in one real call site.
    return torch.compile(run, fullgraph=fullgraph, backend="eager", dynamic=False)


def _positional(args, gate, out):
    return args["query"], args["key"], args["value"], args["token_indices"], args["block_table"], gate, out


def test_traces_under_torch_compile(gen):
    args = sparse_call(gen)
    shape = args["query"].shape
    gate = torch.randn(shape[:-1], generator=gen)
    big = torch.randn(*shape[:-1], shape[-1] + 3, generator=gen)
    out_view = big[..., 1 : 1 + shape[-1]]  # a strided out= view, bound by the traced plan
    compiled = _compiled_plan(backend="reference", num_splits=2)
    out, lse = compiled(*_positional(args, gate, out_view))
    expected = args["query"] * plan_sparse_attention(**args).scale
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(big[..., 1 : 1 + shape[-1]], expected)
    assert lse.shape == shape[:-1] and lse.dtype == torch.float32 and bool((lse == 1.5).all())


def test_rejection_under_torch_compile(gen):
    args = sparse_call(gen)
    # A raise inside a fullgraph region is reported by Dynamo as unsupported; without fullgraph
    # Dynamo falls back to running the frame eagerly, which raises the validation error itself.
    compiled = _compiled_plan(fullgraph=False, backend="reference", num_splits=0)
    with pytest.raises(MateValueError, match=r"^num_splits"):
        compiled(*_positional(args, None, None))
