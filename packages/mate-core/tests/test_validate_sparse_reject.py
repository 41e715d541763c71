"""plan_sparse_attention rejects every bad argument with the right type, naming the argument.

Each case starts from a valid reference call (test_validate_sparse_cases.sparse_call),
changes one thing, and expects the exception type and a message that starts
with the offending argument's name.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

from mate_core import MateTypeError, MateValueError, plan_sparse_attention

sys.path.insert(0, str(Path(__file__).parent))  # shared case builders live next to this file
from test_validate_sparse_cases import CU_Q, PAGE_SIZE, ROWS, B, Q, apply, ints, lead, sparse_call

V, T = MateValueError, MateTypeError
P = {}  # padded query, paged K/V
F = {"query": "cu_seqlens"}
TR = {"query": "token_to_req"}
PK = {"kv": "padded"}
VK = {"kv": "varlen"}
X = {"query": "physical"}


def _q(transform):
    return lambda a: transform(a["query"])


def _kv(transform):
    """Apply the same change to key and value (so only the intended rule fails)."""
    return {"key": lambda a: transform(a["key"]), "value": lambda a: transform(a["value"])}


def _lead_ints(*tail, dtype=torch.int32):
    return lambda a: ints((*lead(a), *tail), dtype)


def _transposed_rows(*tail, dtype=torch.int32):
    """[B,Q,...] with swapped batch/query strides: no zero-copy row view exists."""
    return lambda a: ints((Q, B, *tail), dtype).transpose(0, 1)


CASES = [
    # backend
    (P, {"backend": "auto"}, V, "backend"),
    (P, {"backend": "cuda"}, V, "backend"),
    (P, {"backend": None}, T, "backend"),
    # query / key / value types, ranks, dtypes, devices, heads
    (P, {"query": "q"}, T, "query"),
    (P, {"key": None}, T, "key"),
    (P, {"value": 1.0}, T, "value"),
    (P, {"query": _q(lambda q: q[0, 0])}, V, "query"),
    (P, {"query": _q(lambda q: q[None])}, V, "query"),
    (P, {"query": _q(lambda q: q.to(torch.int32))}, T, "query"),
    (P, {"query": _q(lambda q: q.double())}, T, "query"),
    (P, {"query": _q(lambda q: q[:, :, :0])}, V, "query"),
    (P, {"query": _q(lambda q: q[..., :0])}, V, "query"),
    (P, {"query": _q(lambda q: q.transpose(0, 1).contiguous().transpose(0, 1))}, V, "query: .*zero-copy row view"),
    (P, _kv(lambda t: t.half()), T, "key"),
    (P, {"value": lambda a: a["value"].half()}, T, "value"),
    (P, {"value": lambda a: a["value"][:, :2]}, V, "value"),
    (P, _kv(lambda t: t.to("meta")), V, "key"),
    (P, {"value": lambda a: a["value"].to("meta")}, V, "value"),
    (P, _kv(lambda t: t[..., :4]), V, "key"),
    (P, _kv(lambda t: t[:, :, :0]), V, "key"),
    ({"heads": (3, 2)}, {}, V, "key"),
    # padded query metadata
    (P, {"cu_seqlens_q": ints((B + 1,))}, V, "cu_seqlens_q"),
    (P, {"token_to_req": ints((ROWS,)), "num_requests": B}, V, "token_to_req"),
    (P, {"num_requests": B + 1}, V, "num_requests"),
    (P, {"num_requests": "2"}, T, "num_requests"),
    # flattened query metadata
    (F, {"token_to_req": ints((ROWS,)), "num_requests": B}, V, "cu_seqlens_q and token_to_req"),
    (F, {"cu_seqlens_q": None}, V, "cu_seqlens_q / token_to_req"),
    (F, {"num_requests": B + 1}, V, "cu_seqlens_q"),
    (F, {"num_requests": -1}, V, "num_requests"),
    (F, {"num_requests": 2.0}, T, "num_requests"),
    (F, {"cu_seqlens_q": ints((1, B + 1))}, V, "cu_seqlens_q"),
    (F, {"cu_seqlens_q": ints((0,))}, V, "cu_seqlens_q"),
    (F, {"cu_seqlens_q": torch.tensor(CU_Q, dtype=torch.float32)}, T, "cu_seqlens_q"),
    (F, {"cu_seqlens_q": ints((B + 1,), torch.int16)}, T, "cu_seqlens_q"),
    (F, {"cu_seqlens_q": ints((B + 1,)).to("meta")}, V, "cu_seqlens_q"),
    (TR, {"num_requests": None}, V, "num_requests"),
    (TR, {"token_to_req": ints((ROWS + 1,))}, V, "token_to_req"),
    (TR, {"token_to_req": ints((ROWS, 1))}, V, "token_to_req"),
    (TR, {"token_to_req": ints((ROWS,), torch.uint8)}, T, "token_to_req"),
    # K/V layouts
    (P, _kv(lambda t: t[0, 0]), V, "key"),
    (P, _kv(lambda t: t[None]), V, "key"),
    (P, {"cu_seqlens_k": ints((B + 1,))}, V, "cu_seqlens_k"),
    (VK, {"block_table": ints((B, 3))}, V, "block_table"),
    (VK, {"cu_seqlens_k": None}, V, "cu_seqlens_k"),
    (VK, {"cu_seqlens_k": ints((B + 2,))}, V, "cu_seqlens_k"),
    (VK, {"cu_seqlens_k": ints((B + 1,), torch.float64)}, T, "cu_seqlens_k"),
    (PK, _kv(lambda t: t[:1]), V, "key"),
    (PK, {"page_size": PAGE_SIZE}, V, "page_size"),
    (P, {"block_table": ints((B + 1, 3))}, V, "block_table"),
    (P, {"block_table": ints((B * 3,))}, V, "block_table"),
    (P, {"block_table": lambda a: a["block_table"].float()}, T, "block_table"),
    (P, {"block_table": lambda a: a["block_table"].to("meta")}, V, "block_table"),
    (P, {"page_size": PAGE_SIZE + 1}, V, "page_size"),
    (P, {"page_size": 0}, V, "page_size"),
    (P, {"page_size": True}, T, "page_size"),
    (P, _kv(lambda t: t[:, :0]), V, "key"),
    # per-request lengths and positions
    (P, {"seq_lens_q": ints((B + 1,))}, V, "seq_lens_q"),
    (P, {"seq_lens_k": ints((B, 1))}, V, "seq_lens_k"),
    (P, {"seq_lens_k": ints((B,)).float()}, T, "seq_lens_k"),
    (TR, {"seq_lens_q": ints((B + 1,))}, V, "seq_lens_q"),
    (P, {"query_positions": ints((ROWS,))}, V, "query_positions"),
    (P, {"query_positions": _lead_ints(1)}, V, "query_positions"),
    (P, {"query_positions": _lead_ints(dtype=torch.float32)}, T, "query_positions"),
    (F, {"query_positions": ints((B, Q))}, V, "query_positions"),
    # token_indices, block_indices, assume_compact_blocks
    (P, {"token_indices": None}, V, "token_indices"),
    (P, {"token_indices": None, "block_indices": _lead_ints(1)}, V, "token_indices: .*block_indices"),
    (P, {"token_indices": _lead_ints()}, V, "token_indices"),
    (P, {"token_indices": ints((B, Q + 1, 7))}, V, "token_indices"),
    (F, {"token_indices": ints((ROWS - 1, 7))}, V, "token_indices"),
    (P, {"token_indices": _lead_ints(7, dtype=torch.float32)}, T, "token_indices"),
    (P, {"token_indices": lambda a: a["token_indices"].to("meta")}, V, "token_indices"),
    (P, {"token_indices": _transposed_rows(7)}, V, "token_indices"),
    (P, {"block_indices": _lead_ints(2)}, V, "block_indices / token_indices"),
    (P, {"block_indices": _lead_ints(0), "token_indices": _lead_ints(3)}, V, "block_indices / token_indices"),
    (P, {"block_indices": _lead_ints(513), "token_indices": _lead_ints(2055)}, V, "block_indices / token_indices"),
    (P, {"block_indices": ints((B, Q + 1, 1))}, V, "block_indices"),
    (P, {"block_indices": _lead_ints(1, dtype=torch.float16)}, T, "block_indices"),
    (P, {"assume_compact_blocks": True}, V, "assume_compact_blocks"),
    (P, {"assume_compact_blocks": 1}, T, "assume_compact_blocks"),
    # The selected_kv_indices path takes no block_indices: its message does not ask for them.
    (X, {"assume_compact_blocks": True}, V, "assume_compact_blocks: got True with selected_kv_indices; expected False"),
    # gate
    (P, {"gate": _lead_ints(dtype=torch.float32)}, V, "gate"),
    (P, {"gate": lambda a: torch.ones((*a["query"].shape[:-1], 1))}, V, "gate"),
    (P, {"gate": lambda a: torch.ones(a["query"].shape[:-1], dtype=torch.float16)}, T, "gate"),
    (P, {"gate": lambda a: ints(tuple(a["query"].shape[:-1]))}, T, "gate"),
    (P, {"gate": lambda a: torch.ones(a["query"].shape[:-1], device="meta")}, V, "gate"),
    (P, {"gate": lambda a: torch.ones(Q, B, 4).transpose(0, 1)}, V, "gate"),
    (P, {"gate": [1.0]}, T, "gate"),
    # scale / softmax_scale
    (P, {"scale": 0.5, "softmax_scale": 0.5}, V, "scale and softmax_scale"),
    (P, {"scale": 0.0}, V, "scale"),
    (P, {"scale": -1.0}, V, "scale"),
    (P, {"scale": float("inf")}, V, "scale"),
    (P, {"scale": float("nan")}, V, "scale"),
    (P, {"scale": "1"}, T, "scale"),
    (P, {"softmax_scale": 0.0}, V, "softmax_scale"),
    (P, {"softmax_scale": True}, T, "softmax_scale"),
    # scalar options
    (P, {"num_splits": 0}, V, "num_splits"),
    (P, {"num_splits": -2}, V, "num_splits"),
    (P, {"num_splits": True}, T, "num_splits"),
    (P, {"num_splits": 2.0}, T, "num_splits"),
    (P, {"return_lse": 1}, T, "return_lse"),
    (P, {"warp_specialized": "yes"}, T, "warp_specialized"),
    (P, {"k_scale": 2.0}, V, "k_scale: .*FP8 KV is unsupported"),
    (P, {"v_scale": 0.5}, V, "v_scale: .*FP8 KV is unsupported"),
    (P, {"k_scale": "1"}, T, "k_scale"),
    (P, {"v_scale": True}, T, "v_scale"),
    (P, {"compute_dtype": "bfloat16"}, T, "compute_dtype"),
    (P, {"compute_dtype": torch.float8_e4m3fn}, V, "compute_dtype: .*FP8 compute is not supported"),
    (P, {"compute_dtype": torch.float8_e5m2}, V, "compute_dtype: .*FP8 compute is not supported"),
    (P, {"compute_dtype": torch.float16}, V, "compute_dtype"),
    (P, {"compute_dtype": torch.float64}, V, "compute_dtype"),
    (X, {"compute_dtype": torch.float16}, V, "compute_dtype"),
]


def _starts_with(name: str) -> str:
    """``^name: `` for an argument name (or a combined prefix such as "scale and softmax_scale"); text after
    a ``": "`` in ``name`` is a regex for the rest of the intended rule's message."""
    head, _, rule = name.partition(": ")
    return f"^{re.escape(head)}: {rule}"


