"""Launcher of native sparse attention (``qsa_sparse_attention``: paged, padded and physical K/V).

``sparse_attention(plan)`` takes a plan validated by ``mate_core.plan_sparse_attention``
(no validation here), picks the schedule (:mod:`.sparse_schedule`), binds the plan's
tensors with their runtime strides and launches on the current stream:

0. on prefill chunks (:func:`union_enabled`), the prefill schedule first runs :mod:`.sparse_union`
   on groups of ``UNION_ROWS`` consecutive rows: a one-kernel prep finds each group's union of selected cache rows,
   and groups whose union is at most ``UNION_MAX_FILL`` of their ``R * T`` slots (rows that
   share most of their blocks, as neighbouring prefill rows do) are computed by the union
   kernel with one K/V gather per union token; the paged kernel skips those rows. On CUDA
   the prep, union and finalize kernels run on a second stream (forked from the current one,
   joined back before the call returns: capturable), beside the sort and paged kernels, which
   write the other rows; the paged kernel waits for the prep (an event) (measurements:
   :mod:`.sparse_schedule`). On every prefill schedule with ``T <= SORT_CAP``
   (``Schedule.sort``), :mod:`.sparse_sort_kernel` orders the token ids of the rows the paged
   kernel computes by context region (the CTAs of one request then read its cache in step and
   share it through the L2): beside the union prep, every row of a group the prep has not taken
   by the time the sort reads its ``NU`` (filled with ``UNMEASURED`` first); without it every row;
1. :mod:`.sparse_paged_kernel` - with one split it applies the gate and writes
   ``plan.out`` (any strided view) and ``plan.lse`` itself; with several it writes FP32
   partial outputs and LSE per split (its K/V gathers then carry an L2 evict-first policy, so
   the partials stay in the L2 for the merge: :mod:`._l2_hints`), and
2. :mod:`.sparse_merge_kernel` combines them, applies the gate and writes ``plan.out``
   and ``plan.lse`` (a programmatic dependent launch: it starts during the paged kernel).

Row metadata (request, position, lengths) is resolved inside the paged kernel from
``q_len`` (padded queries) or ``cu_seqlens_q``; only ``token_to_req`` needs a short
prelude of capturable torch ops (first row and row count of each request). Nothing
here reads device memory or syncs; the only allocations are the FP32 partials of a split
schedule, the sorted ids of the union path (and that prelude), and the flattened copy of a
sliced ``[B, Q]`` ``query_positions`` that has no row view, from the caching allocator,
so warmed-up calls can be captured in a CUDA graph and replayed with new metadata values.

Padded (non-paged) K/V ``[R, S, Hkv, D]`` runs through the same kernel as a paged
cache with one page of ``S`` slots per request (block table ``[[0], [1], ...]``: a view
of a per-device cached table for up to ``IDENTITY_ROWS`` requests, no kernel per call).
Physical K/V ``[N, Hkv, D]`` (``selected_kv_indices``) runs through it too, as one request
owning one page of ``N`` slots in the ``PHYSICAL`` row mode (ids in ``[0, N)`` used, no
causal or length filter): no extra kernel specialization.

A call with nothing to read (selection width 0, or empty K/V, block table or request
set) writes zeros and LSE -inf with two capturable fills: TileLang rejects the null
data pointers of zero-element tensors.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
from collections.abc import Iterator
from typing import Any

import torch

from mate_core.errors import BackendUnavailableError, GraphCaptureError, MateValueError
from mate_core.plans import SparseAttentionPlan

from . import sparse_merge_kernel, sparse_paged_kernel
from ._build import build, profile_name
from ._sparse_macros import page_divisor, row_mode
from .sparse_groups import GROUPS
from .sparse_schedule import CANDIDATES, TILES, UNION_MAX_FILL, UNION_MIN_ROWS_PER_REQUEST, Schedule, choose_schedule
from .sparse_union_fused_kernel import UNMEASURED

__all__ = [
    "sparse_attention", "schedule_for", "specializations", "union_enabled", "union_min_rows", "UNION_ENV", "MERGE_THREADS",
    "IDENTITY_ROWS",
]  # fmt: skip

_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
VEC = 8  # elements per 16-byte K/V access
MERGE_THREADS = 64
INT32_MAX = 2**31 - 1
_INT32_LIMIT = 2**31 - 64  # K/V offsets (16-byte units, + one row of slack) must stay below this
IDENTITY_ROWS = 4096  # padded K/V calls with up to this many requests use the cached identity block table


@functools.cache
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


@functools.cache
def _dummies(device: torch.device) -> dict[str, torch.Tensor]:
    """1-element placeholders bound where a call lacks optional metadata (flagged off), and
    the ``[IDENTITY_ROWS, 1]`` identity block table of padded K/V (request b owns page b).

    Made by the device's first native call, which must not be captured in a CUDA graph:
    tensors made during a capture come from the graph's private memory pool and are filled
    only when it replays, so calls after the graph is freed would read released memory.
    Raises :class:`mate_core.GraphCaptureError` (nothing cached) when that first call is being captured.
    """
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise GraphCaptureError(
            f"the first native sparse-attention call on {device} is being captured in a CUDA graph; "
            "run one call eagerly first (warm-up), then capture"
        )
    return {
        "int": torch.zeros(1, dtype=torch.int32, device=device),
        "r3": torch.zeros(3, 1, dtype=torch.int32, device=device),
        "table": torch.zeros(1, 1, dtype=torch.int32, device=device),  # physical: page 0 of request 0
        "float32": torch.zeros(1, dtype=torch.float32, device=device),
        # FP32 partials of the one-split schedule (never written: the epilogue writes out/lse)
        "part_o": torch.zeros(1, 1, 1, sparse_paged_kernel.DIM, dtype=torch.float32, device=device),
        "part_l": torch.zeros(1, 1, 1, dtype=torch.float32, device=device),
        "identity": torch.arange(IDENTITY_ROWS, dtype=torch.int32, device=device).view(IDENTITY_ROWS, 1),
    }


def _dev(t: torch.Tensor) -> torch.device:
    """The tensor's device with an explicit index (cache key)."""
    d = t.device
    return d if d.index is not None or d.type == "cpu" else torch.device(d.type, torch.cuda.current_device())


