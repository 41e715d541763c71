"""Registers this folder's shared test helpers as modules, before any test module imports them,
and with ``MATE_TEST_PRECOMPILE=1`` compiles the GPU tests' kernels in parallel before they run.

The suite runs with ``--import-mode=importlib``, which puts no test folder on ``sys.path``, so
``sparse_cases.py``, ``sparse_checks.py`` and ``gpu_specializations.py`` are loaded here by
path, once, under the names ``mate_kernels_musa_tests_<stem>``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import pytest

PRECOMPILE_ENV = "MATE_TEST_PRECOMPILE"


def _register(stem: str) -> None:
    name = f"mate_kernels_musa_tests_{stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{stem}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)


_register("sparse_cases")  # sparse_checks imports it
_register("sparse_checks")
_register("gpu_specializations")


def pytest_collection_finish(session: pytest.Session) -> None:
    """With ``MATE_TEST_PRECOMPILE=1`` and GPU tests about to run (selected, not skipped), compile
    every kernel they build in parallel worker processes first (``gpu_specializations.py``): on a
    cold TileLang cache the tests would otherwise compile them one after another on first use."""
    if os.environ.get(PRECOMPILE_ENV) != "1":
        return
    if not any("gpu" in item.keywords and item.get_closest_marker("skip") is None for item in session.items):
        return
    import torch

    from mate_kernels_musa._build import profile_name
    from mate_kernels_musa.precompile import precompile

    specs = sys.modules["mate_kernels_musa_tests_gpu_specializations"].gpu_test_specializations()
    jobs = min(16, os.cpu_count() or 1)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    start = time.perf_counter()
    results = precompile(specs, profile_name(torch.device("cuda", torch.cuda.current_device())), jobs=jobs)
    failed = [r for r in results if r.error is not None]
    line = f"{PRECOMPILE_ENV}=1: {len(specs) - len(failed)} of {len(specs)} kernel specializations of the GPU tests "
    line += f"compiled or found in the cache in {time.perf_counter() - start:.0f} s ({jobs} jobs)"
    if reporter is not None:
        reporter.write_line(line)
        for r in failed:  # the tests that need them compile them again and fail with the full error
            reporter.write_line(f"  failed: {r.spec.label}: {r.error}")
