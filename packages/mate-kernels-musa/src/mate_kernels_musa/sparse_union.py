"""Sparse attention that shares the K/V gather between neighbouring query rows (row-group unions).

``sparse_attention_union(plan, rows_per_cta=R)`` takes the same validated
``SparseAttentionPlan`` as :func:`.sparse_launch.sparse_attention` and writes
``plan.out`` / ``plan.lse`` in four capturable steps (no sync, no ``.item()``):

1. :mod:`.sparse_resolve_kernel` writes the physical cache row ``page * page_size + slot``
   of every (row, selection slot), a marker where the slot is unused (the paged kernel's
   rule); rows are padded with unused rows to a multiple of ``R``.
2. The union prep builds each group's union ``U`` (distinct physical rows), its size
   ``NU`` and the per-(row, union slot) selection counts ``C`` (duplicates count as often
   as they appear). ``method="fused"`` (default while ``T <= PREP_T_CAP``): steps 1-2 in
   one kernel (:mod:`.sparse_union_fused_kernel`, hash buckets in shared memory, no sort),
   0.19-0.21 ms on the 4096-row prefill shape; ``"torch"`` (any ``T``): the resolve kernel,
   then :func:`union_prep`, torch ops only (a segmented sort of the group's ``R * T`` keys
   ``phys * R + row``; ~1.8 ms there). Both give the same unions and counts (the fused
   kernel in its own deterministic order; tested on the H200).
3. :mod:`.sparse_union_kernel`, one CTA per (group, KV head), gathers each union token
   once for the ``R`` rows and writes FP32 partials + LSE in the paged kernel's format.
4. :mod:`.sparse_finalize_kernel` (the one-split merge) applies the gate and writes the
   caller's views for the rows of the groups step 3 computed.

Groups are consecutive rows whatever their requests: the union is over physical rows, so
a group may straddle requests (and padded rows).

Measured on the H200 (``benchmarks/bench_sparse_union.py``, 4096-row prefill, 2051 slots,
CUDA-graph medians; JSON in ``benchmarks/bench_sparse_union.h200.json``): with ~90%
neighbour overlap the union of 4 rows holds 0.32 of their 8204 slots and R = 4 takes
2858 us with an earlier two-kernel prep (1027 + attention 1821) and 2230 us with the fused
prep (407 + 1823) against 3209 us for the paged kernel alone and a 4077 us no-reuse floor. With uniform
random blocks the union is 0.98 of R T, each gathered token feeds R rows of MMA and R = 4
takes 4687 us (fused prep; 1.37x the paged kernel): the union only pays off when rows
overlap. ``sparse_launch`` therefore uses it per group: the prefill schedule sends a group
to the union kernel only when its union is small (``sparse_schedule.UNION_MAX_FILL``) and
the paged kernel computes every other row. With the session-8 prep (~0.21 ms) and union
kernel that whole call (the default for prefill chunks) takes 1654 us on the overlap shape
and 3354 us on the uniform one (suite at 754e6a8; paged kernel alone 2927 / 3222).

Probes not kept (H200, 2026-11-30, same process, 4096-row prefill with 90% overlap, us):
the union kernel writing the gated ``out``/``lse`` itself (the paged kernel's direct
epilogue; no partials, no merge kernel) took 2380 / 2384 against 1842 / 1847 for this
kernel + the merge kernel of then, and 1979 without a gate, so a separate post-op stays
(now :mod:`.sparse_finalize_kernel`). Session 14 measured it again with the gate loads
branch-free (the paged kernel's one-split epilogue as a shared macro; patch
``.devrun/s14_direct.diff``, probe ``.devrun/s14_direct.py``, same
process, three rounds, against this kernel + the finalize kernel): 90% overlap 2188 / 2131 /
2131 against 1643 / 1632 / 1634, the mixed batch 1658 / 1574 / 1573 against 1354 / 1356 /
1354, uniform blocks (no group taken) 2763 / 2814 / 2758 against 2842 / 2837 / 2855. No spills
(246 registers against 244); the likely cause, not checked in the SASS, is that the 64 x 256
FP32 accumulator leaves few registers for the gate loads, so they go out a few at a time. The
separate pass stays. The fused prep with every
token id and page loaded before the bucket counts took 508 against 407; two prep CTAs
per SM (registers capped at 64) 407.5 against 407.9.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from mate_core.plans import SparseAttentionPlan

from . import (
    sparse_finalize_kernel,
    sparse_resolve_kernel,
    sparse_sort_kernel,
    sparse_union_fused_kernel,
    sparse_union_kernel,
)
from ._build import build, profile_name
from ._sparse_macros import page_divisor
from .sparse_launch import (
    _DTYPES,
    _INT32_LIMIT,
    INT32_MAX,
    _dev,
    _dummies,
    _flat16,
    _gate_view,
    _ids,
    _paged_kv,
    _row_args,
    _write_empty,
)

__all__ = [
    "UnionTile",
    "UNION_TILES",
    "RESOLVE_THREADS",
    "union_tile",
    "union_consts",
    "union_specializations",
    "resolve_physical",
    "union_prep",
    "union_prep_fused",
    "fused_buffers",
    "launch_fused_prep",
    "prepare_union",
    "union_attention",
    "sorted_ids",
    "PREP_METHODS",
    "sparse_attention_union",
]

RESOLVE_THREADS = 256
FINALIZE_THREADS = 256  # 8 warps, one (row, head) pair each
SORT_THREADS = 256
PREP_T_CAP = 2560  # shared-memory slots per row of the prep kernel (R * 2560 * 8 bytes <= 160 KiB at R = 8)
PREP_THREADS = 512
HASH_BUCKETS = 2048
_COUNT16_MAX_T = 2**15 - 1  # a row's count of one token is at most T: int16 counts while T fits


@dataclass(frozen=True)
class UnionTile:
    """Compile-time tile of :mod:`.sparse_union_kernel` for one ``rows_per_cta``."""

    block_n: int
    threads: int
    chunk_blocks: int
    min_blocks: int
    num_stages: int = 1
    packed: bool = False  # rows at tile stride = GQA group instead of 16 (R = 5 x 12 heads in 64 rows)


# rows_per_cta -> tile. M = 16 R score rows: R = 4 is one wgmma warpgroup tile (M = 64); R = 5
# packs 5 rows x 12 heads into 64 rows. Attention alone (union kernel + merge), 4096-row prefill
# with 90% neighbour overlap, H200 (benchmarks/bench_sparse_union.h200.json and two earlier runs):
# R = 4 BN 64: 1748 / 1822 / 1821 us; BN 32: 1870 / 1899 / 1917 us; BN 32 capped at 3 CTAs/SM:
# 1852 us; BN 32 with 256 threads: 2830 us; BN 32 2-stage: 1959 us; BN 64 2-stage: 3198 us;
# BN 64 with 8-tile chunks: 3022 us. R = 2: 3176 us, R = 5: 2073 us, R = 8 (256 threads): 3186 us.
UNION_TILES: dict[int, UnionTile] = {
    2: UnionTile(block_n=32, threads=128, chunk_blocks=8, min_blocks=1),
    4: UnionTile(block_n=64, threads=128, chunk_blocks=4, min_blocks=1),
    5: UnionTile(block_n=64, threads=128, chunk_blocks=4, min_blocks=1, packed=True),
    8: UnionTile(block_n=32, threads=256, chunk_blocks=8, min_blocks=1),
}


def union_tile(rows_per_cta: int) -> UnionTile:
    try:
        return UNION_TILES[rows_per_cta]
    except KeyError:
        raise ValueError(f"rows_per_cta must be one of {sorted(UNION_TILES)}, got {rows_per_cta!r}") from None


def union_consts(group: int, dtype: str, rows_per_cta: int, wide: bool, count_dtype: str,
                 tile: UnionTile | None = None) -> tuple[Any, ...]:  # fmt: skip
    """Compile-time arguments of ``sparse_union_kernel`` for one specialization."""
    t = tile or union_tile(rows_per_cta)
    return (group, dtype, rows_per_cta, t.block_n, t.threads, t.chunk_blocks, t.min_blocks, wide, count_dtype,
            t.num_stages, t.packed)  # fmt: skip


def union_specializations(
    groups: tuple[int, ...] = (12,),
    dtypes: tuple[str, ...] = ("bfloat16", "float16"),
    rows_per_cta: tuple[int, ...] = (4,),
    wide: tuple[bool, ...] = (False,),
    count_dtypes: tuple[str, ...] = ("int16",),
) -> list[tuple[Any, tuple[Any, ...]]]:
    """``(factory, consts)`` of the resolve, fused prep, union and finalize kernels for these geometries."""
    prep = [(sparse_union_fused_kernel.sparse_union_fused_kernel, fused_consts(r)) for r in rows_per_cta]
    finalize = [
        (sparse_finalize_kernel.sparse_finalize_kernel, (d, gd, FINALIZE_THREADS))
        for d in dtypes
        for gd in ("float32", d)
    ]
    union = [
        (sparse_union_kernel.sparse_union_kernel, union_consts(g, d, r, w, c))
        for g in groups for d in dtypes for r in rows_per_cta for w in wide for c in count_dtypes
    ]  # fmt: skip
    sort = (sparse_sort_kernel.sparse_sort_kernel, (SORT_THREADS,))
    return [(sparse_resolve_kernel.sparse_resolve_kernel, (RESOLVE_THREADS,)), *prep, *union, *finalize, sort]


def fused_consts(rows_per_cta: int) -> tuple[Any, ...]:
    """Compile-time arguments of ``sparse_union_fused_kernel`` for ``R`` rows per group."""
    return (rows_per_cta, PREP_T_CAP, PREP_THREADS, HASH_BUCKETS, "int16")


def resolve_physical(plan: SparseAttentionPlan, rows_per_cta: int, unused: int = -1,
                     row_args: list[Any] | None = None) -> torch.Tensor:  # fmt: skip
    """Physical cache row of every (row, slot), int32 ``[ceil(rows / R) * R, T]``, ``unused`` where unused.

    The cache row ``p`` is token ``p % page_size`` of page ``p // page_size`` of the paged
    form of K/V (``sparse_launch._paged_kv``); padding rows past ``plan.rows`` are all ``unused``.
    ``row_args``: ``sparse_launch._row_args(plan, capacity)`` when the caller has it already.
    """
    key, _, table, page_size = _paged_kv(plan)
    ids = _ids(plan)
    rows, width = ids.shape
    rows_pad = -(-rows // rows_per_cta) * rows_per_cta
    phys = torch.empty((rows_pad, width), dtype=torch.int32, device=ids.device)
    kernel = build(sparse_resolve_kernel.sparse_resolve_kernel, profile_name(_dev(plan.query)), RESOLVE_THREADS)
    if row_args is None:
        row_args = _row_args(plan, table.shape[1] * page_size)
    kernel(ids, table, phys, *row_args, key.shape[0], page_size, unused)
    return phys


def union_prep(phys: torch.Tensor, rows_per_cta: int, n_phys: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-group unions of physical rows and per-row counts (capturable torch ops, no sync).

    Parameters
    ----------
    phys : torch.Tensor
        int32 ``[n_groups * R, T]`` physical rows in ``[0, n_phys)``, -1 where unused.
    rows_per_cta : int
        ``R``, rows per group (consecutive rows ``g R .. g R + R - 1``).
    n_phys : int
        Number of physical rows (bounds the keys: int32 keys while ``n_phys * R`` fits).

    Returns
    -------
    U : torch.Tensor
        int32 ``[n_groups, W + 1]`` with ``W = R * T``: ``U[g, u]`` is the physical row of
        union slot ``u < NU[g]`` (ascending); later entries are -1 or scratch, never read.
    NU : torch.Tensor
        int32 ``[n_groups]`` union sizes.
    C : torch.Tensor
        ``[n_groups, R, W + 1]`` int16 (int32 when ``T >= 2^15``): how many times row
        ``g R + i`` selected the token of union slot ``u`` (0 = not selected); entries at
        ``u >= NU[g]`` are scratch.
    """
    r = rows_per_cta
    rows_pad, t = phys.shape
    n_grp, w = rows_pad // r, r * t
    dev = phys.device
    kdt = torch.int32 if n_phys * r < INT32_MAX else torch.int64
    sentinel = torch.iinfo(kdt).max  # sorts after every real key
    row_in_group = torch.arange(rows_pad, dtype=kdt, device=dev).remainder_(r)[:, None]
    keys = torch.where(phys >= 0, phys.to(kdt) * r + row_in_group, sentinel).view(n_grp, w)
    keys = keys.sort(dim=1).values
    valid = keys != sentinel
    token = torch.div(keys, r, rounding_mode="floor")
    row = keys - token * r
    # First occurrence of each physical token opens a union slot.
    first = valid.clone()
    first[:, 1:] &= token[:, 1:] != token[:, :-1]
    slot = first.cumsum(1, dtype=torch.int32) - 1
    nu = slot[:, -1] + 1
    dump = torch.full_like(slot, w)  # scratch column W takes every write that is not a slot's
    u = torch.full((n_grp, w + 1), -1, dtype=torch.int32, device=dev)
    u.scatter_(1, torch.where(first, slot, dump).long(), token.to(torch.int32))
    # Run lengths of identical keys = per-(row, token) counts, written at each run's last key.
    pos = torch.arange(w, dtype=torch.int32, device=dev).expand(n_grp, w)
    start = valid.clone()
    start[:, 1:] &= keys[:, 1:] != keys[:, :-1]
    run0 = torch.where(start, pos, 0).cummax(1).values
    last = valid.clone()
    last[:, :-1] &= keys[:, :-1] != keys[:, 1:]
    cdt = torch.int16 if t <= _COUNT16_MAX_T else torch.int32
    counts = torch.zeros((n_grp, r * (w + 1)), dtype=cdt, device=dev)
    idx = torch.where(last, row.to(torch.int32) * (w + 1) + slot, dump)
    counts.scatter_(1, idx.long(), (pos - run0 + 1).to(cdt))
    return u, nu, counts.view(n_grp, r, w + 1)


