"""The ``backend`` argument of the ``mate_reference`` entry points (reference only)."""

from __future__ import annotations

from mate_core.checks import check_backend
from mate_core.errors import MateValueError

__all__ = ["require_reference"]


def require_reference(backend: object, entry: str) -> None:
    """``backend`` of a ``mate_reference`` entry point: only ``"reference"`` (ValueError otherwise)."""
    if check_backend(backend) != "reference":
        raise MateValueError(
            f"backend: got {backend!r}; mate_reference.{entry} runs only backend='reference'. "
            f"Use mate.{entry} for native kernels"
        )
