"""Deliberately naive float64 loop versions of the four QSA computations (test oracle)."""

from __future__ import annotations

import math

import torch

NEG_INF = float("-inf")


def _relu_head_sum(q_row: torch.Tensor, key: torch.Tensor) -> float:
    return sum(max(float(q_row[h] @ key), 0.0) for h in range(q_row.shape[0]))


def indexer_score(q, k, *, scale, seq_lens_q, block_size=4):
    """q [B,Q,H,D], k [B,N,D] -> [B,Q,N]; visible iff row < seq_lens_q[b] and (j+1)*bs-1 <= row."""
    q, k = q.double(), k.double()
    b_, q_, _, _ = q.shape
    out = torch.full((b_, q_, k.shape[1]), NEG_INF, dtype=torch.float64)
    for b in range(b_):
        for i in range(min(q_, int(seq_lens_q[b]))):
            for j in range(k.shape[1]):
                if (j + 1) * block_size - 1 <= i:
                    out[b, i, j] = scale * _relu_head_sum(q[b, i], k[b, j])
    return out


def mqa_prefill(q, k, starts, ends, *, scale):
    """q [rows,H,D], k [keys,1,D] -> [rows,keys]; visible iff starts[r] <= j < ends[r]."""
    q, k = q.double(), k.double().reshape(k.shape[0], -1)
    out = torch.full((q.shape[0], k.shape[0]), NEG_INF, dtype=torch.float64)
    for r in range(q.shape[0]):
        for j in range(int(starts[r]), min(int(ends[r]), k.shape[0])):
            out[r, j] = scale * _relu_head_sum(q[r], k[j])
    return out


def mqa_decode(q, cache, table, lens, max_len, *, scale):
    """q [B,1,H,D], cache [pages,ps,1,D] -> [B,max_len]."""
    q, cache = q.double().reshape(q.shape[0], q.shape[-2], q.shape[-1]), cache.double()
    pages, page_size = cache.shape[0], cache.shape[1]
    out = torch.full((q.shape[0], max_len), NEG_INF, dtype=torch.float64)
    for b in range(q.shape[0]):
        for j in range(min(int(lens[b]), max_len)):
            slot = j // page_size
            if slot >= table.shape[1]:
                continue
            page = int(table[b, slot])
            if 0 <= page < pages:
                out[b, j] = scale * _relu_head_sum(q[b], cache[page, j % page_size].reshape(-1))
    return out


def sparse_attention(query, key, value, tokens, *, block_table, seq_lens_k, gate, scale):
    """Padded query [B,Q,Hq,D], paged K/V; positions inferred bottom-right; returns (out, lse) in float64."""
    query, key, value, gate = query.double(), key.double(), value.double(), gate.double()
    b_, q_, hq, d = query.shape
    page_size, hkv = key.shape[1], key.shape[2]
    out = torch.zeros(b_, q_, hq, d, dtype=torch.float64)
    lse = torch.full((b_, q_, hq), NEG_INF, dtype=torch.float64)
    for b in range(b_):
        for i in range(q_):
            pos = int(seq_lens_k[b]) - q_ + i
            used = []
            for t in tokens[b, i].tolist():
                page_slot = t // page_size if t >= 0 else -1
                if 0 <= t <= pos and t < int(seq_lens_k[b]) and page_slot < block_table.shape[1]:
                    page = int(block_table[b, page_slot])
                    if 0 <= page < key.shape[0]:
                        used.append((page, t % page_size))
            for h in range(hq):
                kv = h // (hq // hkv)
                logits = [scale * float(query[b, i, h] @ key[p, s, kv]) for p, s in used]
                if not logits:
                    continue
                top = max(logits)
                weights = [math.exp(x - top) for x in logits]
                total = sum(weights)
                acc = sum(w * value[p, s, kv] for w, (p, s) in zip(weights, used))
                out[b, i, h] = acc / total / (1.0 + math.exp(-float(gate[b, i, h])))
                lse[b, i, h] = top + math.log(total)
    return out, lse
