"""The ``backend`` argument of the ``mate_reference`` entry points (reference only)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TypeVar

from mate_core.checks import check_backend
from mate_core.errors import MateValueError

__all__ = ["documents_reference_errors", "require_reference"]

F = TypeVar("F", bound=Callable[..., object])

# What every entry point of this package raises (validation through mate_core, then the backend rule).
_RAISES = """
Raises
------
ValueError
    :class:`mate_core.MateValueError`: invalid shapes, devices, layouts, metadata or scaling, or a
    ``backend`` other than ``"reference"``.
TypeError
    :class:`mate_core.MateTypeError`: wrong Python types or unsupported dtypes.
"""


def documents_reference_errors(fn: F) -> F:
    """Append the Raises section the ``mate_reference`` entry points share to ``fn``'s docstring."""
    fn.__doc__ = inspect.cleandoc(fn.__doc__ or "") + "\n" + _RAISES
    return fn


def require_reference(backend: object, entry: str) -> None:
    """``backend`` of a ``mate_reference`` entry point: only ``"reference"`` (ValueError otherwise)."""
    if check_backend(backend) != "reference":
        raise MateValueError(
            f"backend: got {backend!r}; mate_reference.{entry} runs only backend='reference'. "
            f"Use mate.{entry} for native kernels"
        )
