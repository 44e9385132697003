# SPDX-License-Identifier: MIT
"""Integer arguments: Python ints and numpy integers alike (a length taken from ``np.arange`` or a config array is a
length), never a bool, a float or a string.

Used by the argument checks across ropekit (analysis, positions, modules) so that ``rotations(spec, np.int64(4096))``
and ``rotations(spec, 4096)`` behave the same, and the error for a bad value names the argument and the value.
"""

from __future__ import annotations

import operator

import numpy as np

__all__ = ["whole"]


def whole(value: object, low: int, message: str) -> int:
    """``value`` as a Python int when it is an integer (``int``, a numpy integer or anything with ``__index__``, not a
    bool) and at least ``low``; else ``ValueError(message)`` (the caller's message names the argument and value)."""
    if isinstance(
        value, (bool, np.bool_)
    ):  # one error class for every bad value, as the callers' messages say
        raise ValueError(message)  # noqa: TRY004
    try:
        n = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(message) from None
    if n < low:
        raise ValueError(message)
    return n
