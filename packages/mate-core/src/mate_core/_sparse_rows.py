"""Arguments of qsa_sparse_attention indexed by query row: indices, positions, gate.

Each is validated against the query's leading axes (``QueryLayout.lead``) and
returned as a zero-copy row view ([rows, ...]).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._sparse_query import QueryLayout
from .checks import describe, require_bool, require_metadata, require_same_device, require_tensor, row_view
from .errors import MateTypeError, MateValueError

__all__ = [
    "Selection", "row_metadata", "lead_metadata", "logical_selection", "physical_selection", "check_compact_blocks",
    "gate_rows",
]  # fmt: skip

MAX_HINT_BLOCKS = 512  # block_indices width limit; 512 blocks x 4 + 3 tail = 2051 slots


class Selection(NamedTuple):
    """token_indices / selected_kv_indices [rows, T] and the block hint [rows, NB] (row views)."""

    token_indices: torch.Tensor | None
    selected_kv_indices: torch.Tensor | None
    block_indices: torch.Tensor | None


def _lead_text(layout: QueryLayout) -> str:
    return "[B,Q" if len(layout.lead) == 2 else "[rows"


def row_metadata(
    name: str, t: object, backend: str, query: torch.Tensor, layout: QueryLayout, width: str | None
) -> torch.Tensor:
    """Integer metadata shaped ``lead + [width]`` (or ``lead`` when width is None), as a row view."""
    return row_view(name, lead_metadata(name, t, backend, query, layout, width), len(layout.lead))


def lead_metadata(
    name: str, t: object, backend: str, query: torch.Tensor, layout: QueryLayout, width: str | None
) -> torch.Tensor:
    """Integer metadata shaped ``lead + [width]`` (or ``lead`` when width is None), as given."""
    t = require_metadata(name, t, backend, "query", query)
    rank = len(layout.lead) + (width is not None)
    if t.dim() != rank or tuple(t.shape[: len(layout.lead)]) != layout.lead:
        tail = f",{width}]" if width is not None else "]"
        raise MateValueError(
            f"{name}: got shape {list(t.shape)}; expected {_lead_text(layout)}{tail} with leading axes "
            f"{list(layout.lead)} matching query {list(query.shape)}"
        )
    return t


def _block_hint(
    block_indices: object, tokens: torch.Tensor, backend: str, query: torch.Tensor, layout: QueryLayout
) -> torch.Tensor:
    hint = row_metadata("block_indices", block_indices, backend, query, layout, "NB")
    nb, width = hint.shape[-1], tokens.shape[-1]
    if not 1 <= nb <= MAX_HINT_BLOCKS or width != 4 * nb + 3:
        raise MateValueError(
            f"block_indices / token_indices: got block_indices width NB={nb} and token_indices width T={width}; "
            f"expected 1 <= NB <= {MAX_HINT_BLOCKS} and T == 4*NB + 3 (the hint describes the four-token blocks "
            "behind token_indices plus the 3-slot tail; wider selections must omit block_indices)"
        )
    return hint


def logical_selection(
    token_indices: object,
    block_indices: object,
    assume_compact_blocks: object,
    backend: str,
    query: torch.Tensor,
    layout: QueryLayout,
) -> Selection:
    """token_indices [.., T] (required), the optional block hint and its compact-blocks contract."""
    if token_indices is None:
        hint = " (block_indices is only a hint and requires token_indices)" if block_indices is not None else ""
        raise MateValueError(
            f"token_indices: got None; expected request-local token ids {_lead_text(layout)},T] "
            f"(or selected_kv_indices for physical rows){hint}"
        )
    tokens = row_metadata("token_indices", token_indices, backend, query, layout, "T")
    hint = None if block_indices is None else _block_hint(block_indices, tokens, backend, query, layout)
    check_compact_blocks(assume_compact_blocks, hint)
    return Selection(tokens, None, hint)


def physical_selection(
    selected_kv_indices: object, assume_compact_blocks: object, backend: str, query: torch.Tensor, layout: QueryLayout
) -> Selection:
    """selected_kv_indices [rows, T] physical K/V row ids (no block hint on this path)."""
    ids = row_metadata("selected_kv_indices", selected_kv_indices, backend, query, layout, "T")
    check_compact_blocks(assume_compact_blocks, None, physical=True)
    return Selection(None, ids, None)


def check_compact_blocks(assume_compact_blocks: object, hint: torch.Tensor | None, physical: bool = False) -> bool:
    """assume_compact_blocks is a bool and, when True, a contract about block_indices: it needs them
    (and so is unavailable with selected_kv_indices, which take no block_indices)."""
    if require_bool("assume_compact_blocks", assume_compact_blocks) and hint is None:
        if physical:
            raise MateValueError(
                "assume_compact_blocks: got True with selected_kv_indices; expected False (its contract is "
                "about block_indices, which the selected_kv_indices path does not take)"
            )
        raise MateValueError(
            "assume_compact_blocks: got True without block_indices; expected False, or pass the block_indices "
            "hint whose compact-prefix contract it asserts"
        )
    return bool(assume_compact_blocks)


def gate_rows(gate: object, query: torch.Tensor, layout: QueryLayout) -> torch.Tensor | None:
    """gate [..., Hq] or [..., Hq, D] (FP32 or the query dtype) as a row view."""
    if gate is None:
        return None
    gate = require_tensor("gate", gate)
    require_same_device("gate", gate, "query", query)
    if gate.dtype not in (torch.float32, query.dtype):
        raise MateTypeError(
            f"gate: got dtype {describe(gate.dtype)}; expected float32 or the query dtype {describe(query.dtype)}"
        )
    shape = tuple(gate.shape)
    if shape not in (tuple(query.shape[:-1]), tuple(query.shape)):
        raise MateValueError(
            f"gate: got shape {list(gate.shape)}; expected query.shape[:-1] {list(query.shape[:-1])} "
            f"(one value per row and head) or query.shape {list(query.shape)} (elementwise)"
        )
    return row_view("gate", gate, len(layout.lead))