def union_prep_fused(plan: SparseAttentionPlan, rows_per_cta: int, row_args: list[Any] | None = None,
                     max_nu: int = INT32_MAX,
                     min_rows: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """Steps 1-2 in one kernel (:mod:`.sparse_union_fused_kernel`, ``T <= PREP_T_CAP``).

    Returns ``(U [n_groups, W] int32, NU [n_groups] int32, C [n_groups, R, W] int16)``, ``W =
    max(1, min(R T, max_nu))``,
    with the meaning of :func:`union_prep`'s, the union in the kernel's own deterministic
    order; only slots ``u < NU[g]`` are written, and only for groups with ``NU[g] <= max_nu``
    (the others are left to the paged kernel). Where the union exceeds ``max_nu``, ``NU[g]`` may
    be a lower bound of it (still ``> max_nu``: the kernel's bitmap early exit), not its size.
    ``row_args`` as for :func:`resolve_physical`.
    ``min_rows > 0``: groups with a row of a request of fewer query rows get
    ``NU[g] = UNMEASURED`` and nothing else (their token ids are not read); this needs
    ``max_nu < UNMEASURED`` so that every consumer leaves them to the paged kernel.
    """
    _check_min_rows(min_rows, max_nu)  # before anything is allocated
    buffers = fused_buffers(plan, rows_per_cta, max_nu)
    launch_fused_prep(plan, rows_per_cta, buffers, row_args, max_nu, min_rows)
    return buffers


def _check_min_rows(min_rows: int, max_nu: int) -> None:
    if min_rows > 0 and max_nu >= sparse_union_fused_kernel.UNMEASURED:
        raise ValueError(f"min_rows={min_rows} needs max_nu < {sparse_union_fused_kernel.UNMEASURED}, got {max_nu}")


def fused_buffers(plan: SparseAttentionPlan, rows_per_cta: int,
                  max_nu: int = INT32_MAX) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """The uninitialized ``(U, NU, C)`` that :func:`launch_fused_prep` writes (see :func:`union_prep_fused`)."""
    r = rows_per_cta
    ids = _ids(plan)
    rows, t = ids.shape
    n_grp, dev = -(-rows // r), ids.device
    # Only groups with NU <= max_nu get U/C, so max_nu slots per group hold them (the launcher's
    # cap is 0.6 R T: 60% of the workspace, ~60 MB on the 4096-row prefill).
    width = max(1, min(r * t, max_nu))
    u = torch.empty((n_grp, width), dtype=torch.int32, device=dev)
    counts = torch.empty((n_grp, r, width), dtype=torch.int16, device=dev)
    nu = torch.empty((n_grp,), dtype=torch.int32, device=dev)
    return u, nu, counts


def launch_fused_prep(plan: SparseAttentionPlan, rows_per_cta: int,
                      buffers: tuple[torch.Tensor, torch.Tensor, torch.Tensor], row_args: list[Any] | None = None,
                      max_nu: int = INT32_MAX, min_rows: int = 0) -> None:  # fmt: skip
    """Run :mod:`.sparse_union_fused_kernel` into ``buffers`` (:func:`fused_buffers`) on the current stream."""
    _check_min_rows(min_rows, max_nu)
    u, nu, counts = buffers
    key, _, table, page_size = _paged_kv(plan)
    kernel = build(sparse_union_fused_kernel.sparse_union_fused_kernel, profile_name(_dev(plan.query)),
                   *fused_consts(rows_per_cta))  # fmt: skip
    if row_args is None:
        row_args = _row_args(plan, table.shape[1] * page_size)
    kernel(_ids(plan), table, u, counts, nu, *row_args, key.shape[0], page_size, min(max_nu, INT32_MAX), min_rows,
           *page_divisor(page_size))  # fmt: skip


PREP_METHODS = ("torch", "fused")


def prepare_union(plan: SparseAttentionPlan, rows_per_cta: int, method: str | None = None,
                  row_args: list[Any] | None = None,
                  max_nu: int = INT32_MAX,
                  min_rows: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """Steps 1-2 of :func:`sparse_attention_union`: ``(U, NU, C)`` of ``plan``'s row groups.

    ``method``: one of ``PREP_METHODS``; None picks "fused" while ``T <= PREP_T_CAP``, else "torch"
    (the fused kernel's shared-memory arrays hold ``PREP_T_CAP`` slots per row). ``row_args``:
    ``sparse_launch._row_args(plan, capacity)`` when the caller has it already (computed once).
    ``max_nu``: the fused kernel skips ``U``/``C`` of groups whose union is larger (the torch
    prep writes them all). ``min_rows``: see :func:`union_prep_fused` (the torch prep
    measures every group; the result is the same, only slower).
    """
    key, _, _, page_size = _paged_kv(plan)
    width = _ids(plan).shape[1]
    if method is None:
        method = "fused" if width <= PREP_T_CAP else "torch"
    if method not in PREP_METHODS:
        raise ValueError(f"method must be one of {PREP_METHODS} or None, got {method!r}")
    if method != "torch" and width > PREP_T_CAP:
        raise ValueError(f"method={method!r} holds at most PREP_T_CAP={PREP_T_CAP} slots per row, got {width}")
    if method == "fused":
        return union_prep_fused(plan, rows_per_cta, row_args, max_nu, min_rows)
    phys = resolve_physical(plan, rows_per_cta, row_args=row_args)
    return union_prep(phys, rows_per_cta, key.shape[0] * page_size)


def _count_dtype(counts: torch.Tensor) -> str:
    return "int16" if counts.dtype == torch.int16 else "int32"


def union_attention(plan: SparseAttentionPlan, rows_per_cta: int, u: torch.Tensor, nu: torch.Tensor,
                    counts: torch.Tensor, tile: UnionTile | None = None, max_nu: int = INT32_MAX) -> None:  # fmt: skip
    """Steps 3-4 of :func:`sparse_attention_union` on a prepared union (``union_prep``'s outputs).

    Groups with ``NU[g] > max_nu`` are skipped by the union kernel and the finalize kernel:
    their rows are left as they were, for the caller to write (``sparse_launch`` runs the
    paged kernel on exactly those rows afterwards).
    """
    key, value, _, page_size = _paged_kv(plan)
    q = plan.query
    rows, hq, dim = q.shape
    device = _dev(q)
    profile = profile_name(device)
    hkv = key.shape[-2]
    kf, (kp, ks, kh) = _flat16(key)
    vf, (vp, vs, vh) = _flat16(value)
    wide = max(kf.shape[0], vf.shape[0]) >= _INT32_LIMIT
    dtype = _DTYPES[q.dtype]
    consts = union_consts(hq // hkv, dtype, rows_per_cta, wide, _count_dtype(counts), tile)
    main = build(sparse_union_kernel.sparse_union_kernel, profile, *consts)
    gate, has_gate, gate_dtype = _gate_view(plan)
    finalize = build(sparse_finalize_kernel.sparse_finalize_kernel, profile, dtype, gate_dtype, FINALIZE_THREADS)
    part_o = torch.empty((1, rows, hq, dim), dtype=torch.float32, device=q.device)
    part_l = torch.empty((1, rows, hq), dtype=torch.float32, device=q.device)
    max_nu = min(max_nu, INT32_MAX)
    main(q, kf, vf, u, nu, counts, part_o, part_l, page_size, hkv, kp, ks, kh, vp, vs, vh, float(plan.scale), max_nu)
    lse = plan.lse
    has_lse = int(lse is not None)
    if lse is None:
        lse = _dummies(device)["float32"].expand(rows, hq)
    finalize(part_o, part_l, gate, plan.out, lse, nu, has_gate, has_lse, rows_per_cta, max_nu)


def sorted_ids(plan: SparseAttentionPlan, nu: torch.Tensor | None = None, rows_per_cta: int = 0,
               max_nu: int = 0) -> torch.Tensor | None:  # fmt: skip
    """Each row's token ids ordered by context region, ``[rows, T]`` int32, for the paged kernel.

    With the union path (``nu`` = the prep's union sizes of groups of ``rows_per_cta`` rows, which
    the prep may still be writing: unmeasured groups hold ``UNMEASURED``): rows of groups with
    ``NU <= max_nu`` when the sort reads it (the union kernel computes them, the paged kernel skips
    them) are not written, every other row is ordered. Without it (``nu`` None): every row is
    ordered. None when ``T > SORT_CAP`` (the caller keeps the given order). See
    :mod:`.sparse_sort_kernel` for the order and why it matters.
    """
    ids = _ids(plan)
    rows, t = ids.shape
    if t > sparse_sort_kernel.SORT_CAP:
        return None
    if nu is None:
        # One "group" of every row whose NU (0, a cached zero) exceeds max_nu = -1: all ordered.
        nu, rows_per_cta, max_nu = _dummies(_dev(plan.query))["int"], max(rows, 1), -1
    out = torch.empty((rows, t), dtype=torch.int32, device=ids.device)
    kernel = build(sparse_sort_kernel.sparse_sort_kernel, profile_name(_dev(plan.query)), SORT_THREADS)
    _, _, table, page_size = _paged_kv(plan)
    shift = sparse_sort_kernel.region_shift(table.shape[1] * page_size)
    kernel(ids, nu, out, shift, rows_per_cta, min(max_nu, INT32_MAX))
    return out


def _nothing_to_read(plan: SparseAttentionPlan) -> bool:
    key, _, table, _ = _paged_kv(plan)
    return _ids(plan).shape[1] == 0 or key.numel() == 0 or table.numel() == 0


def sparse_attention_union(plan: SparseAttentionPlan, rows_per_cta: int = 4, tile: UnionTile | None = None,
                           method: str | None = None) -> None:  # fmt: skip
    """Native sparse attention with one K/V gather per group of ``rows_per_cta`` rows.

    Parameters
    ----------
    plan : SparseAttentionPlan
        As for :func:`.sparse_launch.sparse_attention` (paged, padded or physical K/V,
        BF16/FP16, D 256, int32 metadata); ``num_splits`` is ignored (one split).
    rows_per_cta : int
        Rows per group ``R`` (a key of ``UNION_TILES``).
    tile : UnionTile, optional
        Overrides the tile of ``R`` (benchmark sweeps).
    method : str, optional
        Union prep method (:func:`prepare_union`); None = automatic.
    """
    union_tile(rows_per_cta)
    if plan.rows == 0:
        return
    if _nothing_to_read(plan):
        _write_empty(plan)
        return
    union_attention(plan, rows_per_cta, *prepare_union(plan, rows_per_cta, method), tile)
