"""Sessions: one test session per package, lint, versions, demo, and gpu (not default).

Each package session installs only that package and what it declares, so an
undeclared cross-package import fails there. CPU sessions install the CPU build
of torch given by MATE_TORCH_SPEC (default torch==2.13.0, which these machines
carry as a local file; a plain ``torch`` requirement would pull a CUDA build).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import nox

ROOT = Path(__file__).parent
TORCH = os.environ.get("MATE_TORCH_SPEC", "torch==2.13.0")
TEST_DEPS = ["pytest>=8", "hypothesis>=6.100", "numpy"]
PACKAGES = {
    # package dir: (import name, local packages it declares)
    "mate-core": ("mate_core", []),
    "mate-reference": ("mate_reference", ["mate-core"]),
    "mate-kernels-musa": ("mate_kernels_musa", ["mate-core"]),
    "mate-qsa": ("mate", ["mate-core", "mate-reference", "mate-kernels-musa"]),
}

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["core", "reference", "kernels", "qsa", "lint", "versions"]
nox.options.error_on_missing_interpreters = True


def _install_stack(session: nox.Session, package: str, *extra: str) -> None:
    deps = PACKAGES[package][1]
    session.install(TORCH)
    session.install(*[f"./packages/{p}" for p in [*deps, package]], *extra)


def _test(session: nox.Session, package: str, *extra: str) -> None:
    _install_stack(session, package, *TEST_DEPS, *extra)
    args = session.posargs or []
    session.run("pytest", f"packages/{package}/tests", *args)


@nox.session
def core(session: nox.Session) -> None:
    """mate-core: validation and plans (CPU)."""
    _test(session, "mate-core")


@nox.session
def reference(session: nox.Session) -> None:
    """mate-reference: the FP32 oracle against naive loops (CPU)."""
    _test(session, "mate-reference")


@nox.session
def kernels(session: nox.Session) -> None:
    """mate-kernels-musa: import without TileLang, and compile every kernel for sm_90a."""
    _test(session, "mate-kernels-musa")


@nox.session
def qsa(session: nox.Session) -> None:
    """mate-qsa: the facade, custom ops, torch.compile, CLI (CPU)."""
    _test(session, "mate-qsa")


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff>=0.6")
    session.run("ruff", "check", "packages", "noxfile.py", "benchmarks")


@nox.session(venv_backend="none")
def versions(session: nox.Session) -> None:
    """All packages share one version and pin each other with exact == pins."""
    found: dict[str, str] = {}
    for pkg, (mod, _) in PACKAGES.items():
        init = (ROOT / "packages" / pkg / "src" / mod / "__init__.py").read_text()
        match = re.search(r'^__version__ = "([^"]+)"', init, re.M)
        if not match:
            session.error(f"{pkg}: no __version__ in src/{mod}/__init__.py")
        found[pkg] = match.group(1)
    if len(set(found.values())) != 1:
        session.error(f"package versions differ: {found}")
    version = next(iter(found.values()))
    for pkg in PACKAGES:
        text = (ROOT / "packages" / pkg / "pyproject.toml").read_text()
        for dep, pin in re.findall(r'"(mate-[a-z-]+)([^"]*)"', text):
            if dep in PACKAGES and pin.strip() != f"=={version}":
                session.error(f"{pkg}: dependency {dep}{pin} must be pinned as {dep}=={version}")
        for dep in PACKAGES[pkg][1]:
            if f'"{dep}=={version}"' not in text:
                session.error(f"{pkg}: must declare {dep}=={version}")
    session.log(f"all packages at {version}, pins consistent")


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: a full QSA step on synthetic data (reference on CPU, native on a supported GPU)."""
    _install_stack(session, "mate-qsa")
    session.run("mate", "demo", *session.posargs)


@nox.session(venv_backend="none")
def gpu(session: nox.Session) -> None:
    """GPU-marked tests in the current environment (run on the H200; not a default session)."""
    src = os.pathsep.join(str(p) for p in sorted((ROOT / "packages").glob("*/src")))
    env = {"PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    session.run("python3", "-m", "pytest", "-m", "gpu", "packages", *session.posargs, env=env)
