"""The README's claim for the CPU-only research install (mate-core + mate-reference, no ``mate``):
its Python examples run with ``import mate_reference as mate``. This package's nox session has
exactly that install, so an example that needs the facade fails here."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[3] / "README.md"
EXAMPLES = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M) if README.exists() else []
SUBSTITUTION = "import mate_reference as mate"


def test_readme_states_the_substitution() -> None:
    if not README.exists():
        pytest.skip("an installed copy of the tests without the repository")
    assert f"`{SUBSTITUTION}`" in README.read_text()
    assert EXAMPLES


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_readme_example_runs_on_the_oracle_alone(index: int, monkeypatch: pytest.MonkeyPatch) -> None:
    source = EXAMPLES[index]
    assert re.search(r"^import mate$", source, re.M), "every example imports the facade as `import mate`"
    source = re.sub(r"^import mate$", SUBSTITUTION, source, flags=re.M)
    module = types.ModuleType("__readme_research__")  # importable, as torch.compile needs
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(source, f"README.md python block {index + 1}", "exec"), module.__dict__)
