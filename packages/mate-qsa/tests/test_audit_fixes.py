"""Audit findings F7 (reference indexer on meta tensors) and F8 (metadata dtypes in the docstrings).

F8: every integer-metadata entry of a public docstring reads "int32 (reference: int32/int64)",
and the behaviour agrees: backend='tilelang' rejects int64 for it (a MateTypeError naming the
argument, raised by validation before the architecture gate), backend='reference' accepts it.
"""

from __future__ import annotations

import inspect
import re

import pytest
import torch

import mate

BF16, I32, I64 = torch.bfloat16, torch.int32, torch.int64

# --------------------------------------------------------------------------- F7: meta tensors


def _meta(*shape, dtype=BF16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_indexer_reference_on_meta_padded():
    got = mate.qsa_indexer_mqa_score(_meta(1, 8, 4, 128), _meta(1, 2, 128), backend="reference")
    assert got.device.type == "meta" and got.dtype == torch.float32 and got.shape == (1, 8, 2)
    got = mate.qsa_indexer_mqa_score(
        _meta(3, 5, 4, 128),
        _meta(3, 7, 128),
        query_positions=_meta(3, 5, dtype=I32),
        seq_lens_q=_meta(3, dtype=I64),
        backend="reference",
    )
    assert got.device.type == "meta" and got.shape == (3, 5, 7)


def test_indexer_reference_on_meta_varlen():
    q, keys = _meta(9, 4, 128), _meta(2, 6, 128)
    by_cu = mate.qsa_indexer_mqa_score(q, keys, cu_seqlens_q=_meta(3, dtype=I32), backend="reference")
    by_t2r = mate.qsa_indexer_mqa_score(
        q,
        keys,
        token_to_req=_meta(9, dtype=I64),
        num_requests=2,
        query_positions=_meta(9, dtype=I32),
        backend="reference",
    )
    paged = mate.qsa_indexer_mqa_score(
        q,
        _meta(4, 8, 1, 128),
        block_table=_meta(2, 3, dtype=I32),
        token_to_req=_meta(9, dtype=I32),
        num_requests=2,
        backend="reference",
    )
    for got, width in ((by_cu, 6), (by_t2r, 6), (paged, 24)):
        assert got.device.type == "meta" and got.dtype == torch.float32 and got.shape == (9, width)


# --------------------------------------------------------------------------- F8: docstrings


def _entries(function) -> dict[str, str]:
    """NumPy-style ``Parameters`` entries: name -> description (one line of text)."""
    doc = inspect.getdoc(function)
    block = doc.split("Parameters\n----------\n", 1)[1].split("\nReturns\n-------", 1)[0]
    entries: dict[str, str] = {}
    for match in re.finditer(r"^(\S[^\n]*?) : [^\n]*\n((?:    [^\n]*\n?)*)", block, flags=re.MULTILINE):
        text = " ".join(line.strip() for line in match.group(2).splitlines())
        for name in match.group(1).split(", "):
            entries[name] = text
    return entries


NATIVE_INT32 = "int32 (reference: int32/int64)"
INT_METADATA = {
    mate.qsa_sparse_attention: [
        "token_indices", "block_indices", "cu_seqlens_q", "token_to_req", "seq_lens_q", "seq_lens_k",
        "query_positions", "block_table", "selected_kv_indices",
    ],
    mate.qsa_indexer_mqa_score: ["block_table", "query_positions", "seq_lens_q"],
    mate.qsa_mqa_prefill: ["row_starts", "row_ends"],
    mate.qsa_mqa_decode: ["page_table", "context_lens"],
}  # fmt: skip
# Metadata of layouts that only backend='reference' runs: both dtypes, and the docstring says so.
REFERENCE_ONLY = {
    mate.qsa_sparse_attention: ["cu_seqlens_k"],
    mate.qsa_indexer_mqa_score: ["cu_seqlens_q", "token_to_req"],
}


@pytest.mark.parametrize("function", list(INT_METADATA), ids=lambda f: f.__name__)
def test_integer_metadata_entries_say_int32_natively(function):
    entries = _entries(function)
    assert set(entries) >= set(inspect.signature(function).parameters) - {"k_scale", "v_scale"}
    for name in INT_METADATA[function]:
        assert entries[name].startswith(NATIVE_INT32), f"{function.__name__}: {name}: {entries[name]!r}"
    for name in REFERENCE_ONLY.get(function, []):
        assert entries[name].startswith("int32/int64"), f"{function.__name__}: {name}: {entries[name]!r}"
    # No other entry promises int64 without the reference qualifier.
    for name, text in entries.items():
        if "int64" in text and name not in REFERENCE_ONLY.get(function, []):
            assert NATIVE_INT32 in text, f"{function.__name__}: {name}: {text!r}"


SPARSE_INT32 = {
    "token_indices": torch.zeros(5, 7, dtype=I32),
    "block_indices": torch.zeros(5, 1, dtype=I32),
    "cu_seqlens_q": torch.tensor([0, 2, 5], dtype=I32),
    "seq_lens_q": torch.tensor([2, 3], dtype=I32),
    "seq_lens_k": torch.tensor([40, 100], dtype=I32),
    "query_positions": torch.arange(5, dtype=I32),
    "block_table": torch.tensor([[2, -1], [0, 3]], dtype=I32),
}


def _sparse_call(**overrides):
    """A valid flattened-query paged call; ``overrides`` replace arguments (None drops one)."""
    query = torch.randn(5, 4, 256, dtype=BF16)
    kv = torch.randn(4, 64, 2, 256, dtype=BF16)
    kwargs = {k: v for k, v in {**SPARSE_INT32, **overrides}.items() if v is not None}
    return lambda backend: mate.qsa_sparse_attention(query, kv, kv.clone(), **kwargs, backend=backend)


def _calls():
    """(function, argument) -> call(backend) with that argument as int64 (everything else valid)."""
    calls = {("qsa_sparse_attention", name): _sparse_call(**{name: t.long()}) for name, t in SPARSE_INT32.items()}
    calls["qsa_sparse_attention", "token_to_req"] = _sparse_call(
        cu_seqlens_q=None, token_to_req=torch.tensor([0, 0, 1, 1, 1], dtype=I64), num_requests=2
    )
    physical_q, physical_kv = torch.randn(5, 4, 256, dtype=BF16), torch.randn(12, 2, 256, dtype=BF16)
    calls["qsa_sparse_attention", "selected_kv_indices"] = lambda backend: mate.qsa_sparse_attention(
        physical_q, physical_kv, physical_kv.clone(), selected_kv_indices=torch.zeros(5, 3, dtype=I64), backend=backend
    )

    q_idx, keys = torch.randn(2, 8, 4, 128, dtype=BF16), torch.randn(2, 3, 128, dtype=BF16)
    calls["qsa_indexer_mqa_score", "query_positions"] = lambda backend: mate.qsa_indexer_mqa_score(
        q_idx, keys, query_positions=torch.arange(16, dtype=I64).view(2, 8), backend=backend
    )
    calls["qsa_indexer_mqa_score", "seq_lens_q"] = lambda backend: mate.qsa_indexer_mqa_score(
        q_idx, keys, seq_lens_q=torch.tensor([8, 3], dtype=I64), backend=backend
    )
    calls["qsa_indexer_mqa_score", "block_table"] = lambda backend: mate.qsa_indexer_mqa_score(
        q_idx,
        torch.randn(5, 4, 128, dtype=BF16),
        block_table=torch.tensor([[0, 4], [1, -1]], dtype=I64),
        backend=backend,
    )

    rows, k = torch.randn(3, 4, 128, dtype=BF16), torch.randn(6, 128, dtype=BF16)
    starts, ends = torch.zeros(3, dtype=I32), torch.full((3,), 4, dtype=I32)
    calls["qsa_mqa_prefill", "row_starts"] = lambda backend: mate.qsa_mqa_prefill(
        rows, k, starts.long(), ends, backend=backend
    )
    calls["qsa_mqa_prefill", "row_ends"] = lambda backend: mate.qsa_mqa_prefill(
        rows, k, starts, ends.long(), backend=backend
    )
    cache, table, lens = torch.randn(2, 16, 1, 128, dtype=BF16), torch.zeros(3, 2, dtype=I32), torch.tensor([5, 9, 20])
    calls["qsa_mqa_decode", "page_table"] = lambda backend: mate.qsa_mqa_decode(
        rows, cache, table.long(), lens.int(), 32, backend=backend
    )
    calls["qsa_mqa_decode", "context_lens"] = lambda backend: mate.qsa_mqa_decode(
        rows, cache, table, lens.long(), 32, backend=backend
    )
    return calls


CALLS = _calls()


def test_every_documented_int32_argument_has_a_call():
    """Read from the docstrings, so a newly documented int32 argument without an int64 call fails here."""
    documented = {
        (f.__name__, name) for f in INT_METADATA for name, text in _entries(f).items() if NATIVE_INT32 in text
    }
    assert documented == set(CALLS)


@pytest.mark.parametrize(("function", "name"), sorted(CALLS))
def test_int64_metadata_is_reference_only(function, name):
    call = CALLS[function, name]
    result = call("reference")
    assert all(isinstance(t, torch.Tensor) for t in (result if isinstance(result, tuple) else (result,)))
    with pytest.raises(mate.MateTypeError, match=rf"^{name}: got dtype int64; expected one of \[int32\]"):
        call("tilelang")
