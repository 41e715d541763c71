"""The kernel specializations the GPU tests compile, for an ahead-of-time parallel compile.

A GPU test compiles each specialization it needs on first use, one at a time (10-40 s each with
nvcc). Besides the launchers' own kernels (``mate precompile``), the GPU tests build every GQA
group of ``test_head_geometry``, every score schedule of ``test_score_variants_match_reference``,
the int64-offset kernels of ``test_wide_offset_variant``, the element-load decode kernels of
``test_decode_unaligned_cache_element_path`` and the union rows-per-group of
``test_sparse_union_native``: ~260 specializations, over an hour one after another on a cold
cache, minutes in parallel. With ``MATE_TEST_PRECOMPILE=1`` (set by ``nox -s gpu`` and
``scripts/gpu-check.sh``) the kernels tests' ``conftest.py`` compiles them in parallel first.

Registered as ``mate_kernels_musa_tests_gpu_specializations`` by ``conftest.py``.
"""

from __future__ import annotations

import inspect

DTYPES = ("bfloat16", "float16")
GROUPS = tuple(range(1, 17))  # every GQA group the native path accepts (test_head_geometry covers 1..16)
UNION_ROWS_PER_CTA = (2, 5, 8)  # test_sparse_union_native.ROWS_PER_CTA besides the launcher's 4
ELEMENT_DECODE = (("bfloat16", 8), ("float16", 64))  # test_decode_unaligned_cache_element_path


def compile_args(factory, consts: tuple) -> dict:
    """A kernel factory's compile-time arguments ``consts`` by parameter name."""
    return dict(zip(inspect.signature(factory).parameters, consts))


def without_l2_hint(factory, consts: tuple) -> tuple:
    """The paged kernel's compile-time arguments ``consts`` with ``kv_evict_first`` off."""
    return tuple({**compile_args(factory, consts), "kv_evict_first": False}.values())


def gpu_test_specializations() -> list:
    """``mate_kernels_musa.precompile.Spec`` of every kernel the GPU tests build, without repeats."""
    from mate_kernels_musa import mqa_decode_kernel, mqa_launch, mqa_score_kernel, sparse_launch, sparse_union
    from mate_kernels_musa.precompile import Spec, launcher_specializations

    specs = launcher_specializations(dtypes=DTYPES, groups=GROUPS)
    specs += [
        Spec("mqa_score", mqa_score_kernel.score_kernel, mqa_launch.score_consts(d, tma, tiles, schedule))
        for d in DTYPES for tiles, schedule in mqa_score_kernel.VARIANTS for tma in (True, False)
    ]  # fmt: skip
    specs += [
        Spec("mqa_decode", mqa_decode_kernel.decode_kernel, mqa_launch.decode_consts(d, ps, False))
        for d, ps in ELEMENT_DECODE
    ]
    specs += [Spec("sparse_paged", f, c) for f, c in sparse_launch.specializations(groups=(12,), wide=(True,))]
    # test_l2_evict_first_changes_no_value: the split builds without their L2 hint.
    specs += [
        Spec("sparse_paged", f, plain)
        for f, c in sparse_launch.specializations(groups=(12,))
        if f.__name__ == "sparse_paged_kernel" and (plain := without_l2_hint(f, c)) != c
    ]  # fmt: skip
    specs += [
        Spec("sparse_union", f, c)
        for f, c in sparse_union.union_specializations(groups=(12,), wide=(False, True))
        + sparse_union.union_specializations(groups=(12,), dtypes=("bfloat16",), rows_per_cta=UNION_ROWS_PER_CTA)
    ]
    return list(dict.fromkeys(specs))
