"""Exception types raised by MATE-QSA.

Every error MATE raises for a bad argument is a plain ``ValueError`` or
``TypeError`` subclass, so callers can catch the builtin types; the subclasses
exist so tests and frameworks can tell the families apart.
"""

from __future__ import annotations

__all__ = [
    "MateError",
    "MateValueError",
    "MateTypeError",
    "LayoutError",
    "UnsupportedTargetError",
    "BackendUnavailableError",
    "GraphCaptureError",
]


class MateError(Exception):
    """Base class of every exception MATE-QSA raises itself (errors from torch, TileLang or the
    CUDA driver pass through unchanged)."""


class MateValueError(MateError, ValueError):
    """An argument has an invalid value, shape, layout or combination."""


class MateTypeError(MateError, TypeError):
    """An argument has an unsupported Python type or tensor/metadata dtype."""


class LayoutError(MateValueError):
    """A tensor view breaks the native vector-load rule: a unit feature stride, and a 16-byte
    aligned start and outer strides. Other view problems (overlaps, non-positive strides, a
    padded view that is not a zero-copy row view) raise :class:`MateValueError`."""


class UnsupportedTargetError(MateValueError):
    """The native backend was asked to run on a device it does not support.

    Raised before any compilation, naming the device, its capability and the
    supported targets.
    """


class BackendUnavailableError(MateError, RuntimeError):
    """The requested backend cannot run in this installation (e.g. TileLang is missing)."""


class GraphCaptureError(MateError, RuntimeError):
    """A native call made during a CUDA-graph capture that would not be recorded correctly: the
    capturing stream belongs to another device than the call's tensors, or the call is a device's
    first sparse-attention call (run it once eagerly before capturing)."""
