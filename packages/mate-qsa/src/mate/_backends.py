"""Backend functions by operation and backend name.

Both backends expose the same four functions (``indexer_score``, ``mqa_prefill``,
``mqa_decode``, ``sparse_attention``), each taking a validated plan from
``mate_core`` and writing its output buffers. Importing ``mate_kernels_musa``
does not import TileLang, so this table is cheap to build.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mate_kernels_musa
from mate_reference import mqa as _ref_mqa
from mate_reference import sparse as _ref_sparse

__all__ = ["OPERATIONS", "backend_function"]

OPERATIONS = ("indexer_score", "mqa_prefill", "mqa_decode", "sparse_attention")

_TABLE: dict[str, dict[str, Callable[[Any], None]]] = {
    "reference": {
        "indexer_score": _ref_mqa.indexer_score,
        "mqa_prefill": _ref_mqa.mqa_prefill,
        "mqa_decode": _ref_mqa.mqa_decode,
        "sparse_attention": _ref_sparse.sparse_attention,
    },
    "tilelang": {name: getattr(mate_kernels_musa, name) for name in OPERATIONS},
}


def backend_function(operation: str, backend: str) -> Callable[[Any], None]:
    """The function of ``backend`` ("reference" or "tilelang") that runs ``operation``.

    ``backend`` comes from a validated plan, so an unknown name is a programming error.
    """
    return _TABLE[backend][operation]
