"""The oracle's public functions carry NumPy docstrings of their own: the research install
(mate-core + mate-reference) has no ``mate`` module whose docstrings they could lean on."""

from __future__ import annotations

import inspect

import pytest

import mate_reference

PUBLIC = ["qsa_indexer_mqa_score", "qsa_mqa_prefill", "qsa_mqa_decode", "qsa_sparse_attention", "topk_blocks",
          "expand_blocks"]  # fmt: skip


@pytest.mark.parametrize("name", PUBLIC)
def test_docstring_sections_and_parameters(name: str) -> None:
    fn = getattr(mate_reference, name)
    doc = inspect.getdoc(fn)
    for section in ("Parameters\n----------", "Returns\n-------", "Raises\n------"):
        assert section in doc, f"{name}: no {section.splitlines()[0]} section"
    params = doc.split("Parameters\n----------")[1].split("Returns\n-------")[0]
    for param in inspect.signature(fn).parameters:
        assert param in params, f"{name}: parameter {param} is not documented"
    assert "MateValueError" in doc and "MateTypeError" in doc
