"""``scripts/gpu-check.sh`` names its compute-sanitizer subset by test id and ``-k`` expression.
A renamed test or parameter would make that step select nothing (pytest exits 4 or 5) only on
the GPU machine; here each selection is collected on the CPU and must hold at least one test."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "gpu-check.sh"


def memcheck_selections() -> list[list[str]]:
    """The pytest arguments of each memcheck run of the script, its variables expanded."""
    text = SCRIPT.read_text()
    paths = dict(re.findall(r"^(\w+)=(packages/\S+)$", text, flags=re.M))
    loop = re.search(r"for sel in (.*?); do", text, flags=re.S)
    assert loop is not None, "no memcheck loop found in scripts/gpu-check.sh"
    selections = []
    for sel in re.findall(r'"([^"]*)"', loop.group(1)):
        expanded = re.sub(r"\$(\w+)", lambda m: paths[m.group(1)], sel)
        selections.append(shlex.split(expanded))
    return selections


def test_memcheck_loop_is_parsed() -> None:
    # MQA ids, the sparse -k memcheck tests, the union ones: three runs, each naming test files.
    sels = memcheck_selections()
    assert len(sels) == 3
    assert all(any(arg.startswith("packages/") for arg in sel) for sel in sels)


def _label(sel: list[str]) -> str:
    """The test files a selection runs, e.g. ``test_sparse_native+test_sparse_native_paths``."""
    files = dict.fromkeys(Path(arg.split("::")[0]).stem for arg in sel if arg.startswith("packages/"))
    return "+".join(files)


@pytest.mark.parametrize("sel", memcheck_selections(), ids=_label)
def test_memcheck_selection_collects_tests(sel: list[str]) -> None:
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "gpu", *sel]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    counts = re.search(r"(\d+)(?:/\d+)? tests? collected", out)
    assert counts is not None and int(counts.group(1)) >= 1, out
    ids = [arg for arg in sel if "::" in arg]
    # Every test id the script names is collected (pytest also fails on a missing id, exit 4).
    assert int(counts.group(1)) >= len(ids), out
