"""Target profiles: every difference between the compile targets lives here.

One kernel source compiles for both targets; a profile holds the TVM target,
pass configs and compile flags. The CUDA profile is the verified one (every
native test and benchmark runs on an H200); the MUSA profile is a statically
checked configuration that cannot be run in this project's CI. Not yet behind a
profile: the sparse launcher's tile (``sparse_schedule.W4``) emits CUDA instructions
through TileLang's PTX intrinsics (the PDL trigger; the ldmatrix / mma.sync and the
inline partial stores of the feature-split QK, ``_sparse_qk``; the L2 evict-first copies of
split builds, ``_l2_hints``, whose source rewrite ``_build`` applies on CUDA profiles only), so a
MUSA build of the sparse path needs a tile with ``pdl``, ``split_qk`` and ``kv_evict_first`` off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mate_core.arch import NATIVE_TARGETS, NativeTarget

__all__ = ["TargetProfile", "PROFILES", "CUDA_SM90A", "MUSA_MP31", "profile_for", "profile_named"]


@dataclass(frozen=True)
class TargetProfile:
    name: str
    device_type: str
    target: dict[str, Any]
    pass_configs: dict[str, Any] = field(default_factory=dict)
    compile_flags: tuple[str, ...] = ()

    def tvm_target(self) -> Any:
        # Lazy: importing this module must not import TileLang. TileLang puts its bundled
        # TVM on the path, so it is imported first.
        import tilelang  # noqa: F401
        from tvm.target import Target

        # A dict, not the string "cuda -arch=sm_90a": tilelang 0.1.15 rejects the string form.
        return Target(dict(self.target))


# sm_90a, not sm_90: warp-specialized kernels emit setmaxnreg, which needs the "a" variant.
CUDA_SM90A = TargetProfile(
    name="cuda-sm90a",
    device_type="cuda",
    target={"kind": "cuda", "arch": "sm_90a"},
)

MUSA_MP31 = TargetProfile(
    name="musa-mp31",
    device_type="musa",
    target={"kind": "musa", "arch": "mp_31"},
)

PROFILES: dict[str, TargetProfile] = {p.name: p for p in (CUDA_SM90A, MUSA_MP31)}
_BY_ARCH = {"sm_90a": CUDA_SM90A, "mp_31": MUSA_MP31}


def profile_for(target: NativeTarget) -> TargetProfile:
    """The compile profile of a native target from mate_core's arch table."""
    return _BY_ARCH[target.arch]


def profile_named(name: str) -> TargetProfile:
    return PROFILES[name]


# Every native target must have a profile (checked at import, statically).
for _t in NATIVE_TARGETS:
    if _t.arch not in _BY_ARCH:  # pragma: no cover - a table edit without a profile
        raise RuntimeError(f"no target profile for native target {_t.name} ({_t.arch})")
