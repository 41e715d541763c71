"""Shared assertion helper of the validation tests: which argument an error message blames."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable


def names_argument(message: str, name: str, *planners: Callable[..., object]) -> bool:
    """Whether ``message`` blames ``name``. A name that is an argument of one of ``planners``
    must appear as a word in the message's head (before the first colon): a plain substring
    test passes for "q" anywhere ("require"). Other expected texts (a suggested function, a
    limit) may appear anywhere."""
    arguments = set().union(*(inspect.signature(p).parameters for p in planners))
    if name not in arguments:
        return name in message
    return re.search(rf"\b{re.escape(name)}\b", message.split(":", 1)[0]) is not None
