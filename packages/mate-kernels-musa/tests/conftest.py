"""Registers this folder's shared test helpers as modules, before any test module imports them.

The suite runs with ``--import-mode=importlib``, which puts no test folder on ``sys.path``, so
``sparse_cases.py`` and ``sparse_checks.py`` are loaded here by path, once, under the names
``mate_kernels_musa_tests_sparse_cases`` and ``mate_kernels_musa_tests_sparse_checks``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def _register(stem: str) -> None:
    name = f"mate_kernels_musa_tests_{stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{stem}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)


_register("sparse_cases")  # sparse_checks imports it
_register("sparse_checks")