def _case_id(case) -> str:
    layout, changes, _exc, name = case
    return f"{name.partition(':')[0]}-{'-'.join(changes) or 'layout'}-{'-'.join(map(str, layout.values())) or 'padded'}"


@pytest.mark.parametrize(("layout", "changes", "exc", "name"), CASES, ids=[_case_id(c) for c in CASES])
def test_rejects(gen, layout, changes, exc, name):
    args = apply(sparse_call(gen, **layout), changes)
    with pytest.raises(exc, match=_starts_with(name)):
        plan_sparse_attention(**args)


PHYSICAL_EXCLUDED = {
    "token_indices": lambda a: ints((ROWS, 7)),
    "block_indices": lambda a: ints((ROWS, 1)),
    "cu_seqlens_q": ints((B + 1,)),
    "token_to_req": ints((ROWS,)),
    "num_requests": B,
    "cu_seqlens_k": ints((B + 1,)),
    "seq_lens_q": ints((B,)),
    "seq_lens_k": ints((B,)),
    "query_positions": ints((ROWS,)),
    "block_table": ints((B, 3)),
    "page_size": PAGE_SIZE,
    "gate": lambda a: torch.ones(a["query"].shape[:-1]),
}


@pytest.mark.parametrize("name", list(PHYSICAL_EXCLUDED))
def test_physical_path_exclusions(gen, name):
    args = apply(sparse_call(gen, query="physical"), {name: PHYSICAL_EXCLUDED[name]})
    with pytest.raises(MateValueError, match=f"^{name}: .*selected_kv_indices"):
        plan_sparse_attention(**args)


