# SPDX-License-Identifier: MIT
"""A VL text rotary's band-to-axis layout, read off transformers' own ``recomposition_frequencies`` once.

M-RoPE (Qwen2-VL, Wang et al. 2024, arXiv 2409.12191) gives every rotary band j an axis a(j) (t, h, w) and lays
the bands out in the head in the family's order (Qwen2-VL's contiguous ``mrope_section``, Qwen3-VL's interleaved
THW, ERNIE's pre-permuted table, GLM-4V's repeated pairs). transformers computes cos/sin for all three axes and then
*recomposes*: output channel c takes band J[c] of axis A[c]. When that recomposition is a pure selection, the same
tables come from one multi-axis gather (:func:`ropekit.axis_tables`: each token's row read from the spec's exact
cache at its own axis positions) followed by one ``index_select`` -- instead of three axes' tables computed and
then cut apart and concatenated by a handful of torch ops per forward (decode: 88 -> ~40 µs per rotary call).

The layout is found by probing the recomposition with marker tensors (axis ids, band ids) and confirmed on random
values; anything that is not a consistent selection (a band read from two axes, a band never read, arithmetic on
the values) yields None and the caller keeps transformers' recomposition.

Shapes: n bands, C = recomposed channels (2n for the Qwen/GLM/ERNIE text rotaries), b batch, s tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ropekit.axes import AxisMap
from ropekit.spec import RopeSpec

__all__ = ["TextAxisLayout", "text_axis_layout"]

_AXES = 3  # t, h, w


@dataclass(frozen=True)
class TextAxisLayout:
    """spec: the frequencies with the probed band-to-axis map; full: [C] band of each output channel;
    half: [n] band of each channel of ropekit's half tables (None when it is 0 .. n-1)."""

    spec: RopeSpec
    full: torch.Tensor
    half: torch.Tensor | None


def text_axis_layout(
    recompose: Callable[[torch.Tensor], torch.Tensor], freqs: tuple[float, ...], pairs: bool
) -> TextAxisLayout | None:
    """The layout of ``recompose`` ([3, b, s, n] -> [b, s, C]) over bands with ``freqs``, or None (see above).

    ``pairs``: the family's tables repeat each band for an interleaved pair (ropekit's half table is every other
    channel) rather than concatenating two halves (the first C / 2 channels).
    """
    n = len(freqs)
    shape = (_AXES, 1, 1, n)
    axis_marker = torch.arange(_AXES, dtype=torch.float64).view(_AXES, 1, 1, 1).expand(shape)
    band_marker = torch.arange(n, dtype=torch.float64).expand(shape)
    try:
        with torch.no_grad():
            a = recompose(axis_marker.contiguous()).reshape(-1)
            j = recompose(band_marker.contiguous()).reshape(-1)
            values = torch.rand(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
            mixed = recompose(values).reshape(-1)
    except Exception:  # noqa: BLE001 - a recomposition that cannot run on markers keeps transformers' own path
        return None
    if a.numel() != 2 * n or j.numel() != 2 * n or mixed.numel() != 2 * n:
        return None
    axis_of, band_of = a.round().long(), j.round().long()
    if not (torch.equal(axis_of.double(), a) and torch.equal(band_of.double(), j)):
        return None
    if not (0 <= int(axis_of.min()) and int(axis_of.max()) < _AXES and 0 <= int(band_of.min())):
        return None
    if int(band_of.max()) >= n:
        return None
    if not torch.equal(mixed, values.reshape(_AXES, n)[axis_of, band_of]):
        return None  # not a pure selection
    band_axis = [-1] * n
    for ax, band in zip(axis_of.tolist(), band_of.tolist()):
        if band_axis[band] not in (-1, ax):
            return None  # one band read from two axes
        band_axis[band] = ax
    if -1 in band_axis:
        return None
    spec = RopeSpec(head_dim=2 * n, freqs=freqs, axes=AxisMap("explicit", tuple(band_axis)))
    half = band_of[0::2] if pairs else band_of[:n]
    identity = torch.equal(half, torch.arange(n))
    return TextAxisLayout(spec, band_of, None if identity else half.contiguous())
