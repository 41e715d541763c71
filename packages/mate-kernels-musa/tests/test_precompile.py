"""Ahead-of-time compile (``mate_kernels_musa.precompile``): what it lists, that it covers what the
launchers build, its argument errors, and (marker ``compile``) a parallel compile for sm_90a."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import mate_core
from mate_core.validate_mqa import NATIVE_DECODE_PAGE_SIZES
from mate_kernels_musa import mqa_launch
from mate_kernels_musa import precompile as pc


def _recorder(monkeypatch, module) -> list[tuple]:
    """Replace ``module.build`` by a recorder whose kernels do nothing; returns the record."""
    built: list[tuple] = []

    def build(factory, profile, *consts):
        built.append((factory, consts))
        return lambda *args: None

    monkeypatch.setattr(module, "build", build)
    monkeypatch.setattr(module, "profile_name", lambda device: "cuda-sm90a")
    return built


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_covers_mqa_launchers(dtype: torch.dtype, monkeypatch) -> None:
    """Every kernel the MQA launchers build for aligned inputs (both store paths, the schedule of whole
    causal prompts, every page size)."""
    built = _recorder(monkeypatch, mqa_launch)
    i32 = {"dtype": torch.int32}
    q, rows = torch.randn(1, 8, 4, 128).to(dtype), torch.randn(3, 4, 128).to(dtype)
    for nk in (6, 8):  # plain stores (nk % 4 != 0) and bulk tensor stores
        keys = torch.randn(1, nk, 128).to(dtype)
        mqa_launch.indexer_score(dataclasses.replace(mate_core.plan_indexer_score(q, keys, backend="reference"),
                                                     backend="tilelang"))  # fmt: skip
        plan = mate_core.plan_mqa_prefill(rows, keys[0], torch.zeros(3, **i32), torch.full((3,), 2, **i32),
                                          backend="reference")  # fmt: skip
        mqa_launch.mqa_prefill(dataclasses.replace(plan, backend="tilelang"))
    # Bulk stores with 4 rows per key: the schedule of whole causal prompts.
    plan = mate_core.plan_mqa_prefill(torch.randn(16, 4, 128).to(dtype), torch.randn(4, 128).to(dtype),
                                      torch.zeros(16, **i32), torch.full((16,), 2, **i32), backend="reference")  # fmt: skip
    mqa_launch.mqa_prefill(dataclasses.replace(plan, backend="tilelang"))
    for page_size in NATIVE_DECODE_PAGE_SIZES:
        cache = torch.randn(3, page_size, 1, 128).to(dtype)
        plan = mate_core.plan_mqa_decode(rows[:1], cache, torch.zeros(1, 2, **i32), torch.full((1,), 5, **i32), 32,
                                         backend="reference")  # fmt: skip
        mqa_launch.mqa_decode(dataclasses.replace(plan, backend="tilelang"))
    name = "bfloat16" if dtype == torch.bfloat16 else "float16"
    listed = {(s.factory, s.consts) for s in pc.launcher_specializations(dtypes=(name,))}
    assert len(set(built)) == 3 + len(NATIVE_DECODE_PAGE_SIZES)
    assert set(built) <= listed, set(built) - listed


def test_lists_families_dtypes_and_groups() -> None:
    every = pc.launcher_specializations()
    assert {s.family for s in every} == set(pc.FAMILIES)
    assert len(every) == len(set(every)), "duplicates"
    bf16 = pc.launcher_specializations(dtypes=("bfloat16",))
    assert 0 < len(bf16) < len(every) and all("float16" not in s.consts for s in bf16)
    g3 = pc.launcher_specializations(groups=(3,), families=("sparse_paged",))
    assert g3 and all(s.consts[0] == 3 and s.family == "sparse_paged" for s in g3)
    assert "sparse_paged_kernel(3, bfloat16" in g3[0].label


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dtypes": ("float32",)}, "dtypes: 'float32' is not one of"),
        ({"groups": (0,)}, "groups: 0 is not a GQA group size in 1..16"),
        ({"families": ("flash",)}, "families: 'flash' is not one of"),
    ],
)
def test_listing_errors(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        pc.launcher_specializations(**kwargs)


def test_precompile_argument_errors() -> None:
    with pytest.raises(ValueError, match=r"profile: 'sm_90' is not one of \['cuda-sm90a', 'musa-mp31'\]"):
        pc.precompile([], "sm_90")
    with pytest.raises(ValueError, match="jobs must be a positive int, got 0"):
        pc.precompile([], jobs=0)


def test_failures_are_reported_not_raised() -> None:
    """A specialization that cannot compile (a factory rejecting its constants) is a Result with an error."""
    from mate_kernels_musa import mqa_score_kernel

    # Keys-on-M stages need bulk stores: the factory raises ValueError before compiling.
    bad = pc.Spec(
        "mqa_score", mqa_score_kernel.score_kernel, ("bfloat16", *mqa_score_kernel.DEFAULT_TILES, False, True)
    )
    seen = []
    (result,) = pc.precompile([bad], on_result=seen.append)
    assert seen == [result] and result.spec == bad and result.error and "ValueError" in result.error


@pytest.mark.compile
def test_precompile_in_worker_processes(tmp_path, monkeypatch) -> None:
    """Two spawned workers compile the bf16 decode kernels for sm_90a into TileLang's cache."""
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    specs = pc.launcher_specializations(dtypes=("bfloat16",), families=("mqa_decode",))
    seen = []
    results = pc.precompile(specs, "cuda-sm90a", jobs=2, on_result=seen.append)
    assert [r.spec for r in results] == specs and sorted(seen) == sorted(results)
    assert all(r.error is None for r in results), [r.error for r in results]
    assert any(tmp_path.iterdir()), "nothing written to the cache"


def test_gpu_test_list_covers_launchers_and_test_variants() -> None:
    """The list the GPU test run precompiles (``gpu_specializations.py``, ``MATE_TEST_PRECOMPILE=1``)
    holds every launcher kernel of every GQA group and each test-only family, each once."""
    import sys

    from mate_kernels_musa import mqa_score_kernel, sparse_launch

    specs = sys.modules["mate_kernels_musa_tests_gpu_specializations"].gpu_test_specializations()
    assert len(specs) == len(set(specs))
    assert set(pc.launcher_specializations(groups=tuple(range(1, 17)))) <= set(specs)
    score = {s.consts for s in specs if s.factory is mqa_score_kernel.score_kernel}
    for tiles, schedule in mqa_score_kernel.VARIANTS:
        assert mqa_launch.score_consts("float16", True, tiles, schedule) in score
    consts = {s.consts for s in specs}
    assert mqa_launch.decode_consts("bfloat16", 8, False) in consts  # element-load decode
    for tile in sparse_launch.TILES:
        assert sparse_launch.paged_consts(12, "bfloat16", tile, wide=True) in consts  # int64 offsets