PHYSICAL_CASES = [
    ({"query": _q(lambda q: q.reshape(B, Q, *q.shape[1:]))}, V, "query"),
    ({"query": _q(lambda q: q.float()), **_kv(lambda t: t.float())}, T, "query"),
    ({"query": _q(lambda q: q.half()), **_kv(lambda t: t.half())}, T, "query"),
    (_kv(lambda t: t.reshape(2, 5, *t.shape[1:])), V, "key"),
    ({"selected_kv_indices": ints((ROWS + 1, 7))}, V, "selected_kv_indices"),
    ({"selected_kv_indices": ints((ROWS,))}, V, "selected_kv_indices"),
    ({"selected_kv_indices": ints((ROWS, 7)).float()}, T, "selected_kv_indices"),
    ({"selected_kv_indices": ints((ROWS, 7)).to("meta")}, V, "selected_kv_indices"),
]


@pytest.mark.parametrize(("changes", "exc", "name"), PHYSICAL_CASES, ids=[c[2] for c in PHYSICAL_CASES])
def test_physical_path_rejects(gen, changes, exc, name):
    args = apply(sparse_call(gen, query="physical"), changes)
    with pytest.raises(exc, match=_starts_with(name)):
        plan_sparse_attention(**args)


def _shared_storage(a):
    """out and block_table carved from one allocation: out overlaps metadata."""
    base = torch.randn(a["query"].numel())
    return {"out": base.view(a["query"].shape), "block_table": base.view(torch.int32)[: B * 3].view(B, 3)}


