"""Every sparse-attention kernel specialization compiles for sm_90a (tilelang + nvcc, no GPU).

The canonical geometry (group 12) for BF16 and FP16, the int64-offset variant, the
merge kernel for every output/gate dtype pair, and the generic head geometry at its
edges: groups 1 and 16 and the tensor-parallel shard group 3 (BF16; group 3 also FP16).
The physical path (``selected_kv_indices``) is a runtime row mode of the same kernels. Source checks pin the
properties the design relies on: 16-byte predicated ``cp.async`` gathers (masked slots
are zero-filled, never read; on split builds all with the L2 evict-first policy), m16n8k16
MMA, and a register cap from ``min_blocks``; with the feature-split QK (``split_qk``, the
launcher's tile) Q is read from shared memory once per CTA, or on one-split builds (``q_regs``)
loaded straight into the QK fragments, and the warps' partial scores are exchanged through the
inline stores of ``_sparse_qk``; the eager
chunk resolution has no runtime division by the page size, and the epilogues one per row.
"""

from __future__ import annotations

import re

import mate_kernels_musa_tests_gpu_specializations as gpu_specs  # registered by conftest.py
import pytest

from mate_kernels_musa._l2_hints import MARKER

pytestmark = pytest.mark.compile


def _paged(groups: tuple[int, ...], dtype: str, wide: bool = False, tiles: tuple[str, ...] | None = None):
    from mate_kernels_musa.sparse_launch import TILES, specializations

    specs = specializations(groups=groups, dtypes=(dtype,), wide=(wide,), tiles=tiles or tuple(TILES))
    return [s for s in specs if s[0].__name__ == "sparse_paged_kernel"]


def _specs():
    from mate_kernels_musa.sparse_launch import specializations

    # The benchmark sweep's W4_C32 candidate keeps the T.gemm score tile (split_qk off).
    gemm_qk = [s for s in _paged((12,), "bfloat16", tiles=("w4-c32",)) if _args(s)["gate_dtype"] == "bfloat16"]
    return (specializations(wide=(False,)) + _paged((12,), "bfloat16", wide=True) + _paged((1, 3, 16), "bfloat16")
            + _paged((3,), "float16") + gemm_qk)  # fmt: skip


def _args(spec) -> dict:
    """The factory's compile-time arguments by name."""
    return gpu_specs.compile_args(*spec)


def _check_group_source(src: str, groups: int, threads: int) -> None:
    """The group build runs the split kernel in each of ``groups`` thread groups and merges in the CTA."""
    assert f"__launch_bounds__({groups * threads}, 1) main_kernel(" in src
    # Every thread and split index is the group's; every barrier but the merge's one is the group's own.
    assert "((int)threadIdx.x)" not in src.replace(f"(((int)threadIdx.x) % {threads})", "")
    assert "__syncthreads()" not in src and src.count("bar.sync 0;") == 1
    assert "tl::NamedBarrier" not in src and "MateGroupBarrier>::run(" in src
    # The partials stay in shared memory: no global partial store, one merge writing OUT and LSE.
    assert "(OP + " not in src and "LP[" not in src.replace("mg_lp[", "")
    assert "mg_gt[" in src and "LSE[mg_r * sl0" in src and "CTYPE" not in src and "*(uint2*)mg_out = " in src


def _id(spec) -> str:
    factory, consts = spec
    return f"{factory.__name__}-" + "-".join(str(c) for c in consts)


@pytest.mark.parametrize("spec", _specs(), ids=_id)
def test_sparse_kernel_compiles(spec) -> None:
    from mate_kernels_musa._build import build

    factory, consts = spec
    src = build(factory, "cuda-sm90a", *consts).get_kernel_source()
    assert "__global__" in src
    if factory.__name__ == "sparse_paged_kernel":
        args = _args(spec)
        # Predicated 16-byte gathers: TileLang's, or on kv_evict_first builds every one through the L2-hinted copy.
        hinted, plain = src.count(f"{MARKER}((&"), src.count("tl::cp_async_gs_conditional<16>((&")
        assert (hinted > 0 and plain == 0) if args["kv_evict_first"] else (hinted == 0 and plain > 0)
        assert "mma_sync" in src
        assert "__launch_bounds__(" in src
        q_reads = len(re.findall(r"ldmatrix_x4\(\(&\(\(\((?:bfloat16_t|half_t)\*\)q_s\)", src))
        if args["q_regs"]:  # Q straight into the split-QK fragments: no q_s at all
            assert "q_s" not in src and re.search(r"v_1\[i_1\] = condval", src) and "mate_sts_f2(" in src
        if args["split_qk"]:  # one ldmatrix of Q per CTA (before the block loop; none with q_regs), none per block
            assert q_reads == (0 if args["q_regs"] else 1) and "mate_sts_f2(" in src
            # The flagged softmax: no __syncthreads_or, the rescale flag read behind the barrier before PV.
            assert "__syncthreads_or" not in src and "mate_flag_read(" in src
        else:  # T.gemm reads Q in every block step (one pipeline per chunk and one per split)
            assert q_reads >= 2 and "mate_sts_f2(" not in src
            assert "__syncthreads_or" in src and "mate_flag_read(" not in src
        # Eager tiles store the chunk offsets where the sync planner does not see them (no barrier per block).
        assert bool(re.search(r"mate_sts\(\(&\(koff_s\[", src)) == args["eager"]
        if args["eager"]:  # the eager chunk resolution divides by the page size with a magic multiply
            assert "% page_size" not in src and "/ page_size" not in src
        # The epilogues divide once per row (the reciprocal of its sum), not once per output element.
        assert src.count("/ l_i[") == 1
        # The direct epilogue's whole-sector path: 16-byte stores of staged rows through the flat view.
        assert "*(uint4*)(OUTF + " in src
        if args.get("groups", 1) > 1:  # the group build (sparse_groups): the rewritten split kernel
            _check_group_source(src, args["groups"], args["threads"])
        else:  # a per-head gate is taken once per CTA into gate_s (written once, read by the epilogue's products)
            tid = "((int)threadIdx.x)"
            assert src.count(f"gate_s[{tid}] =") == 1 and re.search(r"\* gate_s\[|gate_s\[[^]]*\], gate_s", src)
    else:
        assert "expf" in src  # merge weights and sigmoid in FP32
