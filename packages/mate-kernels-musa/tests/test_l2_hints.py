"""The L2 evict-first rewrite of the paged kernel's gathers and the build-scoped CUDA source callback (CPU)."""

from __future__ import annotations

import pytest

from mate_kernels_musa._build import cuda_postproc
from mate_kernels_musa._l2_hints import KV_EVICT_FIRST_IO, MARKER, hint_kv_copies

CALLBACK = "tilelang_callback_cuda_postproc"
COPY = "tl::cp_async_gs_conditional<16>((&(k_s[i])), (&(KF[o])), c);"


def _clear(tvm_ffi) -> None:
    if tvm_ffi.get_global_func(CALLBACK, allow_missing=True) is not None:
        tvm_ffi.remove_global_func(CALLBACK)


@pytest.fixture
def tvm_ffi():
    """TVM's FFI with no CUDA source callback registered; the one registered before comes back after."""
    pytest.importorskip("tilelang")  # puts its TVM on the path first
    import tvm_ffi

    saved = tvm_ffi.get_global_func(CALLBACK, allow_missing=True)
    _clear(tvm_ffi)
    yield tvm_ffi
    _clear(tvm_ffi)
    if saved is not None:
        tvm_ffi.register_global_func(CALLBACK, f=saved, override=True)


def test_rewrite_routes_every_gather_of_a_hinted_kernel() -> None:
    code = KV_EVICT_FIRST_IO + f"{COPY}\n{COPY.replace('k_s', 'v_s').replace('KF', 'VF')}\n"
    out = hint_kv_copies(code)
    assert "tl::cp_async_gs_conditional" not in out
    assert out.count(f"{MARKER}((&") == 2
    assert out.startswith(KV_EVICT_FIRST_IO)  # the helper itself is kept


def test_rewrite_leaves_other_kernels_alone() -> None:
    code = f'extern "C" __global__ void main_kernel() {{ {COPY} }}'
    assert hint_kv_copies(code) == code


def test_rewrite_refuses_a_hinted_kernel_without_gathers() -> None:
    with pytest.raises(RuntimeError, match=r"pinned 0\.1\.15"):
        hint_kv_copies(KV_EVICT_FIRST_IO + 'extern "C" __global__ void main_kernel() {}')


def test_callback_is_installed_only_inside_the_block(tvm_ffi) -> None:
    with cuda_postproc(lambda code: code + "|mine"):
        assert tvm_ffi.get_global_func(CALLBACK)("src", None) == "src|mine"
    assert tvm_ffi.get_global_func(CALLBACK, allow_missing=True) is None


def test_callback_chains_and_restores_the_users_callback(tvm_ffi) -> None:
    tvm_ffi.register_global_func(CALLBACK, f=lambda code, target: code + "|user", override=True)
    with pytest.raises(ValueError, match="inside"):
        with cuda_postproc(lambda code: code + "|mine"):
            assert tvm_ffi.get_global_func(CALLBACK)("src", None) == "src|user|mine"
            raise ValueError("inside")
    assert tvm_ffi.get_global_func(CALLBACK)("src", None) == "src|user"


def test_no_rewrite_installs_nothing(tvm_ffi) -> None:
    with cuda_postproc(None):
        assert tvm_ffi.get_global_func(CALLBACK, allow_missing=True) is None
