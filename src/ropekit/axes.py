# SPDX-License-Identifier: MIT
"""Band-to-axis assignment: which position axis each rotary band (slot) reads its position from.

Multi-axis RoPE (M-RoPE of Qwen2-VL, Wang et al. 2024, arXiv 2409.12191; 2-D axial RoPE of Heo et al. 2024,
arXiv 2403.13298; VideoRoPE, Wei et al. 2025, arXiv 2502.05173) keeps the 1-D recipe -- band j turns by
``pos * theta_j`` -- but band j reads ``pos`` from axis ``a(j)`` (t, h, w; or row, col). The frequencies stay the
spec's; only the map ``a`` is new, and it is all this file holds (``shared/reference/multiaxis.md`` section 1.1).

Slots are numbered ``j = 0 .. n-1`` (n = rotary_dim // 2, small j = high frequency). The pairing is the spec's
layout and independent of the map: half-split channels ``(j, j + n)`` and interleaved channels ``(2j, 2j + 1)``
both belong to slot j, so "the same sections for both halves of a half-split head" holds by construction.

Schemes (``sections`` are given in the order of ``names``):

- ``"contiguous"``: ``sections[0]`` slots on axis 0, then ``sections[1]`` on axis 1, ... (Qwen2/2.5-VL
  ``mrope_section`` ``[16, 24, 24]``; GLM-4V ``[8, 12, 12]``; the 2-D halves of RoPE-ViT axial, DINOv3, Qwen ViT,
  Llama 4 vision, and of Pixtral in its HF layout).
- ``"interleaved"``: slots cycle over the axes; axis ``a >= 1`` takes ``j = a mod A`` while ``j < A * sections[a]``,
  every other slot is axis 0 (Qwen3-VL ``mrope_interleaved``: ``THW`` x 20 then ``TTTT``; with two equal
  sections this is the even/odd split of Pixtral's native layout).
- ``"lta"`` (low-frequency temporal allocation): axes 1 and 2 alternate over the first ``sections[1] +
  sections[2]`` slots (axis 1 on even j), axis 0 takes the ``sections[0]`` lowest frequencies at the end
  (VideoRoPE: ``HW`` x 24 then ``T`` x 16; ERNIE-4.5-VL: ``HW`` x 22 then ``T`` x 20).
- ``"explicit"``: ``sections`` is the per-slot axis index itself.

Shapes: A = number of axes, n = number of slots (bands).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Literal

from ropekit.integers import as_int

__all__ = ["SCHEMES", "AxisMap", "Scheme"]

Scheme = Literal["contiguous", "interleaved", "lta", "explicit"]
SCHEMES: tuple[str, ...] = ("contiguous", "interleaved", "lta", "explicit")


def _is_int(x: object) -> bool:
    """An integer (int, a numpy integer, anything with ``__index__``; not a bool), as across ropekit."""
    return as_int(x) is not None


@dataclass(frozen=True)
class AxisMap:
    """Frozen, hashable band-to-axis assignment.

    Args:
        scheme: "contiguous", "interleaved", "lta" or "explicit" (see the module docstring).
        sections: slots per axis, in the order of ``names`` (for "explicit": the axis index of every slot).
        names: one short name per axis, e.g. ("t", "h", "w") or ("row", "col"); distinct, non-empty.

    Raises:
        ValueError: naming the field and value (unknown scheme, negative sections, wrong counts, ...).

    Example:
        >>> AxisMap.contiguous((2, 3, 3)).letters()
        'TTHHHWWW'
    """

    scheme: Scheme
    sections: tuple[int, ...]
    names: tuple[str, ...] = ("t", "h", "w")
    slots: tuple[int, ...] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ValueError(f"AxisMap.scheme must be one of {SCHEMES}, got {self.scheme!r}")
        try:
            names = tuple(self.names)
        except TypeError:
            raise ValueError(f"AxisMap.names must be a sequence of strings, got {self.names!r}") from None
        if (
            len(names) < 1
            or not all(isinstance(s, str) and s for s in names)
            or len(set(names)) != len(names)
        ):
            raise ValueError(f"AxisMap.names must be distinct non-empty strings, got {self.names!r}")
        object.__setattr__(self, "names", names)
        try:
            sec = tuple(self.sections)
        except TypeError:
            raise ValueError(f"AxisMap.sections must be a sequence of ints, got {self.sections!r}") from None
        if not sec or not all(_is_int(s) and s >= 0 for s in sec):
            raise ValueError(f"AxisMap.sections must be non-negative ints, got {self.sections!r}")
        sec = tuple(operator.index(s) for s in sec)  # plain ints (numpy ints too): equality, hashing, JSON
        object.__setattr__(self, "sections", sec)
        a = len(names)
        if self.scheme == "explicit":
            bad = [s for s in sec if s >= a]
            if bad:
                raise ValueError(
                    f"AxisMap.sections (explicit per-slot axes) must be < n_axes={a}, got {bad[0]} in {sec!r}"
                )
            slots = sec
        else:
            if len(sec) != a:
                raise ValueError(
                    f"AxisMap.sections must have one entry per axis {names}, got {len(sec)}: {sec!r}"
                )
            slots = _SLOT_RULES[self.scheme](sec)
        object.__setattr__(self, "slots", slots)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def contiguous(
        cls, sections: tuple[int, ...] | list[int], names: tuple[str, ...] = ("t", "h", "w")
    ) -> AxisMap:
        """Consecutive blocks of slots per axis (Qwen2-VL ``mrope_section``, 2-D halves)."""
        return cls("contiguous", tuple(sections), tuple(names))

    @classmethod
    def interleaved(
        cls, sections: tuple[int, ...] | list[int], names: tuple[str, ...] = ("t", "h", "w")
    ) -> AxisMap:
        """Slots cycling over the axes (Qwen3-VL ``mrope_interleaved``; 2-D even/odd)."""
        return cls("interleaved", tuple(sections), tuple(names))

    @classmethod
    def lta(cls, sections: tuple[int, ...] | list[int], names: tuple[str, ...] = ("t", "h", "w")) -> AxisMap:
        """VideoRoPE / ERNIE-4.5-VL: spatial axes alternate on the high frequencies, time takes the lowest."""
        return cls("lta", tuple(sections), tuple(names))

    @classmethod
    def halves(cls, n_bands: int, names: tuple[str, str] = ("row", "col")) -> AxisMap:
        """2-D: the first ``n_bands // 2`` slots on axis 0, the rest on axis 1 (RoPE-ViT axial, DINOv3, Qwen ViT)."""
        if not _is_int(n_bands) or n_bands < 2 or n_bands % 2:
            raise ValueError(f"AxisMap.halves needs an even n_bands >= 2, got {n_bands!r}")
        half = operator.index(n_bands) // 2
        return cls("contiguous", (half, half), tuple(names))

    @classmethod
    def even_odd(cls, n_bands: int, names: tuple[str, str] = ("row", "col")) -> AxisMap:
        """2-D: even slots on axis 0, odd slots on axis 1 (Pixtral's native layout, the paper's alternation)."""
        if not _is_int(n_bands) or n_bands < 2 or n_bands % 2:
            raise ValueError(f"AxisMap.even_odd needs an even n_bands >= 2, got {n_bands!r}")
        half = operator.index(n_bands) // 2
        return cls("interleaved", (half, half), tuple(names))

    # ------------------------------------------------------------------ derived
    @property
    def n_axes(self) -> int:
        """Number of position axes A."""
        return len(self.names)

    @property
    def n_bands(self) -> int:
        """Number of slots n the map covers (must equal the spec's rotary_dim // 2)."""
        return len(self.slots)

    def bands_of(self, axis: int | str) -> tuple[int, ...]:
        """Slots that read axis ``axis`` (an index or a name), in increasing order."""
        a = self.names.index(axis) if isinstance(axis, str) and axis in self.names else axis
        if not _is_int(a) or not 0 <= a < self.n_axes:  # type: ignore[operator]
            raise ValueError(f"axis must be one of {self.names} or an index < {self.n_axes}, got {axis!r}")
        return tuple(j for j, s in enumerate(self.slots) if s == a)

    def as_dict(self) -> dict[str, object]:
        """JSON data: scheme, sections, names and the slot letters (the CLI's and the report's ``axes``)."""
        return {
            "scheme": self.scheme,
            "sections": list(self.sections),
            "names": list(self.names),
            "letters": self.letters(),
        }

    def letters(self) -> str:
        """One upper-case letter per slot: the first letter of its axis name (e.g. "TTHHWW")."""
        return "".join(self.names[s][0].upper() for s in self.slots)

    def channel_axes(self, layout: str) -> tuple[int, ...]:
        """Axis of every rotary channel (length 2n) in the given layout ("half" or "interleaved")."""
        if layout == "half":
            return self.slots + self.slots
        if layout == "interleaved":
            return tuple(s for s in self.slots for _ in range(2))
        raise ValueError(f"layout must be 'half' or 'interleaved', got {layout!r}")


