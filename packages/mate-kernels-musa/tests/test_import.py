"""Smoke tests of the package surface: lazy TileLang import, clean errors, target profiles.

These run everywhere (no GPU, with or without TileLang): importing the package must
not import TileLang, the backend entry points must fail with MATE's own errors
(never an AssertionError, KeyError or a compile attempt) when they cannot run, and
every native target in mate_core's table must have a consistent compile profile.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import subprocess
import sys
import textwrap
from importlib.metadata import PackageNotFoundError, version

import pytest
import torch

import mate_core
import mate_kernels_musa
from mate_core.arch import NATIVE_TARGETS
from mate_core.errors import BackendUnavailableError, UnsupportedTargetError
from mate_kernels_musa import target

ENTRY_POINTS = ("indexer_score", "mqa_prefill", "mqa_decode", "sparse_attention")
HAS_TILELANG = importlib.util.find_spec("tilelang") is not None


def test_import_does_not_import_tilelang() -> None:
    code = textwrap.dedent(
        """
        import sys
        import mate_kernels_musa, mate_kernels_musa.target, mate_kernels_musa._build
        import mate_kernels_musa.mqa_score_kernel, mate_kernels_musa.mqa_decode_kernel
        mate_kernels_musa.tilelang_version()
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tilelang", "tvm"))
        print("LOADED:" + ",".join(loaded))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "LOADED:"


def test_public_surface() -> None:
    assert set(ENTRY_POINTS) <= set(mate_kernels_musa.__all__)
    assert mate_kernels_musa.__version__ == mate_core.__version__
    for name in ENTRY_POINTS:
        assert callable(getattr(mate_kernels_musa, name))


def test_tilelang_version_reads_metadata_only() -> None:
    expected = None
    for dist in ("tilelang", "tilelang-musa"):  # the first distribution installed
        try:
            expected = version(dist)
            break
        except PackageNotFoundError:
            continue
    assert mate_kernels_musa.tilelang_version() == expected


def _native_shaped_plans(gen: torch.Generator) -> dict[str, object]:
    """Plans that satisfy every tilelang-only rule, on the CPU (validated via the reference path)."""
    bf16, i32 = {"dtype": torch.bfloat16}, {"dtype": torch.int32}

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(**bf16)

    q_idx, keys, rows, cache = randn(1, 8, 4, 128), randn(1, 2, 128), randn(3, 4, 128), randn(2, 16, 1, 128)
    query, kv = randn(4, 24, 256), randn(2, 64, 2, 256)
    plans = {
        "indexer_score": mate_core.plan_indexer_score(q_idx, keys, backend="reference"),
        "mqa_prefill": mate_core.plan_mqa_prefill(
            rows, keys[0], torch.zeros(3, **i32), torch.full((3,), 2, **i32), backend="reference"
        ),
        "mqa_decode": mate_core.plan_mqa_decode(
            rows[:1], cache, torch.zeros(1, 2, **i32), torch.full((1,), 20, **i32), 32, backend="reference"
        ),
        "sparse_attention": mate_core.plan_sparse_attention(
            query,
            kv,
            kv.clone(),
            torch.randint(-1, 64, (4, 7), generator=gen, **i32),
            cu_seqlens_q=torch.tensor([0, 4], **i32),
            block_table=torch.tensor([[1, 0]], **i32),
            backend="reference",
        ),
    }
    return {name: dataclasses.replace(plan, backend="tilelang") for name, plan in plans.items()}


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_entry_points_without_tilelang_raise_backend_unavailable(name: str, gen, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "tilelang", None)  # find_spec("tilelang") -> None
    plan = _native_shaped_plans(gen)[name]
    with pytest.raises(BackendUnavailableError) as info:
        getattr(mate_kernels_musa, name)(plan)
    assert "tilelang" in str(info.value).lower() and "backend='reference'" in str(info.value)


@pytest.mark.skipif(not HAS_TILELANG, reason="needs TileLang installed (the arch gate runs after the TileLang check)")
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the rejection of a CPU device")
@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_entry_points_reject_the_cpu_before_compiling(name: str, gen) -> None:
    from mate_kernels_musa import _build

    compiled_before = _build.build.cache_info().currsize
    plan = _native_shaped_plans(gen)[name]
    with pytest.raises(UnsupportedTargetError) as info:
        getattr(mate_kernels_musa, name)(plan)
    assert "cpu" in str(info.value) and "sm_90a" in str(info.value)
    assert _build.build.cache_info().currsize == compiled_before


@pytest.mark.skipif(not HAS_TILELANG, reason="needs TileLang installed (build() imports it)")
def test_build_logs_each_specialization_once(monkeypatch, caplog) -> None:
    import tilelang

    from mate_kernels_musa import _build

    compiled, calls = object(), []
    monkeypatch.setattr(tilelang, "compile", lambda func, **kw: calls.append(func) or compiled)

    def fake_kernel(width):  # a factory: compile-time constants in, a prim_func out
        return ("prim_func", width)

    with caplog.at_level(logging.INFO, logger="mate_kernels_musa"):
        assert _build.build(fake_kernel, target.CUDA_SM90A.name, 7) is compiled
        assert _build.build(fake_kernel, target.CUDA_SM90A.name, 7) is compiled  # cached: not rebuilt
    messages = [r.getMessage() for r in caplog.records if r.name == "mate_kernels_musa"]
    assert calls == [("prim_func", 7)]
    assert len(messages) == 2
    assert messages[0] == f"building fake_kernel(7,) for {target.CUDA_SM90A.name} (first use in this process)"
    assert messages[1].startswith(f"built fake_kernel(7,) for {target.CUDA_SM90A.name} in ")
    assert messages[1].endswith(" s")


def test_every_native_target_has_a_consistent_profile() -> None:
    assert len(target.PROFILES) == len(NATIVE_TARGETS)
    for native in NATIVE_TARGETS:
        profile = target.profile_for(native)
        assert profile.device_type == native.device_type
        assert profile.target["arch"] == native.arch
        assert target.profile_named(profile.name) is profile
    assert {p.name for p in target.PROFILES.values()} == {target.CUDA_SM90A.name, target.MUSA_MP31.name}


def test_target_table_facts() -> None:
    by_arch = {t.arch: t for t in NATIVE_TARGETS}
    hopper, mp31 = by_arch["sm_90a"], by_arch["mp_31"]
    assert (hopper.device_type, hopper.capability, hopper.verified) == ("cuda", (9, 0), True)
    assert (mp31.device_type, mp31.capability, mp31.verified) == ("musa", (3, 1), False)
    # A dict target: tilelang 0.1.15 rejects the string form "cuda -arch=sm_90a".
    assert target.CUDA_SM90A.target == {"kind": "cuda", "arch": "sm_90a"}
    assert target.MUSA_MP31.target["kind"] == "musa"
