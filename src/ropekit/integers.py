# SPDX-License-Identifier: MIT
"""Integer and real arguments: Python ints and numpy integers alike (a length taken from ``np.arange`` or a config
array is a length), never a bool, a float or a string; real numbers (Python floats and ints, numpy floats) alike,
never a bool.

Used by the argument checks across ropekit (analysis, positions, modules, specs, scaling schemes) so that
``rotations(spec, np.int64(4096))`` and ``rotations(spec, 4096)`` behave the same, ``RopeSpec(np.int64(128),
base=np.float32(1e4))`` equals ``RopeSpec(128, base=1e4)`` (the fields hold plain Python ints and floats), and the
error for a bad value names the argument and the value (:func:`shown` shortens a huge one).
"""

from __future__ import annotations

import math
import numbers
import operator

import numpy as np

__all__ = ["INT64_SPAN", "as_int", "as_real", "past_float64", "shown", "whole"]

#: 2**63: positions are int64, so a sequence length (the largest position + 1) is at most this
INT64_SPAN = 1 << 63


def shown(value: object, limit: int = 40) -> str:
    """``repr(value)``, shortened to about ``limit`` characters for a huge value (a 400-digit int is shown as its
    first and last digits and its digit count), for error messages."""
    text = repr(value)
    if len(text) <= limit:
        return text
    if isinstance(value, int) and not isinstance(value, bool):
        digits = text.lstrip("-")
        return f"{text[: len(text) - len(digits)]}{digits[:8]}...{digits[-4:]} ({len(digits)} digits)"
    return f"{text[: limit - 3]}..."


def as_int(value: object) -> int | None:
    """``value`` as a Python int when it is an integer (``int``, a numpy integer or anything with ``__index__``,
    not a bool); else None."""
    if isinstance(value, (bool, np.bool_)):
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None


def as_real(value: object) -> float | None:
    """``value`` as a finite Python float when it is a real number (``int``, ``float``, numpy integers and floats,
    any :class:`numbers.Real`; not a bool) whose magnitude float64 can hold; else None (non-finite values, ints
    beyond the float64 range and non-numbers alike: the caller's message states the range)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return None
    try:
        x = float(value)
    except (OverflowError, ValueError, TypeError):  # an int past the float64 range (~1.8e308)
        return None
    return x if math.isfinite(x) else None


def past_float64(value: object) -> str:
    """A note for an int too large to be a float (``float()`` would overflow), else "": appended to a "must be a
    finite number" message, so that it states why a huge int is refused."""
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        try:
            float(value)
        except OverflowError:
            return " (beyond the float64 range, ~1.8e308)"
    return ""


def whole(value: object, low: int, message: str, high: int | None = None) -> int:
    """``value`` as a Python int when it is an integer (``int``, a numpy integer or anything with ``__index__``, not a
    bool) in ``[low, high]`` (``high`` None: no upper bound); else ``ValueError(message)`` (the caller's message names
    the argument and value)."""
    n = as_int(value)
    if n is None or n < low or (high is not None and n > high):
        raise ValueError(message)
    return n