def _out_overlaps_query_partly(a):
    """query and out one row apart in one buffer: a partial overlap, every stride positive."""
    shape, row = a["query"].shape, a["query"][0, 0].numel()
    base = torch.randn(a["query"].numel() + row)
    return {"query": base[:-row].view(shape), "out": base[row:].view(shape)}


def _out_and_lse_overlap(a):
    base = torch.randn(a["query"].numel())
    return {"out": base.view(a["query"].shape), "lse": base[: a["query"][..., 0].numel()].view(a["query"].shape[:-1])}


BUFFER_CASES = [
    ({"out": "x"}, T, "out"),
    ({"out": lambda a: torch.empty(a["query"].shape[:-1])}, V, "out"),
    ({"out": lambda a: torch.empty(a["query"].shape, dtype=torch.bfloat16)}, T, "out"),
    ({"out": lambda a: torch.empty(a["query"].shape, device="meta")}, V, "out"),
    ({"out": lambda a: torch.empty(a["query"].shape[-1]).expand(a["query"].shape)}, V, "out"),
    ({"out": lambda a: torch.empty(B * Q * 32).as_strided(a["query"].shape, (Q * 32, 32, 1, 1))}, V, "out"),
    ({"out": lambda a: torch.empty(Q, B, 4, 8).transpose(0, 1)}, V, "out"),
    ({"out": lambda a: torch.empty(a["query"].shape, requires_grad=True)}, V, "out"),
    ({"out": lambda a: a["query"]}, V, "out: its memory overlaps query"),
    ({"lse": lambda a: torch.empty(a["query"].shape[:-1], dtype=torch.bfloat16)}, T, "lse"),
    ({"lse": lambda a: torch.empty(a["query"].shape)}, V, "lse"),
    ({"lse": lambda a: torch.empty(a["query"].shape[:-1], device="meta")}, V, "lse"),
    ({"lse": lambda a: torch.empty(Q, B, 4).transpose(0, 1)}, V, "lse"),
    ({"lse": lambda a: a["query"][..., 0]}, V, "lse: its memory overlaps query"),
]


@pytest.mark.parametrize(("changes", "exc", "name"), BUFFER_CASES, ids=[c[2] for c in BUFFER_CASES])
def test_buffer_rejects(gen, changes, exc, name):
    args = apply(sparse_call(gen), changes)
    with pytest.raises(exc, match=_starts_with(name)):
        plan_sparse_attention(**args)


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        (lambda a: {"gate": a["gate"], "out": a["gate"]}, "out: its memory overlaps gate"),
        (_shared_storage, "out: its memory overlaps block_table"),
        (_out_overlaps_query_partly, "out: its memory overlaps query"),
        (_out_and_lse_overlap, "lse: its memory overlaps out"),
    ],
    ids=["out-gate", "out-block_table", "out-query-partly", "lse-out"],
)
def test_buffer_overlap_with_inputs(gen, alias, name):
    args = sparse_call(gen)
    args["gate"] = torch.randn(args["query"].shape, generator=gen)
    with pytest.raises(MateValueError, match=_starts_with(name)):
        plan_sparse_attention(**apply(args, alias(args)))
