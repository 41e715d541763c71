"""TileLang helpers shared by the MQA indexer kernels (imported only inside kernel factories).

Everything here needs TileLang, so it is imported lazily by the kernel modules'
factories, never at package import.
"""

from __future__ import annotations

import tilelang.language as T

HEADS = 4
DIM = 128
# Vector loads move 16 bytes = 8 BF16/FP16 elements; strides passed in units of 8 let the
# compiler prove alignment and emit 128-bit loads (plan validation guarantees the layout).
VEC = 8
# T.Parallel annotation: lower the global->shared copy in the loop to 16-byte cp.async, so a
# tile's loads are all in flight at once (plain loads behind bounds predicates are issued
# one round trip at a time). Predicated-off elements are zero-filled without a read.
ASYNC = {"parallel_prefer_async": True}


def vec_view(raw, strides8):
    """View ``raw`` (unit feature stride) with outer strides ``8 * strides8`` (int64 scalars).

    ``raw`` binds the user's tensor; its own stride variables are ignored. The view carries
    the same data pointer with strides the compiler can prove to be multiples of 8 elements.
    """
    return T.view(raw, strides=(*(s * VEC for s in strides8), 1))


def neg_inf():
    return -T.infinity("float32")
