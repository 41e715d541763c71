"""The checks that need data pointers, again where the tensors are real.

Validation reads data pointers for three rules: the 16-byte alignment of the vector-load rule
(native K/V, MQA and indexer operands), an output buffer whose elements overlap each other, and
an output buffer that overlaps an input. While ``torch.compile`` traces, the tensors are fake and
have no addresses, so validation cannot apply these rules. The compiled graph later calls the
custom op ``mate::<operation>`` with real tensors, and the op runs :func:`check_plan_pointers`
before its backend. (AOT backends functionalize the op: it then writes a fresh buffer, which
cannot overlap an input, and the graph copies it into ``out`` afterwards.) Host metadata only:
nothing here reads device memory or synchronizes.
"""

from __future__ import annotations

from typing import Any

from .checks import check_internal_overlap, check_no_overlap, check_vector_alignment

__all__ = ["SPARSE_INPUT_FIELDS", "check_plan_pointers"]

# Plan fields of qsa_sparse_attention that ``out`` and ``lse`` must not overlap (the gate included).
SPARSE_INPUT_FIELDS = (
    "query", "key", "value", "token_indices", "selected_kv_indices", "block_indices", "gate",
    "cu_seqlens_q", "token_to_req", "cu_seqlens_k", "seq_lens_q", "seq_lens_k", "query_positions",
    "block_table",
)  # fmt: skip

# operation -> (argument name, plan field) pairs under the vector-load rule's alignment with backend='tilelang'.
_NATIVE_VECTOR_OPERANDS = {
    "indexer_score": (("q_idx", "q"), ("block_keys", "block_keys")),
    "mqa_prefill": (("q", "q"), ("k", "k")),
    "sparse_attention": (("key", "key"), ("value", "value")),
}


def check_plan_pointers(operation: str, plan: Any) -> None:
    """Apply the pointer rules of validation to ``plan``'s real tensors.

    Parameters
    ----------
    operation : str
        ``"indexer_score"``, ``"mqa_prefill"``, ``"mqa_decode"`` or ``"sparse_attention"``.
    plan
        The operation's plan (:mod:`.plans`).

    Raises
    ------
    MateValueError
        ``out``/``lse`` of sparse attention overlapping themselves, each other or an input.
    LayoutError
        A native operand that is not 16-byte aligned.
    """
    if operation == "sparse_attention":
        inputs = {name: getattr(plan, name) for name in SPARSE_INPUT_FIELDS}
        check_internal_overlap("out", plan.out_result)
        check_no_overlap("out", plan.out_result, inputs)
        if plan.lse_result is not None:
            check_internal_overlap("lse", plan.lse_result)
            check_no_overlap("lse", plan.lse_result, {**inputs, "out": plan.out_result})
    if plan.backend == "tilelang":
        for name, field in _NATIVE_VECTOR_OPERANDS.get(operation, ()):
            check_vector_alignment(name, getattr(plan, field))  # the stride rules held while tracing