def _contiguous(sec: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(a for a, s in enumerate(sec) for _ in range(s))


def _interleaved(sec: tuple[int, ...]) -> tuple[int, ...]:
    a, n = len(sec), sum(sec)
    slots = [0] * n
    for ax in range(1, a):
        for j in range(ax, a * sec[ax], a):
            if j >= n:
                raise ValueError(
                    f"AxisMap.sections {sec!r}: the interleaved cycle puts axis {ax} at slot {j} >= {n} slots; "
                    f"axis 0 needs at least as many slots as every other axis"
                )
            slots[j] = ax
    got = tuple(slots)
    counts = tuple(got.count(ax) for ax in range(a))
    if counts != sec:  # pragma: no cover - guarded by the bound check above
        raise ValueError(f"AxisMap.sections {sec!r} cannot be interleaved (got counts {counts})")
    return got


def _lta(sec: tuple[int, ...]) -> tuple[int, ...]:
    if len(sec) != 3 or sec[1] != sec[2]:
        raise ValueError(
            f"AxisMap 'lta' needs three sections (time, axis1, axis2) with equal spatial sections, got {sec!r}"
        )
    spatial = tuple(1 + (j % 2) for j in range(2 * sec[1]))
    return spatial + (0,) * sec[0]


_SLOT_RULES = {"contiguous": _contiguous, "interleaved": _interleaved, "lta": _lta}
