"""Small random inputs for every public entry point (CPU, reference backend).

Each builder takes a CPU generator and returns ``(function_name, args, kwargs)``
for a call of ``mate.<function_name>``; sizes are tiny so that opcheck and
torch.compile tests stay fast. Data are random normals (never zeros) and the
metadata mixes visible, masked, -1 and out-of-range entries.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

Case = tuple[str, tuple[Any, ...], dict[str, Any]]


def _randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen).to(dtype)


def _i32(values: list) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def indexer_case(gen: torch.Generator) -> Case:
    q = _randn(gen, 2, 9, 4, 16, dtype=torch.bfloat16)
    k = _randn(gen, 2, 3, 16, dtype=torch.bfloat16)
    return "qsa_indexer_mqa_score", (q, k), {"seq_lens_q": _i32([9, 6]), "score_scale": 3.0, "backend": "reference"}


def prefill_case(gen: torch.Generator) -> Case:
    q = _randn(gen, 5, 4, 16)
    k = _randn(gen, 7, 1, 16)
    starts, ends = _i32([0, 2, 3, 5, 0]), _i32([3, 6, 3, 7, 1])  # row 2 is an empty interval
    return "qsa_mqa_prefill", (q, k, starts, ends), {"scale": 0.7, "backend": "reference"}


def decode_case(gen: torch.Generator) -> Case:
    q = _randn(gen, 3, 1, 4, 16)
    cache = _randn(gen, 4, 8, 1, 16)
    table = _i32([[2, 0, -1], [1, -1, -1], [3, 9, 0]])  # -1 and an out-of-range page (9)
    lens = _i32([12, 8, 24])
    return "qsa_mqa_decode", (q, cache, table, lens, 20), {"backend": "reference"}


def sparse_case(gen: torch.Generator, *, return_lse: bool = True) -> Case:
    b, s, hq, hkv, d = 2, 8, 4, 2, 16
    query = _randn(gen, b, 3, hq, d)
    key, value = _randn(gen, 6, 4, hkv, d), _randn(gen, 6, 4, hkv, d)  # 6 pages of 4 tokens
    table = _i32([[4, 1], [0, 5]])
    tokens = _i32(
        [
            [[0, 3, 5, -1], [1, 1, 6, 7], [2, 7, -1, -1]],  # duplicate 1
            [[7, 2, 0, -1], [3, 4, 5, 9], [-1, -1, -1, -1]],  # 9 is past the capacity; an empty row
        ]
    )
    kwargs = {
        "block_table": table,
        "seq_lens_k": _i32([s, s - 1]),
        "gate": _randn(gen, b, 3, hq),
        "return_lse": return_lse,
        "scale": 0.3,
        "backend": "reference",
    }
    return "qsa_sparse_attention", (query, key, value, tokens), kwargs


CASES: dict[str, Callable[[torch.Generator], Case]] = {
    "indexer_score": indexer_case,
    "mqa_prefill": prefill_case,
    "mqa_decode": decode_case,
    "sparse_attention": sparse_case,
}


@pytest.fixture
def make_case() -> Callable[[str, torch.Generator], Case]:
    """``make_case(operation, gen)`` -> ``(function_name, args, kwargs)``."""
    return lambda operation, gen: CASES[operation](gen)


def _load_naive() -> ModuleType:
    # --import-mode=importlib puts no test directory on sys.path; load the helper by path
    # under a name no other package's tests use.
    spec = importlib.util.spec_from_file_location("_mate_qsa_tests_naive", Path(__file__).with_name("naive.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_NAIVE = _load_naive()


@pytest.fixture
def naive() -> ModuleType:
    """The float64 loop implementations in ``naive.py``."""
    return _NAIVE
