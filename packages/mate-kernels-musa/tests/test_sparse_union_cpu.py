"""The union prep of ``sparse_attention_union`` (torch ops) against a naive Python loop, on the CPU.

For every group of ``R`` consecutive rows: the union ``U[:NU]`` is the sorted set of the
group's used physical rows, and ``C[g, i, u]`` is how often row ``g R + i`` selected
``U[g, u]`` (duplicates counted). Random selections with -1 holes, duplicates, empty rows
and groups, int16 and int32 counts, int32 and int64 keys.
"""

from __future__ import annotations

import pytest
import torch

from mate_kernels_musa.sparse_union import union_prep


def _naive(phys: torch.Tensor, r: int) -> tuple[list[list[int]], list[list[dict[int, int]]]]:
    """Per group: sorted distinct used rows; per (group, row): {physical row: count}."""
    unions, counts = [], []
    for g in range(phys.shape[0] // r):
        rows = [[int(x) for x in phys[g * r + i] if int(x) >= 0] for i in range(r)]
        unions.append(sorted({x for row in rows for x in row}))
        counts.append([{x: row.count(x) for x in set(row)} for row in rows])
    return unions, counts


def _random_phys(gen: torch.Generator, groups: int, r: int, width: int, n_phys: int) -> torch.Tensor:
    phys = torch.randint(0, n_phys, (groups * r, width), generator=gen, dtype=torch.int32)
    phys[torch.rand(phys.shape, generator=gen) < 0.2] = -1
    dup = torch.rand(phys.shape, generator=gen) < 0.2
    phys = torch.where(dup, phys.roll(1, dims=1), phys)
    phys[torch.rand(groups * r, generator=gen) < 0.1] = -1  # empty rows
    if groups > 1:
        phys[:r] = -1  # one empty group
    return phys


def _check(phys: torch.Tensor, r: int, n_phys: int) -> None:
    u, nu, c = union_prep(phys, r, n_phys)
    w = r * phys.shape[1]
    assert u.shape == (phys.shape[0] // r, w + 1) and u.dtype == torch.int32
    assert nu.dtype == torch.int32 and c.shape == (u.shape[0], r, w + 1)
    unions, counts = _naive(phys, r)
    for g, (union, cnt) in enumerate(zip(unions, counts)):
        n = int(nu[g])
        assert n == len(union)
        assert u[g, :n].tolist() == union
        for i in range(r):
            got = c[g, i, :n].tolist()
            assert got == [cnt[i].get(x, 0) for x in union], (g, i)


@pytest.mark.parametrize("r", [1, 2, 4, 8])
def test_union_prep_random(r: int, gen: torch.Generator) -> None:
    for _ in range(3):
        groups = int(torch.randint(1, 6, (1,), generator=gen))
        width = int(torch.randint(1, 40, (1,), generator=gen))
        n_phys = int(torch.randint(1, 3 * width + 2, (1,), generator=gen))
        _check(_random_phys(gen, groups, r, width, n_phys), r, n_phys)


def test_union_prep_neighbour_overlap(gen: torch.Generator) -> None:
    """Rows sharing most of their tokens (the prefill shape): the union is much smaller than R*T."""
    r, width, n_phys = 4, 64, 1000
    base = torch.randperm(n_phys, generator=gen)[:width]
    rows = []
    for _ in range(3 * r):
        base = base.clone()
        base[torch.randperm(width, generator=gen)[:6]] = torch.randint(0, n_phys, (6,), generator=gen)
        rows.append(base)
    phys = torch.stack(rows).to(torch.int32)
    _check(phys, r, n_phys)
    _, nu, _ = union_prep(phys, r, n_phys)
    assert int(nu.max()) < 2 * width


def test_union_prep_wide_keys_and_counts(gen: torch.Generator) -> None:
    """int64 keys (n_phys * R past int32) and int32 counts (T >= 2^15, one row selecting a token T times)."""
    r, n_phys = 2, 2**31 - 10
    phys = torch.randint(n_phys - 50, n_phys, (2 * r, 7), generator=gen, dtype=torch.int32)
    phys[0, 3] = -1
    _check(phys, r, n_phys)
    width = 2**15
    phys = torch.full((r, width), 5, dtype=torch.int32)
    phys[1, ::2] = 9
    u, nu, c = union_prep(phys, r, 16)
    assert c.dtype == torch.int32 and int(nu[0]) == 2 and u[0, :2].tolist() == [5, 9]
    assert c[0, :, :2].tolist() == [[width, 0], [width // 2, width // 2]]


def _union_only(specs, also=()):
    return [s for s in specs if s[0].__name__ in ("sparse_union_kernel", *also)]


def _compile_specs():
    """Resolve, prep, union and finalize kernels at R = 4; the union kernel at R = 2/5/8, FP16 (+ finalize), wide."""
    from mate_kernels_musa.sparse_union import union_specializations

    specs = union_specializations(rows_per_cta=(4,), dtypes=("bfloat16",))
    specs += _union_only(union_specializations(rows_per_cta=(2, 5, 8), dtypes=("bfloat16",)))
    specs += _union_only(union_specializations(dtypes=("float16",)), also=("sparse_finalize_kernel",))
    specs += _union_only(union_specializations(dtypes=("bfloat16",), wide=(True,), count_dtypes=("int32",)))
    return specs


@pytest.mark.compile
@pytest.mark.parametrize("spec", _compile_specs(), ids=lambda s: f"{s[0].__name__}-" + "-".join(map(str, s[1])))
def test_union_kernels_compile(spec) -> None:
    """Every resolve / prep / union specialization the launcher may build compiles for sm_90a."""
    from mate_kernels_musa._build import build

    factory, consts = spec
    src = build(factory, "cuda-sm90a", *consts).get_kernel_source()
    assert "__global__" in src
    if factory.__name__ == "sparse_union_kernel":  # gathers are predicated 16-byte cp.async
        assert "cp_async_gs_conditional<16>" in src
    if factory.__name__ == "sparse_union_fused_kernel":  # the 13 phase barriers it places itself, no planner's
        assert src.count("__syncthreads()") == 13


def test_fused_prep_pass_configs_per_toolchain() -> None:
    """The prep's own barrier placement (the sync planner off) is passed to the CUDA profile only."""
    from mate_kernels_musa._build import pass_configs
    from mate_kernels_musa.sparse_union_fused_kernel import sparse_union_fused_kernel

    assert pass_configs(sparse_union_fused_kernel, "cuda-sm90a") == {"tl.disable_thread_storage_sync": True}
    assert "tl.disable_thread_storage_sync" not in pass_configs(sparse_union_fused_kernel, "musa-mp31")