def _flat16(t: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    """A K/V view as ``[n, 8]`` 16-byte rows from its first element, plus its outer strides in rows.

    The validated layout (unit feature stride, 16-byte aligned data pointer, outer strides of
    size > 1 axes multiples of 8 elements) makes every element offset a multiple of 8; axes of
    size 1 are never indexed past 0, so their stride is reported as 0.
    """
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) if t.numel() else 0
    flat = t.as_strided((span // VEC, VEC), (VEC, 1))
    return flat, [t.stride(a) // VEC if t.shape[a] > 1 else 0 for a in range(t.dim() - 1)]


def _ids(plan: SparseAttentionPlan) -> torch.Tensor:
    """The row selection ``[rows, T]`` int32: physical row ids or request-local token ids."""
    return plan.selected_kv_indices if plan.kv_layout == "physical" else plan.token_indices


UNION_ENV = "MATE_SPARSE_UNION"


def _union_env() -> str | None:
    value = os.environ.get(UNION_ENV)
    if value not in (None, "0", "1"):
        raise MateValueError(f"environment variable {UNION_ENV} must be '0', '1' or unset, got {value!r}")
    return value


def union_enabled(plan: SparseAttentionPlan) -> bool:
    """Whether the prefill schedule may take the row-group union path for ``plan``.

    Environment ``MATE_SPARSE_UNION``: ``"1"`` for every prefill-sized call, ``"0"`` never;
    unset, when some request may hold ``UNION_MIN_ROWS_PER_REQUEST`` query rows: ``rows -
    requests + 1`` reaches it (the largest request's row count if every request has a row;
    requests without rows only make the rule miss). Then the union prep itself, on the
    device, measures only the groups whose rows all belong to requests of at least that many
    rows (:func:`union_min_rows`): prefill chunks, whose neighbouring rows select overlapping
    blocks, take the union path, also inside a mixed batch, while decode rows (one to a few
    per request) stay with the paged kernel without paying for a union. The physical path
    (``selected_kv_indices``, no requests) counts as one request. Host-side values only.
    """
    value = _union_env()
    if value is not None:
        return value == "1"
    return plan.rows - max(plan.num_requests, 1) + 1 >= UNION_MIN_ROWS_PER_REQUEST


def union_min_rows() -> int:
    """The union prep's per-group rule: a group is measured only if every row's request has at
    least this many rows (0 under ``MATE_SPARSE_UNION=1``: every group; the physical path:
    every group)."""
    return 0 if _union_env() == "1" else UNION_MIN_ROWS_PER_REQUEST


def schedule_for(plan: SparseAttentionPlan) -> Schedule:
    """The schedule ``sparse_attention`` uses for ``plan`` (exposed for tests and benchmarks)."""
    hkv = plan.key.shape[-2]
    return choose_schedule(plan.rows, hkv, _ids(plan).shape[1], plan.num_splits, _sm_count(_dev(plan.query)),
                           union_enabled(plan))  # fmt: skip


def paged_consts(
    group: int,
    dtype: str,
    tile_name: str,
    wide: bool = False,
    gate_dtype: str = "float32",
    direct: bool = False,
    groups: int = 1,
) -> tuple[Any, ...]:
    """Compile-time arguments of ``sparse_paged_kernel`` for one specialization.

    ``direct`` (a one-split schedule) selects, on split-QK tiles, the build that loads Q straight into
    the QK fragments (``q_regs``: faster with one split, slower on split decode); on tiles with
    ``kv_evict_first``, a split schedule (not ``direct``) gets the build whose K/V gathers carry
    the L2 evict-first policy. ``groups > 1`` (a split schedule) selects the group build of
    :mod:`.sparse_groups`.
    """
    t = TILES.get(tile_name) or CANDIDATES[tile_name]
    consts = (group, dtype, t.block_n, t.threads, t.chunk_blocks, t.num_stages, t.min_blocks, wide, t.pdl, t.eager,
              gate_dtype, t.split_qk, direct and t.split_qk, t.kv_evict_first and not direct)  # fmt: skip
    return (*consts, groups) if groups > 1 and not direct else consts


def specializations(
    groups: tuple[int, ...] = (12,),
    dtypes: tuple[str, ...] = ("bfloat16", "float16"),
    wide: tuple[bool, ...] = (False,),
    tiles: tuple[str, ...] = tuple(TILES),
) -> list[tuple[Any, tuple[Any, ...]]]:
    """``(factory, consts)`` of every kernel the launcher may build for these geometries.

    Paged kernel: group x dtype x tile x offset width x gate dtype (float32 or the data
    dtype, read by its one-split epilogue) x one split or several (split-QK tiles load Q
    differently, :func:`paged_consts`) or, on the launcher's tiles with int32 offsets, the group build
    (:mod:`.sparse_groups`); merge kernel: dtype x gate dtype.
    """
    paged = list(dict.fromkeys(
        (sparse_paged_kernel.sparse_paged_kernel, paged_consts(g, d, name, w, gd, direct, n))
        for g in groups for d in dtypes for name in tiles for w in wide for gd in ("float32", d)
        for direct, n in ((False, 1), (True, 1), *(((False, GROUPS),) if name in TILES and not w else ()))
    ))  # fmt: skip
    pdl = sorted({(TILES.get(name) or CANDIDATES[name]).pdl for name in tiles})
    merge = [
        (sparse_merge_kernel.sparse_merge_kernel, (d, gd, MERGE_THREADS, p))
        for d in dtypes for gd in ("float32", d) for p in pdl
    ]  # fmt: skip
    return paged + merge


def _paged_kv(plan: SparseAttentionPlan) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """``(key, value, block_table, page_size)`` in paged form ``[pages, page_size, Hkv, D]``."""
    if plan.kv_layout == "paged":
        return plan.key, plan.value, plan.block_table, plan.page_size
    if plan.kv_layout == "padded":
        nreq = plan.key.shape[0]
        identity = _dummies(_dev(plan.query))["identity"]
        if nreq <= identity.shape[0]:
            table = identity[:nreq]  # a view: no kernel launch per call
        else:
            table = torch.arange(nreq, dtype=torch.int32, device=plan.key.device).view(nreq, 1)
        return plan.key, plan.value, table, plan.key.shape[1]
    if plan.kv_layout == "physical":
        # One page of N slots; max(N, 1) keeps the kernel's slot modulo defined (N == 0 never launches).
        table = _dummies(_dev(plan.query))["table"]
        return plan.key.unsqueeze(0), plan.value.unsqueeze(0), table, max(plan.key.shape[0], 1)
    raise BackendUnavailableError(
        f"backend='tilelang' has no native kernel for {plan.kv_layout!r} K/V in sparse attention yet; "
        "pass backend='reference'"
    )


def _per_row_table(plan: SparseAttentionPlan) -> torch.Tensor:
    """``[3, rows]`` int32 (request id, local index, row count of the request) from token_to_req.

    Rows of one request are contiguous; the local index counts from its first row. Ids outside
    ``[0, R)`` go to a spare bucket ``R`` (the kernel treats them as padded rows).
    """
    req = plan.token_to_req.reshape(-1).to(torch.int64)
    nreq, rows = plan.num_requests, req.numel()
    r = torch.arange(rows, dtype=torch.int64, device=req.device)
    bucket = torch.where((req >= 0) & (req < nreq), req, torch.full_like(req, nreq))
    first = torch.full((nreq + 1,), rows, dtype=torch.int64, device=req.device)
    first.scatter_reduce_(0, bucket, r, reduce="amin")
    count = torch.zeros(nreq + 1, dtype=torch.int64, device=req.device)
    count.scatter_add_(0, bucket, torch.ones_like(r))
    return torch.stack((req, r - first[bucket], count[bucket])).to(torch.int32)


def _row_args(plan: SparseAttentionPlan, capacity: int) -> list[Any]:
    """Row-metadata kernel arguments: CU, R3, SLQ, SLK, QP, mode, q_len, n_iter, cap, has_*."""
    dummy = _dummies(_dev(plan.query))
    cu, r3 = dummy["int"], dummy["r3"]
    if plan.kv_layout == "physical":
        mode = row_mode.PHYSICAL
    elif plan.padded:
        mode = row_mode.PADDED
    elif plan.cu_seqlens_q is not None:
        mode, cu = row_mode.CU_SEQLENS, plan.cu_seqlens_q
    else:
        mode, r3 = row_mode.PER_ROW, _per_row_table(plan)
    opt = [plan.seq_lens_q, plan.seq_lens_k, plan.query_positions]  # all None on the physical path
    tensors = [t.reshape(-1) if t is not None else dummy["int"] for t in opt]
    flags = [int(t is not None) for t in opt]
    n_iter = max(1, plan.num_requests.bit_length())
    # Capacities past int32 cannot be addressed by int32 token ids anyway.
    cap = min(capacity, INT32_MAX)
    return [cu, r3, *tensors, mode, plan.q_len, n_iter, cap, *flags]


def _out_rows(out: torch.Tensor, direct: bool = True) -> tuple[torch.Tensor, int, int, int]:
    """``(OUTF, out_vec, row stride, head stride)`` of the paged kernel's vectorized epilogue.

    Where ``out`` ``[rows, Hq, D]`` allows whole 16-byte stores (unit feature stride, a 16-byte
    aligned first element, row and head strides multiples of 8 elements), its 16-byte-row view
    (:func:`_flat16`), 1 and its strides in 16-byte rows; otherwise a never-written view of its
    first 16 bytes, 0 and zeros (the kernel stores element by element through ``OUT``). Only the
    one-split (``direct``) epilogue stores ``out``: split schedules get that fallback without
    their layout being inspected (no flat view per decode call).
    """
    aligned = direct and out.stride(-1) == 1 and out.data_ptr() % 16 == 0
    if aligned and all(out.stride(a) % VEC == 0 or out.shape[a] == 1 for a in range(out.dim() - 1)):
        flat, strides = _flat16(out)
        if flat.shape[0] <= INT32_MAX:
            return flat, 1, *strides[:2]
    return out.as_strided((1, VEC), (VEC, 1)), 0, 0, 0


def _gate_view(plan: SparseAttentionPlan) -> tuple[torch.Tensor, int, str]:
    """``(GATE [rows, Hq, D] view, has_gate, gate dtype name)``; a per-head gate gets stride 0 on D."""
    rows, hq, dim = plan.query.shape
    gate = plan.gate
    if gate is None:
        return _dummies(_dev(plan.query))["float32"].expand(rows, hq, dim), 0, "float32"
    if gate.dim() == 2:
        gate = gate.unsqueeze(-1).expand(rows, hq, dim)
    return gate, 1, _DTYPES[gate.dtype]


def _write_empty(plan: SparseAttentionPlan) -> None:
    """Every row has no usable token: zeros (whatever the gate) and LSE -inf."""
    plan.out.zero_()
    if plan.lse is not None:
        plan.lse.fill_(-math.inf)


@contextlib.contextmanager
def _forked(device: torch.device, joins: contextlib.ExitStack) -> Iterator[torch.cuda.Stream | None]:
    """Run the block on a second stream of ``device``, after the current stream's work so far,
    and yield that stream (None off CUDA, where the block runs on the current stream); the
    current stream waits for it when ``joins`` closes. Capturable (the fork and the join are
    event waits). Memory stays safe without ``record_stream``: tensors allocated before the fork
    belong to the current stream, which reuses their memory only after the join; those the block
    allocates belong to the second stream."""
    if device.type != "cuda":
        yield None
        return
    current = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)  # from torch's per-device pool: no stream created per call
    side.wait_stream(current)
    joins.callback(current.wait_stream, side)
    with torch.cuda.stream(side):
        yield side


def sparse_attention(plan: SparseAttentionPlan, schedule: Schedule | None = None) -> None:
    """Native sparse attention; writes ``plan.out`` and ``plan.lse`` (when not None).

    Parameters
    ----------
    plan : SparseAttentionPlan
        From ``mate_core.plan_sparse_attention`` with ``backend="tilelang"``: query
        ``[rows, Hq, 256]`` BF16/FP16 with paged or padded K/V, int32 ``token_indices``
        ``[rows, T]`` and int32 metadata; or BF16 physical K/V ``[N, Hkv, 256]`` with int32
        ``selected_kv_indices`` ``[rows, T]``.
    schedule : Schedule, optional
        Overrides :func:`schedule_for` (benchmark sweeps); the backend API passes only ``plan``.
    """
    key, value, table, page_size = _paged_kv(plan)
    q = plan.query
    rows, hq, dim = q.shape
    if rows == 0:
        return
    if _ids(plan).shape[1] == 0 or key.numel() == 0 or table.numel() == 0:
        _write_empty(plan)
        return
    device = _dev(q)
    profile = profile_name(device)  # the arch gate, before any device-property query or compile
    pages, hkv = key.shape[0], key.shape[-2]
    sched = schedule or schedule_for(plan)
    tile = sched.tile
    kf, (kp, ks, kh) = _flat16(key)
    vf, (vp, vs, vh) = _flat16(value)
    wide = max(kf.shape[0], vf.shape[0]) >= _INT32_LIMIT
    dtype = _DTYPES[q.dtype]
    gate, has_gate, gate_dtype = _gate_view(plan)
    direct = sched.splits == 1  # the paged kernel's epilogue writes out/lse: no partials, no merge
    # With groups (sparse_groups) the CTA merges its splits and writes out/lse: no merge grid either. Not with
    # int64 offsets: four groups' offset arrays would exceed the SM's shared memory.
    groups = 1 if wide else sched.groups
    merged = direct or groups > 1
    main = build(sparse_paged_kernel.sparse_paged_kernel, profile,
                 *paged_consts(hq // hkv, dtype, tile.name, wide, gate_dtype, direct, groups))  # fmt: skip
    lse = plan.lse
    has_lse = int(lse is not None)
    if lse is None:
        lse = _dummies(device)["float32"].expand(rows, hq)
    unu, u_rows, max_nu = _dummies(device)["int"], 0, 0
    row_args = _row_args(plan, table.shape[1] * page_size)  # once: the union prep takes it too
    with contextlib.ExitStack() as joins:  # closing it joins the union path's stream
        ids, measured = None, None
        if sched.union_rows and not wide:
            # Row groups whose selections overlap share one K/V gather (sparse_union); the paged
            # kernel below skips exactly those groups' rows and computes the others.
            from .sparse_union import fused_buffers, launch_fused_prep, union_attention  # it imports this module

            u_rows = sched.union_rows
            max_nu = int(UNION_MAX_FILL * u_rows * _ids(plan).shape[1])
            buffers = fused_buffers(plan, u_rows, max_nu)  # allocated on this stream, which reads NU too
            u, unu, counts = buffers
            if sched.sort:
                unu.fill_(UNMEASURED)  # what the sort, running beside the prep, reads of a group not yet measured
            # The prep runs beside the sort; the union and finalize kernels after it write only the rows of
            # the groups they take, the sort and paged kernels only the others.
            with _forked(device, joins) as side:
                launch_fused_prep(plan, u_rows, buffers, row_args, max_nu, union_min_rows())
                measured = None if side is None else side.record_event()  # capturable
                union_attention(plan, u_rows, u, unu, counts, max_nu=max_nu)
        if sched.sort:
            # The rows the paged kernel computes walk their selections region by region (L2 sharing
            # between the CTAs of one request; sparse_sort_kernel): every row but those of the groups the
            # prep has taken for the union path by the time the sort reads their NU.
            from .sparse_union import sorted_ids  # sparse_union imports this module

            ids = sorted_ids(plan, unu, u_rows, max_nu) if u_rows else sorted_ids(plan)
        if measured is not None:  # the paged kernel reads the prep's final NU
            torch.cuda.current_stream(device).wait_event(measured)
        if ids is None:
            ids = _ids(plan)
        if direct:
            part_o, part_l = _dummies(device)["part_o"], _dummies(device)["part_l"]
        else:
            part_o = torch.empty((sched.splits, rows, hq, dim), dtype=torch.float32, device=q.device)
            part_l = torch.empty((sched.splits, rows, hq), dtype=torch.float32, device=q.device)
        outf, out_vec, of0, of1 = _out_rows(plan.out, direct)
        main(q, kf, vf, ids, table, part_o, part_l, gate, plan.out, outf, lse, unu,
             *row_args, pages, page_size, hkv, kp, ks, kh, vp, vs, vh,
             float(plan.scale), sched.splits, int(direct), has_gate, has_lse, u_rows, max_nu, int(sched.one_pipe),
             *page_divisor(page_size), out_vec, of0, of1)  # fmt: skip
        if not merged:
            merge = build(sparse_merge_kernel.sparse_merge_kernel, profile, dtype, gate_dtype, MERGE_THREADS, tile.pdl)
            merge(part_o, part_l, gate, plan.out, lse, has_gate, has_lse)
