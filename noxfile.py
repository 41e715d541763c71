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


def _load_toml(path: Path) -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10: nox itself depends on tomli there
        import tomli as tomllib
    return tomllib.loads(path.read_text())


# The tool requirements live once, in the root pyproject's dependency groups (flat lists).
GROUPS: dict[str, list[str]] = _load_toml(ROOT / "pyproject.toml")["dependency-groups"]
PACKAGES = {
    # package dir: (import name, local packages it declares)
    "mate-core": ("mate_core", []),
    "mate-reference": ("mate_reference", ["mate-core"]),
    "mate-kernels-musa": ("mate_kernels_musa", ["mate-core"]),
    "mate-qsa": ("mate", ["mate-core", "mate-reference", "mate-kernels-musa"]),
}

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["core", "reference", "kernels", "qsa", "benchmarks", "lint", "versions"]
nox.options.error_on_missing_interpreters = True


# Local packages a package's *tests* use beyond its declared dependencies: the kernel
# tests compare against the FP32 oracle. They are installed only after the import check
# below, so an undeclared runtime import still fails.
TEST_ONLY = {"mate-kernels-musa": ["mate-reference"]}

# Imports every module of a package; a missing optional native toolchain is tolerated.
IMPORT_ALL = """
import importlib, pkgutil, sys
root = importlib.import_module(sys.argv[1])
count = 1
for info in pkgutil.walk_packages(root.__path__, root.__name__ + "."):
    if info.name.endswith(".__main__"):
        continue
    try:
        importlib.import_module(info.name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in ("tilelang", "tvm"):
            raise
    count += 1
print(f"imported {count} modules of {root.__name__} with only its declared dependencies")
"""


def _install_stack(session: nox.Session, package: str, *extra: str) -> None:
    deps = PACKAGES[package][1]
    session.install(TORCH)
    session.install(*[f"./packages/{p}" for p in [*deps, package]], *extra)


def _test(session: nox.Session, package: str, *extra: str) -> None:
    _install_stack(session, package, *GROUPS["test"], *extra)
    session.run("python", "-c", IMPORT_ALL, PACKAGES[package][0])
    if package in TEST_ONLY:
        session.install(*[f"./packages/{p}" for p in TEST_ONLY[package]])
    session.run("pytest", f"packages/{package}/tests", *session.posargs)


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
def benchmarks(session: nox.Session) -> None:
    """The benchmark suite's CPU-checkable parts: report rendering, plots, README section, sweep grid."""
    session.install(TORCH)
    session.install(*GROUPS["test"], *GROUPS["bench"])
    session.run("pytest", "benchmarks/tests", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check, at the version the root pyproject pins."""
    session.install(*GROUPS["lint"])
    paths = ("packages", "benchmarks", "noxfile.py", "conftest.py")
    session.run("ruff", "check", *paths)
    session.run("ruff", "format", "--check", *paths)


def _pins(requirements: list[str]) -> dict[str, str]:
    """Local package name -> its version specifier, from a list of requirement strings."""
    pins = {}
    for req in requirements:
        match = re.match(r"\s*(mate-[a-z-]+)\s*([^;]*)", req)
        if match and match.group(1) in PACKAGES:
            pins[match.group(1)] = match.group(2).strip()
    return pins


@nox.session(venv_backend="none")
def versions(session: nox.Session) -> None:
    """All packages share one version, pin each other with exact == pins and ship the root LICENSE."""
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
    for pkg, (_, declared) in PACKAGES.items():
        project = _load_toml(ROOT / "packages" / pkg / "pyproject.toml")["project"]
        if project["name"] != pkg:
            session.error(f"packages/{pkg}/pyproject.toml: project name {project['name']!r} != {pkg!r}")
        requirements = list(project.get("dependencies", []))
        for extra in project.get("optional-dependencies", {}).values():
            requirements += extra
        pins = _pins(requirements)
        for dep, pin in pins.items():
            if pin != f"=={version}":
                session.error(f"{pkg}: dependency {dep}{pin} must be pinned as {dep}=={version}")
        missing = set(declared) - set(pins)
        if missing:
            session.error(f"{pkg}: must declare {', '.join(f'{d}=={version}' for d in sorted(missing))}")
    license_text = (ROOT / "LICENSE").read_bytes()
    for pkg in PACKAGES:
        # Each package ships the license in its own wheel and sdist: a copy of the root LICENSE.
        copy = ROOT / "packages" / pkg / "LICENSE"
        if not copy.is_file() or copy.read_bytes() != license_text:
            session.error(f"packages/{pkg}/LICENSE must be a copy of the root LICENSE (cp LICENSE packages/{pkg}/)")
    session.log(f"all packages at {version}, pins consistent, LICENSE copies identical")


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: a full QSA step on synthetic data (reference on CPU, native on a supported GPU)."""
    _install_stack(session, "mate-qsa")
    session.run("mate", "demo", *session.posargs)


@nox.session(venv_backend="none")
def gpu(session: nox.Session) -> None:
    """GPU-marked tests in the current environment (run on the H200; not a default session)."""
    src = os.pathsep.join(str(p) for p in sorted((ROOT / "packages").glob("*/src")))
    # MATE_REQUIRE_GPU: without a usable sm_90 GPU and TileLang the run fails instead of skipping every test.
    # MATE_TEST_PRECOMPILE: the tests' kernels are compiled in parallel before the tests run (kernels conftest.py).
    env = {"PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""), "MATE_REQUIRE_GPU": "1",
           "MATE_TEST_PRECOMPILE": "1"}  # fmt: skip
    session.run("python3", "-m", "pytest", "-m", "gpu", "packages", *session.posargs, env=env)
