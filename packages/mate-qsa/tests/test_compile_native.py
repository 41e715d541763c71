"""torch.compile over the native sparse kernels (H200): the op's run-time pointer checks."""

from __future__ import annotations

import pytest
import torch

import mate

pytestmark = pytest.mark.gpu


def _inputs(gen: torch.Generator, key_offset: int) -> tuple:
    dev, bf16, i32 = "cuda", torch.bfloat16, torch.int32
    b, q, pages, page = 2, 3, 6, 64
    query = torch.randn(b, q, 24, 256, generator=gen).to(dev, bf16)
    shape = (pages, page, 2, 256)
    numel = pages * page * 2 * 256
    # key_offset elements into a flat buffer: 0 keeps it 16-byte aligned, 1 (2 bytes) does not.
    key = torch.randn(numel + key_offset, generator=gen).to(dev, bf16)[key_offset:].view(shape)
    value = torch.randn(shape, generator=gen).to(dev, bf16)
    table = torch.randperm(pages, generator=gen).to(dev, i32).view(b, pages // b)
    ids = torch.randint(-1, pages // b * page, (b, q, 40), generator=gen).to(dev, i32)
    return query, key, value, ids, table


def test_compiled_native_call_checks_alignment_at_run_time(gen) -> None:
    torch._dynamo.reset()

    def call(query, key, value, ids, table):
        return mate.qsa_sparse_attention(query, key, value, ids, block_table=table, return_lse=True)

    compiled = torch.compile(call, fullgraph=True, backend="aot_eager")
    aligned = _inputs(gen, 0)
    for got, want in zip(compiled(*aligned), call(*aligned), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    misaligned = _inputs(gen, 1)
    with pytest.raises(mate.LayoutError, match=r"^key: "):
        call(*misaligned)  # eager: validation reads the pointer
    with pytest.raises(mate.LayoutError, match=r"^key: "):
        compiled(*misaligned)  # compiled: validation traced fake tensors; the op reads the pointer
    torch.cuda.synchronize()  # nothing was launched on the misaligned view: no CUDA error surfaces here
