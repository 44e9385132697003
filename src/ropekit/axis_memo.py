# SPDX-License-Identifier: MIT
"""Memories of multi-axis tables across a model's layers: one positions tensor, recognised unchanged.

A model's L attention layers rotate with the same positions tensor in one forward; the first call builds the
per-token tables (:mod:`ropekit.axis_tables`), the others reuse them. A memory holds the tensor object itself (so
its storage cannot pass to another tensor), its version counter and a copy of its values (:func:`_stamp`): writes
that skip the counter (a ``torch.from_numpy`` buffer refilled in place, ``.data``, DLPack) are still seen. Never
under ``torch.compile``; inference and meta tensors are never memoised.

Shapes: A axes, P any position shape, n bands.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch

__all__ = ["equal_row_memo", "memo_hit", "remember_equal_row"]


#: attribute of a Rotary holding the per-token tables of the last positions tensor it gathered for
_MEMO = "_ropekit_axis_memo"


def _version(t: torch.Tensor) -> int | None:
    try:
        return int(t._version)
    except RuntimeError:  # inference tensors track no version: never memoised
        return None


def _stamp(positions: torch.Tensor) -> tuple[int, Any] | None:
    """What a memory keeps of ``positions`` to recognise it unchanged: its version counter and a copy of its values
    (a NumPy copy on the CPU: torch's copy and comparison of a few thousand ids run on OpenMP threads that stall
    on a busy machine). None: not memoised (inference and meta tensors, under ``torch.compile``)."""
    v = _version(positions)
    if v is None or positions.device.type == "meta" or torch.compiler.is_compiling():
        return None
    if positions.device.type == "cpu":
        return v, positions.detach().numpy().copy()
    return v, positions.detach().clone()


def _same_values(copy: Any, positions: torch.Tensor) -> bool:
    """``positions`` holds the values of ``copy`` (from :func:`_stamp`), in the same shape and dtype."""
    if isinstance(copy, np.ndarray):
        if positions.device.type != "cpu":
            return False
        now = positions.detach().numpy()
        return bool(copy.shape == now.shape and copy.dtype == now.dtype and (copy == now).all())
    if copy.device != positions.device or copy.dtype != positions.dtype:
        return False
    return bool(torch.equal(copy, positions))


def _fresh(memo: tuple[Any, ...] | None, positions: object) -> bool:
    """A memory ``(positions, stamp, ...)`` (:func:`_stamp`) still holds for ``positions``: the very same tensor
    object (held by the memory, so its storage cannot pass to another tensor), the same version counter, and the
    same values. The values are compared too because some writes do not move the version counter: through a NumPy
    array that shares the memory (``torch.from_numpy``), through ``.data``, DLPack or another library's kernel.
    Never under ``torch.compile``; inference and meta tensors are never memoised."""
    if memo is None or memo[0] is not positions or torch.compiler.is_compiling():
        return False
    pos = cast(torch.Tensor, positions)
    v = _version(pos)
    return v is not None and memo[1][0] == v and _same_values(memo[1][1], pos)


def memo_hit(rotary: torch.nn.Module, positions: object) -> tuple[Any, ...] | None:
    """The tables :func:`rotary_forward_axes` gathered for this very positions tensor, if it is unchanged since.

    A model's L attention layers call one Rotary with the same positions tensor in one forward: the first call
    gathers the per-token tables, the others reuse them. The key is the tensor object itself (held, so its memory
    cannot be reused by another tensor), its version counter and values (:func:`_fresh`) and the module's device.
    Never under ``torch.compile``.
    """
    memo = rotary.__dict__.get(_MEMO)
    return memo if _fresh(memo, positions) and memo[2] == rotary.inv_freq.device else None  # type: ignore[index]


#: attribute of a Rotary holding the last positions tensor found to have every axis equal, and its row 0
_EQUAL = "_ropekit_axis_equal"


def equal_row_memo(rotary: torch.nn.Module, positions: object) -> torch.Tensor | None:
    """Row 0 of this very positions tensor if an earlier call found every axis equal and it is unchanged since
    (same object, version counter and values: :func:`_fresh`): the other layers of a decoding step skip the
    row comparison. Never under ``torch.compile``."""
    memo = rotary.__dict__.get(_EQUAL)
    return memo[2] if _fresh(memo, positions) else None  # type: ignore[index]


def remember_equal_row(rotary: torch.nn.Module, positions: torch.Tensor, row: torch.Tensor) -> None:
    """Record that ``positions`` has every axis equal (``row`` is its row 0), for :func:`equal_row_memo`."""
    stamp = _stamp(positions)
    if stamp is not None:
        rotary.__dict__[_EQUAL] = (positions, stamp, row)
