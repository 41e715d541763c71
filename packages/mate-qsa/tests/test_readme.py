"""The README's Python examples run as written (CPU, backend='reference')."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[3] / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _blocks() -> list[str]:
    if not README.exists():  # an installed copy of the tests without the repository
        return []
    return BLOCK.findall(README.read_text())


def test_readme_has_an_example_per_entry_point() -> None:
    code = "\n".join(_blocks())
    for name in ("qsa_indexer_mqa_score", "qsa_mqa_prefill", "qsa_mqa(", "qsa_mqa_decode", "qsa_sparse_attention"):
        assert f"mate.{name}" in code, name
    assert "mate.topk_blocks" in code and "mate.expand_blocks" in code


def test_readme_quick_start_has_exactly_the_two_commands() -> None:
    text = README.read_text()
    quick = text[text.index("## Quick start") : text.index("## Install")]
    commands = re.findall(r"^```bash\n(.*?)^```", quick, re.S | re.M)
    assert [c.strip().splitlines() for c in commands] == [
        ["python3 -m pip install nox && python3 -m nox -s demo", "python3 -m pip install nox && python3 -m nox"]
    ]


@pytest.mark.parametrize("index", range(len(_blocks())))
def test_readme_example_runs(index: int, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _blocks()[index]
    # A real module in sys.modules: torch.compile (dynamo) imports the module of the
    # functions it traces by name, and an exec namespace alone is not importable.
    module = types.ModuleType("__readme__")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(source, f"README.md python block {index + 1}", "exec"), module.__dict__)
