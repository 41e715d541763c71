"""L2 evict-first policy on the paged kernel's K/V gathers (split builds, CUDA only).

A split decode streams its whole K/V selection through the L2 once (decode 64 x 1: ~269 MB
through a ~50 MB L2), and with the default policy those lines also evict what the call reads
again: the FP32 partials the merge kernel reads, the token-id and block-table lines that a
row's KV-head CTAs share. With every K/V ``cp.async`` carrying ``L2::evict_first`` the stream
evicts itself first. Values are unchanged (a cache policy), so outputs are bitwise equal.

TileLang 0.1.15 takes an eviction policy only on TMA copies; the gather is a predicated 16-byte
``cp.async`` (``tl::cp_async_gs_conditional<16>``), so a kernel that wants the hint imports
:data:`KV_EVICT_FIRST_IO` (an inline function, and the marker that tells the builds apart in
TileLang's cache) and its factory names :func:`hint_kv_copies` as ``cuda_postproc``, which
:func:`mate_kernels_musa._build.build` applies to the generated CUDA source of that build only.

Measurements: the ``sparse_paged_kernel`` module docstring ("L2 evict-first on split builds").
"""

from __future__ import annotations

__all__ = ["KV_EVICT_FIRST_IO", "MARKER", "hint_kv_copies"]

MARKER = "mate_cp16_evict_first"
_TL_COPY = "tl::cp_async_gs_conditional<16>("

# The policy is created per call (one ALU instruction the compiler may hoist: the asm is not
# volatile); the copy keeps TileLang's zero fill of an out-of-bounds row (src-size 0).
KV_EVICT_FIRST_IO = f"""
__device__ __forceinline__ void {MARKER}(void const* const smem, void const* src, bool in_bounds) {{
  unsigned long long policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;"
               :: "r"(static_cast<unsigned>(__cvta_generic_to_shared(smem))), "l"(src),
                  "r"(in_bounds ? 16 : 0), "l"(policy));
}}
"""


def hint_kv_copies(code: str) -> str:
    """Route every predicated 16-byte ``cp.async`` of a kernel that imports :data:`KV_EVICT_FIRST_IO`
    through it; other sources are returned unchanged.

    Raises
    ------
    RuntimeError
        The source imports the helper but has no such copy: TileLang generated the gather
        differently, and the hint would silently be lost.
    """
    if f"void {MARKER}(" not in code:
        return code
    if _TL_COPY not in code:
        raise RuntimeError(
            f"the L2 evict-first hint found no {_TL_COPY.rstrip('(')} call to rewrite in the generated CUDA source: "
            "the installed TileLang generates the K/V gather differently from the pinned 0.1.15"
        )
    return code.replace(_TL_COPY, f"{MARKER}(")
