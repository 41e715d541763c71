"""Random paged sparse-attention problems for the native-kernel tests (CPU and GPU).

``random_case(gen, ...)`` draws one ``qsa_sparse_attention`` call on the paged (or, with
``kv="padded"``, padded ``[B, S, Hkv, D]``) logical path: ragged requests (decode and prefill sized), flattened (``cu_seqlens_q`` or
``token_to_req`` with padded rows) or padded ``[B, Q]`` queries, shuffled physical pages
with -1 and out-of-range block-table entries, selections with -1 padding, duplicates,
future ids and ids past ``seq_len_k``, optional ``seq_lens_q`` / ``seq_lens_k`` /
``query_positions``, gates of both shapes and dtypes, LSE buffers and strided ``out``
views. Every K/V slot that no row may use holds NaN, so any read of a masked token
shows up in the output. Data are random normals, never zeros. With ``views=True`` every
input (query, K/V, indices, metadata, gate) is a strided view at an odd storage offset
inside a larger poisoned buffer (K/V offsets and outer strides stay 16-byte multiples).

``physical_case(gen, ...)`` draws one ``selected_kv_indices`` call: physical ids into
``[N, Hkv, D]`` K/V with -1 / negative / ``>= N`` ids, duplicates and empty rows; the
storage past row ``N`` and every unselected row hold NaN.

Loaded by file path (the test suite uses ``--import-mode=importlib``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

DIM = 256
SPLITS = (None, 1, 2, 4, 7, 64)


@dataclass
class Case:
    """Keyword arguments of ``plan_sparse_attention`` plus what the checks need."""

    kwargs: dict[str, Any]
    out_base: torch.Tensor | None = None  # storage around a strided ``out`` view
    notes: dict[str, Any] = field(default_factory=dict)
    bases: dict[str, torch.Tensor] = field(default_factory=dict)  # storage around strided input views

    def to(self, device: torch.device | str) -> Case:
        """The same case on ``device``; strided views keep their strides and storage offsets."""
        moved = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in self.kwargs.items()}
        bases = {k: b.to(device) for k, b in self.bases.items()}
        if self.out_base is not None:
            bases["out"] = self.out_base.to(device)
        for name, base in bases.items():
            v = self.kwargs[name]
            moved[name] = base.as_strided(v.shape, v.stride(), v.storage_offset())
        return Case(moved, bases.pop("out", None), dict(self.notes), bases)

    def drop_out_view(self) -> Case:
        """Let the call allocate ``out`` (no caller view, no storage around it to check); returns self."""
        self.kwargs.pop("out", None)
        self.out_base = None
        return self


def _pick(gen: torch.Generator, options: Any) -> Any:
    return options[int(torch.randint(len(options), (1,), generator=gen))]


def _randint(gen: torch.Generator, lo: int, hi: int, *shape: int) -> torch.Tensor:
    """Uniform integers in [lo, hi] (inclusive), int64."""
    return torch.randint(lo, hi + 1, shape or (1,), generator=gen)


def _selection(gen: torch.Generator, pos: int, seq_len_k: int, width: int, canonical: bool) -> torch.Tensor:
    """One row's token ids, int64 ``[width]``: visible ids, -1 pads, duplicates, future/late ids."""
    if canonical:
        # QSA shape: random visible 4-token blocks + the tail of the query's own block.
        nblk = max((pos + 1) // 4, 0)
        take = min(nblk, (width - 3) // 4)
        blocks = torch.randperm(max(nblk, 1), generator=gen)[:take] if nblk else torch.empty(0, dtype=torch.long)
        ids = (blocks[:, None] * 4 + torch.arange(4)).reshape(-1)
        tail = torch.arange((pos + 1) // 4 * 4, pos + 1) if pos >= 0 else torch.empty(0, dtype=torch.long)
        ids = torch.cat([ids, tail])
    else:
        n = int(_randint(gen, 0, width))
        hi = max(pos, 0)
        ids = _randint(gen, 0, hi, n) if n else torch.empty(0, dtype=torch.long)
        # Some future ids, ids past seq_len_k and duplicates.
        if n:
            k = int(_randint(gen, 0, max(n // 8, 1)))
            ids[torch.randperm(n, generator=gen)[:k]] = _randint(gen, pos + 1, pos + 1 + 4 * seq_len_k + 8, k)
            k = int(_randint(gen, 0, max(n // 8, 1)))
            if k and n > 1:
                src = torch.randperm(n, generator=gen)[:k]
                dst = torch.randperm(n, generator=gen)[:k]
                ids[dst] = ids[src]
    out = torch.full((width,), -1, dtype=torch.long)
    ids = ids[:width]
    out[: ids.numel()] = ids[torch.randperm(ids.numel(), generator=gen)]
    # A few -1 holes in the middle.
    holes = torch.rand(width, generator=gen) < 0.05
    out[holes] = -1
    return out


def _paged_cache(gen, n_req, max_pages, page_size, hkv, dtype, bad_pages):
    """Shuffled block table (with -1 / out-of-range entries) and NaN-filled spare pages."""
    used = n_req * max_pages
    pages = used + int(_randint(gen, 1, 8))
    table = torch.randperm(pages, generator=gen)[:used].view(n_req, max_pages)
    if bad_pages:
        bad = torch.rand(n_req, max_pages, generator=gen) < 0.1
        junk = torch.where(torch.rand(n_req, max_pages, generator=gen) < 0.5, -1, pages + 3)
        table = torch.where(bad, junk, table)
    key = torch.randn(pages, page_size, hkv, DIM, generator=gen).to(dtype)
    value = torch.randn(pages, page_size, hkv, DIM, generator=gen).to(dtype)
    live = torch.zeros(pages, dtype=torch.bool)
    live[table[(table >= 0) & (table < pages)]] = True
    key[~live] = float("nan")
    value[~live] = float("nan")
    return key, value, table.to(torch.int32), pages


def _poison_tail(key, value, table, seq_lens_k, page_size):
    """NaN in every slot at or past seq_len_k of each request's pages (never usable)."""
    pages = key.shape[0]
    for b in range(table.shape[0]):
        for p in range(table.shape[1]):
            page = int(table[b, p])
            if not 0 <= page < pages:
                continue
            first = int(seq_lens_k[b]) - p * page_size
            if first < page_size:
                key[page, max(first, 0) :] = float("nan")
                value[page, max(first, 0) :] = float("nan")


def _embed(gen: torch.Generator, t: torch.Tensor, lead: int, vector: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(view, base)``: ``t``'s values in a strided view at an odd storage offset of a poisoned buffer.

    Axes from ``lead`` on get padded extents (so the axis before them gets a wider stride);
    the ``lead`` batch axes stay collapsible into one row axis. ``vector`` keeps the K/V
    rule (unit feature stride, offset and outer strides multiples of 8 elements); other
    tensors may also get a feature stride of 2.
    """
    unit = 8 if vector else 1
    stride = [0] * t.dim()
    step = 1 if vector else int(_randint(gen, 1, 2))
    for i in reversed(range(t.dim())):
        stride[i] = step
        pad = unit * int(_randint(gen, 0, 3)) if i >= lead else 0
        step = step * t.shape[i] + pad
    offset = unit * (2 * int(_randint(gen, 0, 3)) + 1)
    span = offset + 1 + sum((n - 1) * st for n, st in zip(t.shape, stride)) + unit
    fill = float("nan") if t.is_floating_point() else -(2**30)
    base = torch.full((span,), fill, dtype=t.dtype)
    view = base.as_strided(t.shape, stride, offset)
    view.copy_(t)
    return view, base


def _embed_inputs(gen: torch.Generator, kwargs: dict[str, Any], lead: int) -> dict[str, torch.Tensor]:
    """Replace every input tensor of ``kwargs`` by a strided view (see ``_embed``); returns the bases."""
    row_tensors = ("query", "token_indices", "selected_kv_indices", "query_positions", "gate")
    bases = {}
    for name, t in list(kwargs.items()):
        if not isinstance(t, torch.Tensor) or name in ("out", "lse"):
            continue
        kv = name in ("key", "value")
        kwargs[name], bases[name] = _embed(gen, t, lead if name in row_tensors else 0, kv)
    return bases


OUT_KINDS = ("none", "pad", "transposed", "odd")


def _out_view(gen, shape, dtype, kind=None):
    """A strided, poisoned ``out`` view inside a larger buffer (or None for a fresh buffer); ``kind``
    one of ``OUT_KINDS`` (default: drawn)."""
    kind = kind or _pick(gen, list(OUT_KINDS))
    if kind == "none":
        return None, None
    if kind == "pad":
        base = torch.full((*shape[:-1], shape[-1] + 64), float("nan"), dtype=dtype)
        return base[..., 32 : 32 + shape[-1]], base
    if kind == "odd":  # one element in, odd strides: no whole 16-byte rows (element-wise stores)
        base = torch.full((*shape[:-1], shape[-1] + 1), float("nan"), dtype=dtype)
        return base[..., 1 : 1 + shape[-1]], base
    # Heads outermost: the row axis is not the slowest (still non-overlapping).
    perm = (len(shape) - 2, *range(len(shape) - 2), len(shape) - 1)
    base = torch.full([shape[i] for i in perm], float("nan"), dtype=dtype)
    inv = [perm.index(i) for i in range(len(shape))]
    return base.permute(*inv), base


def random_case(
    gen: torch.Generator,
    *,
    max_rows: int = 64,
    max_width: int = 300,
    hq: int = 24,
    hkv: int = 2,
    dtype: torch.dtype = torch.bfloat16,
    num_splits: Any = "random",
    query_kind: str | None = None,
    bad_pages: bool = True,
    canonical: bool | None = None,
    width: int | None = None,
    kv: str = "paged",
    views: bool = False,
    n_req: int | None = None,
    empty_requests: bool = False,
    row_counts: list[int] | None = None,
    lse: str | None = None,
    out_kind: str | None = None,
) -> Case:
    """Draw one paged call (see module docstring). Sizes stay below ``max_rows`` / ``max_width``; ``width`` fixes T.

    ``kv="padded"`` gives padded ``[B, S, Hkv, D]`` K/V (with a padded query and
    ``num_splits`` None or 1, the native combination); ``views`` embeds every input (``_embed``).
    ``n_req`` fixes the request count; ``empty_requests`` (flattened queries only) gives
    about a third of the requests no rows (repeated ``cu_seqlens_q`` entries). ``row_counts``
    fixes each request's query rows (a mixed batch: a prefill chunk among decode rows).
    ``lse`` fixes how the LSE is asked for ("none", "return" or "buffer"; default random).
    ``out_kind`` fixes the ``out`` buffer (one of ``OUT_KINDS``; default random).
    """
    page_size = _pick(gen, [16, 32, 64])
    if kv == "padded":
        query_kind = "padded"
        num_splits = _pick(gen, [None, 1]) if num_splits == "random" else num_splits
    query_kind = query_kind or _pick(gen, ["cu", "t2r", "padded"])
    canonical = bool(_randint(gen, 0, 1)) if canonical is None else canonical
    decode = bool(_randint(gen, 0, 1))
    n_req = len(row_counts) if row_counts else n_req or int(_randint(gen, 1, 6))
    q_cap = 4 if decode else max(1, max_rows // n_req)
    q_lens = [int(x) for x in _randint(gen, 1, q_cap, n_req)]
    while sum(q_lens) > max_rows:
        q_lens[q_lens.index(max(q_lens))] -= 1
    q_lens = list(row_counts) if row_counts else [max(q, 1) for q in q_lens]
    if empty_requests:
        if query_kind == "padded":
            raise ValueError("empty_requests needs flattened queries")
        q_lens = [0 if i % 3 == 1 else q for i, q in enumerate(q_lens)]
    if width is not None:
        pass
    elif canonical:  # 4-token blocks + tail, up to the full 2051 when max_width allows
        width = 4 * int(_randint(gen, 1, max(1, (max_width - 3) // 4))) + 3
    else:
        width = int(_randint(gen, 1, max_width))
    # Canonical rows need about twice their selection in visible context.
    max_pages = int(_randint(gen, 1, 8)) + (-(-2 * width // page_size) if canonical else 0)
    capacity = max_pages * page_size
    kv_lens = [int(x) for x in _randint(gen, 1, capacity, n_req)]
    if canonical:
        kv_lens = [max(k, capacity - page_size) for k in kv_lens]
    kv_lens = [max(k, q) for k, q in zip(kv_lens, q_lens)]
    kv_lens = [min(k, capacity) for k in kv_lens]

    if kv == "padded":  # one page of `capacity` slots per request, no block table
        key = torch.randn(n_req, capacity, hkv, DIM, generator=gen).to(dtype)
        value = torch.randn(n_req, capacity, hkv, DIM, generator=gen).to(dtype)
        table, tail_page = torch.arange(n_req, dtype=torch.int32).view(n_req, 1), capacity
    else:
        key, value, table, _ = _paged_cache(gen, n_req, max_pages, page_size, hkv, dtype, bad_pages)
        tail_page = page_size
    use_slk = bool(_randint(gen, 0, 1))
    seq_lens_k = torch.tensor(kv_lens, dtype=torch.int32)
    slk_eff = seq_lens_k if use_slk else torch.full((n_req,), capacity, dtype=torch.int32)
    if use_slk:
        _poison_tail(key, value, table, seq_lens_k, tail_page)

    kwargs: dict[str, Any] = {"key": key, "value": value}
    if kv == "paged":
        kwargs["block_table"] = table
    if use_slk:
        kwargs["seq_lens_k"] = seq_lens_k
    use_qpos = bool(_randint(gen, 0, 3) == 0)
    use_slq = bool(_randint(gen, 0, 2) == 0)

    if query_kind == "padded":
        q_len = max(q_lens)
        rows = n_req * q_len
        req_of_row = [r // q_len for r in range(rows)]
        local = [r % q_len for r in range(rows)]
        slq = torch.tensor(q_lens, dtype=torch.int32)
        shape = (n_req, q_len, hq, DIM)
        use_slq = True  # ragged requests in a padded batch
    else:
        rows_per = list(q_lens)
        req_of_row, local = [], []
        for b, q in enumerate(rows_per):
            req_of_row += [b] * q
            local += list(range(q))
        slq = torch.tensor(q_lens, dtype=torch.int32)
        if use_slq:  # fewer real rows than given: trailing rows of a request are padded
            slq = torch.tensor([max(0, q - int(_randint(gen, 0, 1))) for q in q_lens], dtype=torch.int32)
        if query_kind == "t2r":
            # Interleave a few padded rows (ids -1 or R) between requests.
            ids = []
            pos_local = []
            for b, q in enumerate(rows_per):
                if _randint(gen, 0, 2) == 0:
                    ids.append(_pick(gen, [-1, n_req]))
                    pos_local.append(0)
                ids += [b] * q
                pos_local += list(range(q))
            req_of_row, local = ids, pos_local
            kwargs["token_to_req"] = torch.tensor(ids, dtype=torch.int32)
            kwargs["num_requests"] = n_req
        else:
            cu = torch.zeros(n_req + 1, dtype=torch.int32)
            cu[1:] = torch.cumsum(torch.tensor(rows_per), 0)
            kwargs["cu_seqlens_q"] = cu
        rows = len(req_of_row)
        shape = (rows, hq, DIM)
    if use_slq:
        kwargs["seq_lens_q"] = slq

    positions = []
    for r in range(rows):
        b = req_of_row[r]
        if not 0 <= b < n_req:
            positions.append(int(_randint(gen, 0, capacity)))
            continue
        pos = int(slk_eff[b]) - int(slq[b] if use_slq or query_kind == "padded" else q_lens[b]) + local[r]
        if use_qpos:
            pos = int(_randint(gen, -2, capacity + 2)) if _randint(gen, 0, 5) == 0 else pos
        positions.append(pos)
    if use_qpos:
        qp = torch.tensor(positions, dtype=torch.int32)
        kwargs["query_positions"] = qp.view(shape[:2]) if query_kind == "padded" else qp
    sel = torch.stack(
        [
            _selection(gen, positions[r], int(slk_eff[req_of_row[r]]) if 0 <= req_of_row[r] < n_req else 1,
                       width, canonical)
            for r in range(rows)
        ]
    ).to(torch.int32)  # fmt: skip
    kwargs["query"] = torch.randn(*shape, generator=gen).to(dtype)
    kwargs["token_indices"] = sel.view(*shape[:-2], width)

    gate_kind = _pick(gen, ["none", "head", "elem"])
    if gate_kind != "none":
        gdtype = _pick(gen, [torch.float32, dtype])
        gshape = shape[:-1] if gate_kind == "head" else shape
        kwargs["gate"] = (2 * torch.randn(*gshape, generator=gen)).to(gdtype)
    lse_kind = lse or _pick(gen, ["none", "return", "buffer"])
    if lse_kind == "return":
        kwargs["return_lse"] = True
    elif lse_kind == "buffer":
        kwargs["lse"] = torch.full(shape[:-1], float("nan"), dtype=torch.float32)
    kwargs["num_splits"] = _pick(gen, SPLITS) if num_splits == "random" else num_splits
    kwargs["scale"] = float(_pick(gen, [None, 0.03, 0.1]) or DIM**-0.5)
    out, base = _out_view(gen, shape, dtype, out_kind)
    if out is not None:
        kwargs["out"] = out
    notes = {"rows": rows, "width": width, "query_kind": query_kind, "page_size": page_size, "gate": gate_kind,
             "lse": lse_kind, "num_splits": kwargs["num_splits"], "canonical": canonical, "kv": kv,
             "views": views}  # fmt: skip
    bases = _embed_inputs(gen, kwargs, 2 if query_kind == "padded" else 1) if views else {}
    return Case(kwargs, base, notes, bases)


def mixed_batch(gen: torch.Generator, chunk: int, width: int, **kwargs) -> tuple[Case, list[bool]]:
    """Two decode rows, a ``chunk``-row prefill request, three decode rows (flattened, ``cu_seqlens_q``);
    the chunk's groups of 4 rows select what their first row selects (small unions). Returns the case
    and, per group of 4 rows, whether all its rows are the chunk's."""
    counts = [1, 1, chunk, 1, 1, 1]
    case = random_case(gen, width=width, num_splits=None, query_kind="cu", row_counts=counts, canonical=True,
                       **kwargs)  # fmt: skip
    ids = case.kwargs["token_indices"]
    rows = ids.shape[0]
    in_chunk = [all(2 <= r < 2 + chunk for r in range(4 * g, min(4 * g + 4, rows))) for g in range(-(-rows // 4))]
    for g, whole in enumerate(in_chunk):
        if whole:
            ids[4 * g + 1 : 4 * g + 4] = ids[4 * g]
    return case, in_chunk


def physical_case(
    gen: torch.Generator,
    *,
    max_rows: int = 64,
    max_width: int = 300,
    hq: int = 24,
    hkv: int = 2,
    num_splits: Any = "random",
    views: bool = False,
    width: int | None = None,
) -> Case:
    """Draw one ``selected_kv_indices`` call (BF16; see module docstring)."""
    rows = int(_randint(gen, 1, max_rows))
    width = int(_randint(gen, 0, max_width)) if width is None else width
    n_kv = int(_randint(gen, 1, 3 * width + 16))
    spare = int(_randint(gen, 1, 64))  # storage past row N: NaN, never addressable
    ids = _randint(gen, 0, n_kv - 1, rows, width)
    bad = torch.rand(rows, width, generator=gen)
    ids = torch.where(bad < 0.05, _randint(gen, n_kv, n_kv + 2 * spare, rows, width), ids)
    ids = torch.where((bad >= 0.05) & (bad < 0.1), _randint(gen, -(2**31), -1, rows, width), ids)
    ids[torch.rand(rows, generator=gen) < 0.1] = -1  # empty rows
    dup = torch.rand(rows, width, generator=gen) < 0.1
    if width > 1:
        ids = torch.where(dup, ids.roll(1, dims=1), ids)
    ids = ids.to(torch.int32)
    kv = torch.randn(2, n_kv + spare, hkv, DIM, generator=gen).to(torch.bfloat16)
    live = torch.zeros(n_kv + spare, dtype=torch.bool)
    live[ids[(ids >= 0) & (ids < n_kv)].long()] = True
    kv[:, ~live] = float("nan")
    kwargs: dict[str, Any] = {
        "query": torch.randn(rows, hq, DIM, generator=gen).to(torch.bfloat16),
        "key": kv[0, :n_kv],
        "value": kv[1, :n_kv],
        "selected_kv_indices": ids,
    }
    lse_kind = _pick(gen, ["none", "return", "buffer", "buffer+return"])
    if "return" in lse_kind:
        kwargs["return_lse"] = True
    lse_base = None
    if "buffer" in lse_kind:  # written even without return_lse; maybe a strided view
        lse_buf, lse_base = _out_view(gen, (rows, hq, 1), torch.float32)
        kwargs["lse"] = torch.full((rows, hq), float("nan")) if lse_buf is None else lse_buf[..., 0]
    kwargs["num_splits"] = _pick(gen, SPLITS) if num_splits == "random" else num_splits
    scale = float(_pick(gen, [0.03, 0.1, DIM**-0.5]))
    kwargs[_pick(gen, ["scale", "softmax_scale"])] = scale
    out, base = _out_view(gen, (rows, hq, DIM), torch.bfloat16)
    if out is not None:
        kwargs["out"] = out
    notes = {"rows": rows, "width": width, "n_kv": n_kv, "lse": lse_kind, "num_splits": kwargs["num_splits"],
             "views": views}  # fmt: skip
    bases = _embed_inputs(gen, kwargs, 1) if views else {}
    if lse_base is not None:
        bases["lse"] = lse_base
    return Case(kwargs, base, notes, bases)


def region_order(ids: torch.Tensor, shift: int, threads: int) -> torch.Tensor:
    """Every row of ``ids`` ``[rows, T]`` in ``sparse_sort_kernel``'s order: by context region
    ``clamp(max(id, 0) >> shift, 0, REGIONS - 1)``, within a region by thread ``slot % threads``,
    then by ``slot // threads``."""
    from mate_kernels_musa.sparse_sort_kernel import REGIONS, SORT_CAP

    slot = torch.arange(ids.shape[-1], device=ids.device)
    region = (ids.clamp(min=0) >> shift).clamp(max=REGIONS - 1)
    key = region * SORT_CAP + (slot % threads) * (SORT_CAP // threads) + slot // threads
    return torch.gather(ids, -1, torch.argsort(key, dim=-1))


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative L2 error of ``a`` against ``b`` (FP64), 0 when both are zero."""
    a, b = a.double(), b.double()
    den = b.norm()
    num = (a - b).norm()
    return float(num / den) if den > 0 else float(num)


def rel_l2_rows(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest relative L2 error of one vector of ``a`` against ``b`` over their last axis (one
    (row, head) of an attention output), FP64; a vector whose reference is zero counts its
    absolute error. One wrong or unwritten vector of a large output hardly moves
    :func:`rel_l2`, so the checks bound this too."""
    a, b = a.double().flatten(0, -2), b.double().flatten(0, -2)
    num, den = (a - b).norm(dim=-1), b.norm(dim=-1)
    err = torch.where(den > 0, num / den.clamp_min(1e-300), num)
    return float(err.max()) if err.numel() else 0.0


def lse_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """Max abs error over finite entries; inf when the -inf patterns differ."""
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    if not torch.equal(fa, fb) or not torch.equal(a[~fa], b[~fb]):
        return float("inf")
    return float((a[fa] - b[fb]).abs().max()) if fa.any() else 0.0
