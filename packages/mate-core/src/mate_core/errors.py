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
]


class MateError(Exception):
    """Base class of every exception raised by MATE-QSA."""


class MateValueError(MateError, ValueError):
    """An argument has an invalid value, shape, layout or combination."""


class MateTypeError(MateError, TypeError):
    """An argument has an unsupported Python type or tensor/metadata dtype."""


class LayoutError(MateValueError):
    """A tensor view violates a native kernel's memory-layout rule."""


class UnsupportedTargetError(MateValueError):
    """The native backend was asked to run on a device it does not support.

    Raised before any compilation, naming the device, its capability and the
    supported targets.
    """


class BackendUnavailableError(MateError, RuntimeError):
    """The requested backend cannot run in this installation (e.g. TileLang is missing)."""
