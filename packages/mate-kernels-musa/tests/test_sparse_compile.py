"""Every sparse-attention kernel specialization compiles for sm_90a (tilelang + nvcc, no GPU).

The canonical geometry (group 12) for BF16 and FP16, the int64-offset variant, the
merge kernel for every output/gate dtype pair, and the generic head geometry at its
edges: groups 1 and 16 and the tensor-parallel shard group 3 (BF16; group 3 also FP16).
The physical path (``selected_kv_indices``) is a runtime row mode of the same kernels. Source checks pin the
properties the design relies on: 16-byte predicated ``cp.async`` gathers (masked slots
are zero-filled, never read), m16n8k16 MMA, and a register cap from ``min_blocks``.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.compile


def _paged(groups: tuple[int, ...], dtype: str, wide: bool = False):
    from mate_kernels_musa.sparse_launch import specializations

    specs = specializations(groups=groups, dtypes=(dtype,), wide=(wide,))
    return [s for s in specs if s[0].__name__ == "sparse_paged_kernel"]


def _specs():
    from mate_kernels_musa.sparse_launch import specializations

    return (specializations(wide=(False,)) + _paged((12,), "bfloat16", wide=True) + _paged((1, 3, 16), "bfloat16")
            + _paged((3,), "float16"))  # fmt: skip


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
