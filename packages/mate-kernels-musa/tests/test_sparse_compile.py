"""Every sparse-attention kernel specialization compiles for sm_90a (tilelang + nvcc, no GPU).

The canonical geometry (group 12) for BF16 and FP16 in both tiles, the int64-offset
variant, and the merge kernel for every output/gate dtype pair. Source checks pin the
properties the design relies on: 16-byte predicated ``cp.async`` gathers (masked slots
are zero-filled, never read), m16n8k16 MMA, and a register cap from ``min_blocks``.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.compile


def _specs():
    from mate_kernels_musa.sparse_launch import specializations

    return specializations(wide=(False,)) + [s for s in specializations(dtypes=("bfloat16",), wide=(True,))
                                             if s[1][-1] is True]  # fmt: skip


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
        assert "cp_async_gs_conditional<16>" in src  # predicated 16-byte gather
        assert "mma_sync" in src
        assert "__launch_bounds__(" in src
    else:
        assert "expf" in src  # merge weights and sigmoid in FP32
