# SPDX-License-Identifier: MIT
"""ERNIE-4.5-VL's band split in its configs: ``freq_allocation`` (the bands given to time, what ERNIE's remote code,
vLLM and SGLang read) and its transformers ``mrope_section`` equivalent (``shared/reference/multiaxis.md`` section
7). Read by :mod:`ropekit.hf.config_vl` (which re-exports :func:`ernie_sections`) and :mod:`ropekit.hf.patch_vl`.
"""

from __future__ import annotations

from typing import Any

from ropekit.integers import as_int

__all__ = ["ernie_sections"]


def _freq_allocation(text: dict[str, Any], rp: dict[str, Any], key: str) -> int | None:
    """ERNIE-4.5-VL's ``freq_allocation`` (top level of the text config, or in the rope dict: popped), validated."""
    top, inner = text.get("freq_allocation"), rp.pop("freq_allocation", None)
    if top is not None and inner is not None and top != inner:
        raise ValueError(f"freq_allocation={top!r} (top level) and {key}.freq_allocation={inner!r} disagree")
    fa = top if top is not None else inner
    n = None if fa is None else as_int(fa)  # ints and numpy ints alike (not bools)
    if fa is not None and (n is None or n < 0):
        raise ValueError(f"freq_allocation must be a non-negative int (bands given to time), got {fa!r}")
    return n


def ernie_sections(freq_allocation: int, n_bands: int) -> tuple[int, int, int]:
    """ERNIE-4.5-VL's ``freq_allocation`` as transformers' ``mrope_section`` ``[h, w, t]``.

    ERNIE's own code (``RopeEmbedding.apply_rotary_3d``; vLLM / SGLang ``Ernie4_5_VLRotaryEmbedding``) gives time
    the last ``freq_allocation`` bands (the lowest frequencies) and alternates the other ``n - freq_allocation``
    between height (even bands) and width (odd bands): ``h = w = (n - freq_allocation) / 2``, ``t = freq_allocation``
    (released checkpoints: 20 of 64 -> [22, 22, 20], what transformers' converter writes).

    Raises:
        ValueError: ``freq_allocation`` above ``n`` or leaving an odd number of spatial bands (h and w must be equal).
    """
    rest = n_bands - freq_allocation
    if rest < 0:
        raise ValueError(f"freq_allocation={freq_allocation} exceeds the {n_bands} rotary bands")
    if rest % 2:
        raise ValueError(
            f"freq_allocation={freq_allocation} cannot split {n_bands} bands: ERNIE-4.5-VL alternates the other "
            f"{rest} bands between height and width, which needs an even number"
        )
    return rest // 2, rest // 2, freq_allocation
