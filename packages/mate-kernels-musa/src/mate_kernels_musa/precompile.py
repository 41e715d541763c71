"""Ahead-of-time compile of the kernels the native launchers use.

A native call compiles each kernel specialization it needs on first use (TileLang + nvcc,
several to tens of seconds each) and TileLang's on-disk cache (``TILELANG_CACHE_DIR``,
default ``~/.tilelang/cache``) keeps it for later processes. :func:`precompile` fills that
cache beforehand, in parallel worker processes, so that a serving process's first calls
do not stall; no GPU is needed (a build machine with nvcc can fill a cache for sm_90a).

:func:`launcher_specializations` lists what the launchers build for given dtypes and GQA
groups (``Hq / Hkv``): the MQA score kernel (bulk and plain stores), the paged MQA decode
kernel (page sizes 8-64, 16-byte loads), the paged sparse-attention kernel and its merge
kernel, and the union path's prep, union and finalize kernels. Rare variants (unaligned
decode caches, K/V views past 2^31 16-byte rows, selections wider than the union prep
holds) still compile on first use.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from typing import Any, NamedTuple

__all__ = ["FAMILIES", "Spec", "Result", "launcher_specializations", "precompile"]

DTYPES = ("bfloat16", "float16")


class Spec(NamedTuple):
    """One kernel specialization: its family, factory and compile-time arguments."""

    family: str
    factory: Callable[..., Any]
    consts: tuple[Any, ...]

    @property
    def label(self) -> str:
        return f"{self.factory.__name__}({', '.join(map(str, self.consts))})"


class Result(NamedTuple):
    spec: Spec
    seconds: float
    error: str | None  # None: compiled (or found in the cache)


def _mqa(dtypes: Iterable[str]) -> list[Spec]:
    from .mqa_launch import specializations

    family = {"score_kernel": "mqa_score", "decode_kernel": "mqa_decode"}
    return [Spec(family[f.__name__], f, c) for f, c in specializations(tuple(dtypes))]


def _sparse(dtypes: Iterable[str], groups: Iterable[int]) -> list[Spec]:
    from .sparse_launch import specializations
    from .sparse_union import union_specializations

    dtypes, groups = tuple(dtypes), tuple(groups)
    family = {
        "sparse_paged_kernel": "sparse_paged",
        "sparse_merge_kernel": "sparse_merge",
        "sparse_resolve_kernel": "sparse_union",
        "sparse_union_fused_kernel": "sparse_union",
        "sparse_union_kernel": "sparse_union",
        "sparse_finalize_kernel": "sparse_union",
        "sparse_sort_kernel": "sparse_union",
    }
    specs = specializations(groups=groups, dtypes=dtypes) + union_specializations(groups=groups, dtypes=dtypes)
    return [Spec(family[f.__name__], f, c) for f, c in specs]


FAMILIES = ("mqa_score", "mqa_decode", "sparse_paged", "sparse_merge", "sparse_union")


def launcher_specializations(
    dtypes: Iterable[str] = DTYPES, groups: Iterable[int] = (12,), families: Iterable[str] = FAMILIES
) -> list[Spec]:
    """The specializations the native launchers build for these dtypes and GQA groups.

    Parameters
    ----------
    dtypes : iterable of str
        Data dtypes, "bfloat16" and/or "float16".
    groups : iterable of int
        Q heads per KV head of the sparse-attention calls (1..16; QSA's canonical 24 / 2 = 12).
    families : iterable of str
        Kernel families to include, from ``FAMILIES``.
    """
    dtypes, groups, families = tuple(dtypes), tuple(groups), tuple(families)
    for d in dtypes:
        if d not in DTYPES:
            raise ValueError(f"dtypes: {d!r} is not one of {DTYPES}")
    for g in groups:
        if not (isinstance(g, int) and 1 <= g <= 16):
            raise ValueError(f"groups: {g!r} is not a GQA group size in 1..16 (Q heads per KV head)")
    for f in families:
        if f not in FAMILIES:
            raise ValueError(f"families: {f!r} is not one of {FAMILIES}")
    specs = _mqa(dtypes) + _sparse(dtypes, groups)
    return list(dict.fromkeys(s for s in specs if s.family in families))


@contextlib.contextmanager
def _quiet_tilelang(quiet: bool) -> Iterator[None]:
    """TileLang logs two INFO lines per compile; ``quiet`` keeps only its warnings for the duration."""
    import tilelang  # noqa: F401  (its import sets the logger's level: set ours after it)

    logger = logging.getLogger("tilelang")
    level = logger.level
    if quiet:
        logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


def _compile_one(profile: str, spec: Spec, quiet: bool = True) -> Result:
    from ._build import build

    start = time.perf_counter()
    try:
        with _quiet_tilelang(quiet):
            build(spec.factory, profile, *spec.consts)
    except Exception as exc:  # reported per specialization; the others still compile
        return Result(spec, time.perf_counter() - start, f"{type(exc).__name__}: {exc}".splitlines()[0][:500])
    return Result(spec, time.perf_counter() - start, None)


def precompile(
    specs: Iterable[Spec],
    profile: str = "cuda-sm90a",
    jobs: int = 1,
    on_result: Callable[[Result], None] | None = None,
    quiet: bool = True,
) -> list[Result]:
    """Compile ``specs`` for the target profile into TileLang's on-disk cache.

    Parameters
    ----------
    specs : iterable of Spec
        Usually :func:`launcher_specializations`.
    profile : str
        A target profile name (``mate_kernels_musa.target.PROFILES``), e.g. "cuda-sm90a".
    jobs : int
        Worker processes (each compiles one specialization at a time); 1 compiles here.
    on_result : callable, optional
        Called with each :class:`Result` as it completes (progress display).
    quiet : bool
        Silence TileLang's per-compile INFO log lines while compiling.

    Returns
    -------
    list of Result
        In the order of ``specs``; ``error`` is None for each specialization that compiled
        (or was found in the cache); a failure is reported, not raised.
    """
    from .target import PROFILES

    if profile not in PROFILES:
        raise ValueError(f"profile: {profile!r} is not one of {sorted(PROFILES)}")
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive int, got {jobs!r}")
    specs = list(specs)
    if jobs == 1 or len(specs) <= 1:
        results = []
        for spec in specs:
            results.append(_compile_one(profile, spec, quiet))
            if on_result is not None:
                on_result(results[-1])
        return results
    # Spawned workers: the parent may hold CUDA or TileLang state that must not be forked.
    with ProcessPoolExecutor(max_workers=min(jobs, len(specs)), mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(_compile_one, profile, spec, quiet): i for i, spec in enumerate(specs)}
        by_index = {}
        for future in as_completed(futures):
            by_index[futures[future]] = future.result()
            if on_result is not None:
                on_result(by_index[futures[future]])
    return [by_index[i] for i in range(len(specs))]
