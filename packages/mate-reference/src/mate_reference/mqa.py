"""FP32 reference of the MQA indexer entry points.

Each backend function takes a plan validated by :mod:`mate_core`, writes every element
of ``plan.out`` (FP32) and returns None. Work runs on the plan tensors' own device with
vectorized torch: the only Python loops are over heads (4 in QSA) and, in the indexer,
over requests (one product per request; varlen queries read their group sizes on the
host). Invalid page ids are clamped before any gather and the gathered values masked, so
nothing is read out of bounds.

Score of query row ``r`` against key ``j``: ``scale * sum_h relu(q[r, h, :] . k[j, :])``;
invisible keys are ``-inf``.
"""

from __future__ import annotations

import torch

from mate_core.plans import IndexerScorePlan, MQADecodePlan, MQAPrefillPlan

__all__ = ["indexer_score", "mqa_decode", "mqa_prefill", "relu_head_sum"]

NEG_INF = float("-inf")


def relu_head_sum(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Sum over heads of ReLU dot products, in FP32.

    Parameters
    ----------
    q : Tensor
        ``[..., M, H, D]`` queries, any float dtype.
    k : Tensor
        ``[..., N, D]`` keys (leading axes broadcast against ``q``'s).

    Returns
    -------
    Tensor
        ``[..., M, N]`` float32: ``sum_h relu(q[..., m, h, :] . k[..., n, :])``. Heads are
        accumulated one at a time so the intermediate stays ``[..., M, N]``.
    """
    kt = k.float().transpose(-1, -2)
    acc = None
    for h in range(q.shape[-2]):
        part = torch.matmul(q[..., h, :].float(), kt).relu_()
        acc = part if acc is None else acc.add_(part)
    return acc


def _masked(scores: torch.Tensor, visible: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.where(visible, scores * scale, torch.full_like(scores, NEG_INF))


def paged_keys(cache: torch.Tensor, table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather each request's logical key sequence from a paged cache.

    Parameters
    ----------
    cache : Tensor
        ``[pages, page_size, D]`` keys.
    table : Tensor
        ``[R, max_pages]`` int32/int64 page ids; ids outside ``[0, pages)`` are masked.

    Returns
    -------
    keys : Tensor
        ``[R, max_pages * page_size, D]`` float32 (masked slots hold page 0's values, or
        zeros when there are no pages).
    valid : Tensor
        ``[R, max_pages * page_size]`` bool, False where the page id is invalid.
    """
    pages, page_size, dim = cache.shape
    ids = table.long()
    page_ok = (ids >= 0) & (ids < pages)
    width = ids.shape[1] * page_size
    if pages == 0:
        keys = torch.zeros(ids.shape[0], width, dim, dtype=torch.float32, device=cache.device)
    else:
        keys = cache[ids.clamp(0, pages - 1)].float().reshape(ids.shape[0], width, dim)
    return keys, page_ok.repeat_interleave(page_size, dim=1)


# --------------------------------------------------------------------------- indexer score


def _row_requests(plan: IndexerScorePlan, rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per query row: request id (clamped to [0, R)), local index, and whether the row is real.

    Returns three ``[rows]`` tensors: int64, int64, bool. Elementwise ops and gathers only: no
    host sync and no data-dependent shape (so meta tensors work too).
    """
    device = plan.out.device
    requests = plan.num_requests
    row = torch.arange(rows, device=device)
    if plan.padded:
        return row // plan.q_len, row % plan.q_len, torch.ones(rows, dtype=torch.bool, device=device)
    if plan.cu_seqlens_q is not None:
        cu = plan.cu_seqlens_q.long()
        req = torch.searchsorted(cu, row, right=True) - 1  # row in [cu[req], cu[req + 1])
        ok = (req >= 0) & (req < requests)
        req = req.clamp(0, requests - 1)
        return req, row - cu[req], ok
    req = plan.token_to_req.long()
    ok = (req >= 0) & (req < requests)
    req = req.clamp(0, requests - 1)
    # A request's rows are contiguous: local index = row - its first row. Rows of no request
    # go to a spare slot R (instead of being filtered out, which has a data-dependent shape).
    slot = torch.where(ok, req, torch.full_like(req, requests))
    first = torch.full((requests + 1,), rows, dtype=torch.long, device=device)
    first = first.scatter_reduce(0, slot, row, reduce="amin")[:requests]
    return req, row - first[req], ok


def _request_keys(plan: IndexerScorePlan) -> tuple[torch.Tensor, torch.Tensor]:
    """``[R, W, D]`` float32 keys and ``[R, W]`` bool validity, logical or paged."""
    if plan.paged:
        return paged_keys(plan.block_keys, plan.block_table)
    keys = plan.block_keys.float()
    return keys, torch.ones(keys.shape[:2], dtype=torch.bool, device=keys.device)


def _has_data(t: torch.Tensor) -> bool:
    """False for tensors without readable values (meta, fake): only shapes can be computed."""
    return t.device.type != "meta" and not isinstance(t, torch._subclasses.FakeTensor)  # type: ignore[attr-defined]


def _scores_by_request(
    plan: IndexerScorePlan, q: torch.Tensor, keys: torch.Tensor, req: torch.Tensor, ok: torch.Tensor
) -> torch.Tensor:
    """``[rows, W]`` unscaled scores; each row against its own request's keys.

    Each request's rows are scored with one ``[n_r, D] x [D, W]`` product per head. Padded
    queries: request ``b`` owns rows ``b*Q .. (b+1)*Q - 1``, a static split (no host sync).
    Varlen queries: the rows are grouped by request, and the group sizes ``n_r`` are read on
    the host (one sync). That read is kept on purpose: the FP32 rounding of a product depends on
    its row count, so a sync-free variant (a per-row gather of its request's keys, or every row
    against every request) would change the oracle's results, and cost ``rows * W * D`` gathered
    keys or ``R`` times the work. Tensors without data (meta) skip it and return an
    uninitialized tensor of the right shape. Rows that belong to no request keep zeros (they are
    masked afterwards).
    """
    requests, width = keys.shape[0], keys.shape[1]
    rows = q.shape[0]
    if plan.padded:
        q_len = plan.q_len
        return torch.cat([relu_head_sum(q[r * q_len : (r + 1) * q_len], keys[r]) for r in range(requests)])
    if not _has_data(q):
        return torch.empty(rows, width, dtype=torch.float32, device=q.device)
    scores = torch.zeros(rows, width, dtype=torch.float32, device=q.device)
    group = torch.where(ok, req, requests)
    order = torch.argsort(group, stable=True)
    counts = torch.bincount(group, minlength=requests + 1).tolist()
    start = 0
    for r in range(requests):
        if counts[r]:
            rows_r = order[start : start + counts[r]]
            scores[rows_r] = relu_head_sum(q[rows_r], keys[r])
        start += counts[r]
    return scores


def indexer_score(plan: IndexerScorePlan) -> None:
    """Write ``plan.out`` ``[rows, W]`` FP32 for ``qsa_indexer_mqa_score``.

    Block ``j`` is visible to row ``r`` (request ``b``, position ``p``) iff the row is real
    (its request is in ``[0, R)`` and its local index < ``seq_lens_q[b]``), the block's last
    token is not in the future (``(j + 1) * block_size - 1 <= p``) and, paged, its page id
    is valid. ``p`` is ``query_positions[r]`` or, if omitted, the local index.
    """
    rows, width = plan.out.shape
    if rows == 0 or width == 0:
        return
    if plan.num_requests == 0:
        plan.out.fill_(NEG_INF)
        return
    q = plan.q.reshape(rows, *plan.q.shape[-2:])
    req, local, ok = _row_requests(plan, rows)
    if plan.seq_lens_q is not None:
        ok &= local < plan.seq_lens_q.long()[req]
    pos = local if plan.query_positions is None else plan.query_positions.reshape(-1).long()
    keys, key_ok = _request_keys(plan)
    scores = _scores_by_request(plan, q, keys, req, ok)
    last_token = torch.arange(1, width + 1, device=q.device) * plan.block_size - 1
    visible = ok[:, None] & key_ok[req] & (last_token[None, :] <= pos[:, None])
    plan.out.copy_(_masked(scores, visible, plan.scale))


# --------------------------------------------------------------------------- prefill / decode


def mqa_prefill(plan: MQAPrefillPlan) -> None:
    """Write ``plan.out`` ``[rows, keys]`` FP32: key ``j`` visible iff ``row_starts[r] <= j < row_ends[r]``."""
    rows, width = plan.out.shape
    if rows == 0 or width == 0:
        return
    scores = relu_head_sum(plan.q, plan.k)
    j = torch.arange(width, device=plan.out.device)
    visible = (j[None, :] >= plan.row_starts.long()[:, None]) & (j[None, :] < plan.row_ends.long()[:, None])
    plan.out.copy_(_masked(scores, visible, plan.scale))


def mqa_decode(plan: MQADecodePlan) -> None:
    """Write ``plan.out`` ``[B, max_model_len]`` FP32 for ``qsa_mqa_decode``.

    Key ``j`` of request ``b`` is read from page ``page_table[b, j // page_size]``, slot
    ``j % page_size``; it is visible iff ``j < context_lens[b]``, ``j // page_size < max_pages``
    and the page id is in ``[0, pages)``.
    """
    batch, length = plan.out.shape
    if batch == 0:
        return
    page_size = plan.page_size
    # Pages past max_model_len are never shown: do not gather them.
    table = plan.page_table[:, : -(-length // page_size)]
    keys, key_ok = paged_keys(plan.k_cache, table)
    width = min(keys.shape[1], length)
    result = torch.full((batch, length), NEG_INF, dtype=torch.float32, device=plan.out.device)
    if width:
        scores = relu_head_sum(plan.q[:, None], keys[:, :width]).squeeze(1)
        j = torch.arange(width, device=plan.out.device)
        visible = key_ok[:, :width] & (j[None, :] < plan.context_lens.long()[:, None])
        result[:, :width] = _masked(scores, visible, plan.scale)
    plan.out.copy_(result)
