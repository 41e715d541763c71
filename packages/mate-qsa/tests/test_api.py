"""The public facade: exact signatures, exports, results, backend selection and errors."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

import mate
import mate_core
import mate_reference.mqa
import mate_reference.selection
import mate_reference.sparse
from mate import _ops

# Copied verbatim from the spec's "Entrypoints" section.
SPEC_SIGNATURES = {
    "qsa_indexer_mqa_score": (
        "(q_idx: torch.Tensor, block_keys: torch.Tensor, *, block_table: torch.Tensor | None = None, "
        "page_size: int | None = None, cu_seqlens_q: torch.Tensor | None = None, token_to_req: torch.Tensor | None "
        "= None, num_requests: int | None = None, query_positions: torch.Tensor | None = None, seq_lens_q: "
        "torch.Tensor | None = None, block_size: int = 4, scale: float | None = None, score_scale: float | None = "
        "None, backend: str = 'tilelang') -> torch.Tensor"
    ),
    "qsa_mqa": (
        "(q: torch.Tensor, k: torch.Tensor, row_starts: torch.Tensor, row_ends: torch.Tensor, score_scale: float | "
        "None = None, *, scale: float | None = None, backend: str = 'tilelang') -> torch.Tensor"
    ),
    "qsa_mqa_decode": (
        "(q: torch.Tensor, k_cache: torch.Tensor, page_table: torch.Tensor, context_lens: torch.Tensor, "
        "max_model_len: int, score_scale: float | None = None, *, scale: float | None = None, backend: str = "
        "'tilelang') -> torch.Tensor"
    ),
    "qsa_mqa_prefill": (
        "(q: torch.Tensor, k: torch.Tensor, row_starts: torch.Tensor, row_ends: torch.Tensor, score_scale: float | "
        "None = None, *, scale: float | None = None, backend: str = 'tilelang') -> torch.Tensor"
    ),
    # The spec gives the return type separately: torch.Tensor or tuple[torch.Tensor, torch.Tensor].
    "qsa_sparse_attention": (
        "(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, token_indices: torch.Tensor | None = None, "
        "*, block_indices: torch.Tensor | None = None, cu_seqlens_q: torch.Tensor | None = None, token_to_req: "
        "torch.Tensor | None = None, num_requests: int | None = None, cu_seqlens_k: torch.Tensor | None = None, "
        "seq_lens_q: torch.Tensor | None = None, seq_lens_k: torch.Tensor | None = None, query_positions: "
        "torch.Tensor | None = None, block_table: torch.Tensor | None = None, page_size: int | None = None, scale: "
        "float | None = None, gate: torch.Tensor | None = None, num_splits: int | None = None, return_lse: bool = "
        "False, backend: str = 'tilelang', warp_specialized: bool = False, assume_compact_blocks: bool = False, "
        "out: torch.Tensor | None = None, selected_kv_indices: torch.Tensor | None = None, softmax_scale: float | "
        "None = None, k_scale: float = 1.0, v_scale: float = 1.0, compute_dtype: torch.dtype = torch.bfloat16, "
        "lse: torch.Tensor | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]"
    ),
}


@pytest.mark.parametrize("name", sorted(SPEC_SIGNATURES))
def test_signature_is_the_spec(name: str) -> None:
    assert str(inspect.signature(getattr(mate, name), eval_str=True)) == SPEC_SIGNATURES[name]


def test_qsa_mqa_is_the_prefill_entry_point() -> None:
    assert mate.qsa_mqa is mate.qsa_mqa_prefill


@pytest.mark.parametrize("name", sorted(SPEC_SIGNATURES))
def test_docstring_gives_shapes_and_dtypes(name: str) -> None:
    doc = inspect.getdoc(getattr(mate, name))
    for section in ("Parameters\n----------", "Returns\n-------", "Raises\n------"):
        assert section in doc
    for param in inspect.signature(getattr(mate, name)).parameters:
        assert param in doc, f"{name}: parameter {param} is not documented"
    assert "float32" in doc and "[" in doc


def test_exports() -> None:
    expected = {
        *SPEC_SIGNATURES,
        "topk_blocks",
        "expand_blocks",
        "MateError",
        "MateValueError",
        "MateTypeError",
        "LayoutError",
        "UnsupportedTargetError",
        "BackendUnavailableError",
        "GraphCaptureError",
        "__version__",
    }
    assert set(mate.__all__) == expected
    assert mate.topk_blocks is mate_reference.selection.topk_blocks
    assert mate.expand_blocks is mate_reference.selection.expand_blocks
    assert mate.UnsupportedTargetError is mate_core.UnsupportedTargetError
    assert issubclass(mate.UnsupportedTargetError, ValueError)
    # Every class MATE-QSA raises is a MateError and a subclass of the builtin its case calls for.
    for name, builtin in [("MateValueError", ValueError), ("MateTypeError", TypeError), ("LayoutError", ValueError),
                          ("BackendUnavailableError", RuntimeError), ("GraphCaptureError", RuntimeError)]:  # fmt: skip
        assert issubclass(getattr(mate, name), mate.MateError) and issubclass(getattr(mate, name), builtin), name
        assert getattr(mate, name) is getattr(mate_core, name)
    assert mate.__version__ == mate_core.__version__


def test_indexer_score_matches_naive_loops(make_case, naive, gen) -> None:
    _name, (q, k), kwargs = make_case("indexer_score", gen)
    got = mate.qsa_indexer_mqa_score(q, k, **kwargs)
    want = naive.indexer_score(q, k, scale=1 / 3.0, seq_lens_q=kwargs["seq_lens_q"])
    assert got.dtype == torch.float32 and got.shape == (2, 9, 3)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
    assert torch.isfinite(got).any()


def test_mqa_prefill_matches_naive_loops(make_case, naive, gen) -> None:
    _name, (q, k, starts, ends), kwargs = make_case("mqa_prefill", gen)
    got = mate.qsa_mqa_prefill(q, k, starts, ends, **kwargs)
    torch.testing.assert_close(got.double(), naive.mqa_prefill(q, k, starts, ends, scale=0.7), atol=1e-5, rtol=1e-5)
    assert torch.isneginf(got[2]).all()


def test_mqa_prefill_score_scale_is_a_denominator(make_case, gen) -> None:
    _name, args, _kwargs = make_case("mqa_prefill", gen)
    by_scale = mate.qsa_mqa(*args, scale=0.25, backend="reference")
    by_denominator = mate.qsa_mqa(*args, 4.0, backend="reference")
    torch.testing.assert_close(by_denominator, by_scale)


def test_mqa_decode_matches_naive_loops(make_case, naive, gen) -> None:
    _name, (q, cache, table, lens, max_len), kwargs = make_case("mqa_decode", gen)
    got = mate.qsa_mqa_decode(q, cache, table, lens, max_len, **kwargs)
    want = naive.mqa_decode(q, cache, table, lens, max_len, scale=1 / math.sqrt(16))
    assert got.shape == (3, max_len) and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


def test_sparse_attention_matches_naive_loops(make_case, naive, gen) -> None:
    _name, (query, key, value, tokens), kwargs = make_case("sparse_attention", gen)
    out, lse = mate.qsa_sparse_attention(query, key, value, tokens, **kwargs)
    want_out, want_lse = naive.sparse_attention(
        query, key, value, tokens,
        block_table=kwargs["block_table"], seq_lens_k=kwargs["seq_lens_k"], gate=kwargs["gate"], scale=0.3,
    )  # fmt: skip
    assert out.shape == query.shape and out.dtype == query.dtype
    assert lse.shape == query.shape[:-1] and lse.dtype == torch.float32
    torch.testing.assert_close(out.double(), want_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.double(), want_lse, atol=1e-5, rtol=1e-5)
    assert torch.isneginf(lse[1, 2]).all() and not out[1, 2].any()  # the empty row


def test_sparse_attention_binds_out_and_lse_buffers(make_case, gen) -> None:
    _name, args, kwargs = make_case("sparse_attention", gen)
    expected_out, expected_lse = mate.qsa_sparse_attention(*args, **kwargs)
    out = torch.full_like(args[0], float("nan"))
    lse = torch.full(args[0].shape[:-1], float("nan"))
    returned = mate.qsa_sparse_attention(*args, **{**kwargs, "return_lse": False}, out=out, lse=lse)
    assert returned is out
    torch.testing.assert_close(out, expected_out)
    torch.testing.assert_close(lse, expected_lse)  # written even though return_lse=False


def test_sparse_attention_padded_query_with_no_rows(make_case, gen) -> None:
    # A padded query [B, 0, Hq, D] (e.g. a batch slot with nothing to decode) is not a flattened one.
    _name, (query, key, value, tokens), kwargs = make_case("sparse_attention", gen)
    kwargs = {**kwargs, "gate": kwargs["gate"][:, :0]}
    out, lse = mate.qsa_sparse_attention(query[:, :0], key, value, tokens[:, :0], **kwargs)
    assert out.shape == (query.shape[0], 0, *query.shape[2:]) and lse.shape == (query.shape[0], 0, query.shape[2])


def test_sliced_query_positions_match_a_contiguous_copy(make_case, gen) -> None:
    # [B, Q] positions sliced from a wider table (no [rows] view without a copy) are metadata the
    # spec accepts as views; the result must equal the one with a contiguous copy.
    _name, (query, key, value, tokens), kwargs = make_case("sparse_attention", gen)
    b, q = query.shape[:2]
    table = torch.randint(0, 8, (b, q + 3), generator=gen, dtype=torch.int32)
    pos = table[:, 1 : q + 1]
    got = mate.qsa_sparse_attention(query, key, value, tokens, **kwargs, query_positions=pos)
    want = mate.qsa_sparse_attention(query, key, value, tokens, **kwargs, query_positions=pos.contiguous())
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g.nan_to_num(), w.nan_to_num())
    q_idx = torch.randn(b, q, 4, 128, generator=gen, dtype=torch.bfloat16)
    keys = torch.randn(b, 5, 128, generator=gen, dtype=torch.bfloat16)
    pos = (table * 2)[:, 1 : q + 1]
    got = mate.qsa_indexer_mqa_score(q_idx, keys, query_positions=pos, backend="reference")
    want = mate.qsa_indexer_mqa_score(q_idx, keys, query_positions=pos.contiguous(), backend="reference")
    assert torch.isinf(got).any() and torch.isfinite(got).any() and torch.equal(got, want)


# Each backend function on its plan, and what the public function must return from that plan.
REFERENCE = {
    "indexer_score": (mate_reference.mqa.indexer_score, lambda plan: plan.result),
    "mqa_prefill": (mate_reference.mqa.mqa_prefill, lambda plan: plan.out),
    "mqa_decode": (mate_reference.mqa.mqa_decode, lambda plan: plan.out),
    "sparse_attention": (mate_reference.sparse.sparse_attention, lambda plan: plan.returned()),
}


@pytest.mark.parametrize("operation", sorted(REFERENCE))
def test_public_call_is_plan_then_reference(operation: str, make_case, gen) -> None:
    name, args, kwargs = make_case(operation, gen)
    public = getattr(mate, name)(*args, **kwargs)
    plan = getattr(mate_core, f"plan_{operation}")(*args, **kwargs)
    backend, returned = REFERENCE[operation]
    backend(plan)
    for got, want in zip(_tensors(public), _tensors(returned(plan)), strict=True):
        assert torch.equal(got.nan_to_num(), want.nan_to_num())


def _tensors(x) -> tuple[torch.Tensor, ...]:
    return x if isinstance(x, tuple) else (x,)


@pytest.mark.parametrize("operation", ["indexer_score", "mqa_prefill", "mqa_decode", "sparse_attention"])
def test_eager_calls_bypass_the_dispatcher(operation: str, make_case, gen, monkeypatch) -> None:
    def refuse(*args):
        raise AssertionError("eager calls must not go through torch.ops.mate")

    monkeypatch.setitem(_ops.OPS, operation, refuse)
    name, args, kwargs = make_case(operation, gen)
    result = getattr(mate, name)(*args, **kwargs)
    assert torch.isfinite(_tensors(result)[0]).any()


@pytest.mark.parametrize("operation", ["indexer_score", "mqa_prefill", "mqa_decode", "sparse_attention"])
def test_auto_backend_is_rejected(operation: str, make_case, gen) -> None:
    name, args, kwargs = make_case(operation, gen)
    with pytest.raises(ValueError, match=r"^backend: got 'auto'; automatic backend selection is not supported") as info:
        getattr(mate, name)(*args, **{**kwargs, "backend": "auto"})
    assert not isinstance(info.value, mate.UnsupportedTargetError)


def _canonical_native_calls(gen: torch.Generator):
    """Inputs that pass every tilelang-only rule, so only the arch gate can reject them on the CPU."""
    bf16 = {"dtype": torch.bfloat16}
    i32 = {"dtype": torch.int32}
    q_idx, keys = torch.randn(1, 8, 4, 128, generator=gen, **bf16), torch.randn(1, 2, 128, generator=gen, **bf16)
    rows = torch.randn(3, 4, 128, generator=gen, **bf16)
    cache = torch.randn(2, 16, 1, 128, generator=gen, **bf16)
    query = torch.randn(4, 24, 256, generator=gen, **bf16)
    kv = torch.randn(2, 64, 2, 256, generator=gen, **bf16)
    return {
        "qsa_indexer_mqa_score": lambda: mate.qsa_indexer_mqa_score(q_idx, keys),
        "qsa_mqa_prefill": lambda: mate.qsa_mqa_prefill(
            rows, keys[0], torch.zeros(3, **i32), torch.full((3,), 2, **i32)
        ),
        "qsa_mqa_decode": lambda: mate.qsa_mqa_decode(
            rows[:1], cache, torch.zeros(1, 2, **i32), torch.full((1,), 20, **i32), 32
        ),
        "qsa_sparse_attention": lambda: mate.qsa_sparse_attention(
            query,
            kv,
            kv.clone(),
            torch.zeros(4, 7, **i32),
            cu_seqlens_q=torch.tensor([0, 4], **i32),
            block_table=torch.tensor([[1, 0]], **i32),
        ),
    }


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the rejection of a CPU-only machine")
@pytest.mark.parametrize("name", sorted(set(SPEC_SIGNATURES) - {"qsa_mqa"}))
def test_tilelang_on_cpu_is_rejected_before_compiling(name: str, gen) -> None:
    with pytest.raises(mate.UnsupportedTargetError) as info:
        _canonical_native_calls(gen)[name]()
    message = str(info.value)
    assert "cpu" in message and "sm_90a" in message and "MP31" in message and "backend='reference'" in message
