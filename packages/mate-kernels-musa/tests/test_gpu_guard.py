"""The GPU sessions cannot pass by skipping: with ``MATE_REQUIRE_GPU=1`` (``nox -s gpu``,
``scripts/gpu-check.sh``) a machine that cannot run the GPU tests fails the run (conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a CUDA device")
@pytest.mark.parametrize("precompile", ["0", "1"])
def test_required_gpu_run_fails_instead_of_skipping(precompile: str) -> None:
    target = Path(__file__).with_name("test_sparse_native.py")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu", str(target)]
    # The GPU sessions also set MATE_TEST_PRECOMPILE=1, whose collection hook runs after the exit.
    env = {**os.environ, "MATE_REQUIRE_GPU": "1", "MATE_TEST_PRECOMPILE": precompile}
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "MATE_REQUIRE_GPU=1 but the GPU tests cannot run here: no CUDA device" in res.stdout + res.stderr
    assert "INTERNALERROR" not in res.stdout + res.stderr
    # Without the variable the same selection skips, as on any machine without a GPU.
    res = subprocess.run(cmd, cwd=ROOT, env={k: v for k, v in env.items() if k != "MATE_REQUIRE_GPU"},
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0 and " skipped" in res.stdout, res.stdout + res.stderr
