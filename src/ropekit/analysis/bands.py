# SPDX-License-Identifier: MIT
"""What a RoPE configuration does at a given context length, band by band.

- Per band i (seed 004 sections 3.3, 7.4, 12.3): theta_i, wavelength 2*pi/theta_i, rotations completed within the
  context L (L * theta_i / 2*pi), and whether the band wraps (completes at least one full turn inside L).
- Critical dimension (Liu et al. 2024, "Scaling Laws of RoPE-based Extrapolation", arXiv 2310.05209):
  d_extra = 2 * ceil((d/2) * log_base(L / 2*pi)), clipped to [0, d] -- the leading dims whose period fits inside the
  training context; T_extra = 2*pi * base^(d_extra/d) is the length beyond which the next band sees unseen angles.
- Base lower bound (Men et al. 2024, "Base of RoPE Bounds Context Length", arXiv 2405.14591): the smallest base b
  with B(m) = sum_i cos(m * b^(-2i/d)) >= 0 for every 0 <= m <= L. The passing bases form windows, some narrower
  than 0.1%, so the search proves that the bases it steps over fail (:mod:`ropekit.analysis.base_scan`).

Shapes: n bands, L context length.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

import torch

from ropekit.analysis.base_scan import TINY, BoundScan, bound_rows, theta_of
from ropekit.analysis.threads import single_thread
from ropekit.integers import whole
from ropekit.spec import RopeSpec, require_spec

__all__ = [
    "Band",
    "band_table",
    "base_bound_margin",
    "base_lower_bound",
    "critical_dim",
    "extrapolation_bound",
]

_TWO_PI = 2.0 * math.pi


@dataclass(frozen=True)
class Band:
    """One 2-D band at context length L."""

    index: int
    theta: float
    wavelength: float  # tokens per full turn; inf for a zero (p-RoPE) frequency
    rotations: float  # full turns completed within L
    wraps: bool  # rotations >= 1: every relative angle in [0, 2*pi) is seen during training

    def as_dict(self) -> dict[str, float | int | bool]:
        d = asdict(self)
        if math.isinf(self.wavelength):
            d["wavelength"] = None
        return d


def band_table(spec: RopeSpec, context: int) -> list[Band]:
    """The bands of ``spec`` (after p-RoPE and the phase map at ``context``) at context length ``context``."""
    require_spec(spec)
    _check_context(context)
    theta = spec.frequencies(context).tolist()
    out = []
    for i, t in enumerate(theta):
        wl = _TWO_PI / t if t > 0 else math.inf
        rot = context * t / _TWO_PI
        out.append(Band(i, t, wl, rot, rot >= 1.0))
    return out


def critical_dim(rotary_dim: int, base: float, context: int) -> int:
    """Liu et al.'s critical dimension d_extra (number of leading channels, even), clipped to [0, rotary_dim].

    Raises:
        ValueError: ``rotary_dim`` not a positive even int, ``base`` not a finite number > 1, ``context`` not a
            positive int (each named with its value).
    """
    _check_rotary_dim(rotary_dim)
    _check_base(base)
    _check_context(context)
    x = (rotary_dim / 2) * math.log(context / _TWO_PI) / math.log(base)
    return int(min(rotary_dim, max(0, 2 * math.ceil(x - 1e-12))))


def extrapolation_bound(rotary_dim: int, base: float, context: int) -> float:
    """T_extra = 2*pi * base^(d_extra / d): Liu et al.'s predicted extrapolation limit (inf if every dim wraps).

    Raises:
        ValueError: as :func:`critical_dim`.
    """
    de = critical_dim(rotary_dim, base, context)
    return math.inf if de >= rotary_dim else _TWO_PI * base ** (de / rotary_dim)


def base_bound_margin(
    rotary_dim: int, base: float, context: int, *, chunk: int = 256
) -> tuple[float, int | None]:
    """min over 0 <= m <= L of B(m) / (d/2), and the first m with B(m) < 0 (None if the condition holds).

    B(m) = sum_i cos(m theta_i) is evaluated for every m in float64 by angle addition on a K x K grid
    (m = a K + k, K = ceil(sqrt(L + 1))): cos(m theta) = cos(aK theta) cos(k theta) - sin(aK theta) sin(k theta),
    so B for ``chunk`` rows of the grid is two small matrix products instead of (L + 1) * d/2 cosines.

    Raises:
        ValueError: ``rotary_dim`` not a positive even int, ``base`` not a finite number > 1, ``context`` or
            ``chunk`` not a positive int (each named with its value).
    """
    _check_rotary_dim(rotary_dim)
    _check_base(base)
    _check_context(context)
    _check_positive_int("chunk", chunk)
    return _margin(rotary_dim, float(base), context, chunk)


def _margin(rotary_dim: int, base: float, context: int, chunk: int = 256) -> tuple[float, int | None]:
    table = bound_rows(theta_of(rotary_dim, base), context)
    n = rotary_dim // 2
    worst, first = math.inf, None
    rows = context // (math.isqrt(context) + 1) + 1
    for start in range(0, rows, chunk):
        b, m = table.values(start, min(rows, start + chunk))
        b, m = b.flatten(), m.flatten()
        worst = min(worst, float(b.min()) / n)
        neg = torch.nonzero(b < 0)
        if first is None and neg.numel():
            first = int(m[neg[0, 0]])
    return worst, first


#: contexts up to this are searched exactly by default (every base below the result proven to fail)
EXACT_CONTEXT = 131072
#: default resolution above EXACT_CONTEXT (relative width of the pass windows the search may step over)
COARSE_RESOLUTION = 1e-3


def base_lower_bound(
    rotary_dim: int, context: int, *, resolution: float | None = None, max_base: float = 1e15
) -> float | None:
    """The smallest base b satisfying Men et al.'s condition B(m) >= 0 for 0 <= m <= ``context``; None if the
    search finds none up to ``max_base`` (exact with resolution 0; with a coarse ``resolution`` a pass window
    narrower than it, the last one cut short at ``max_base`` included, may be stepped over).

    The condition is not monotone in the base: the passing bases form windows, some narrow (d 128, L 1024: the
    result is 4293.44; 4330.08 passes, 4330.52 fails, 5602.2 passes; d 64, L 512: 3438.91 and 3450.96 pass,
    3451.31 fails; d 128, L 16384: the first window, at 231 644, is 0.034% wide). So a base above the result can
    still fail: check a concrete base with :func:`base_bound_margin`. What is guaranteed (see :mod:`ropekit.analysis.base_scan` for the method):

    - the result passes (:func:`base_bound_margin` finds no violation at it), and
    - every base below it fails -- or meets the condition by less than delta = 2e-9 + 2e-15 (d/2)(L+1), the
      float64 rounding of B -- except possibly bases in pass windows narrower than ``resolution`` (relative:
      windows [a, a') with ln(a' / a) < resolution; with resolution 0, narrower than 1e-12 ln b). The tests
      check papers.md section 10 (a table computed on a ~2% log grid): each value passes and is at least the
      result, within a grid step of it except for d 128 at L 4096 and 32768, where the grid stepped over a
      first window narrower than 1%.

    Args:
        rotary_dim: rotated dims d (positive, even).
        context: the context length L (positive int; m runs over 0..L).
        resolution: see above; default 0 (exact) for ``context`` <= :data:`EXACT_CONTEXT` (131072: ~2 s there
            for d 128-256 on one core, ~0.3 s at 32768), else :data:`COARSE_RESOLUTION` (0.1%: ~2.5 s at 262144,
            ~8 s at 1M tokens; proving every step costs ~2x more there and grows about as L^2).
        max_base: give up above this base.

    Returns:
        The base, or None. For context 1 (m = 0 and 1 only: every base > 1 passes) the result is 1.0, the
        infimum, which :func:`base_bound_margin` itself refuses (it needs a base > 1).

    Raises:
        ValueError: a non-positive or odd ``rotary_dim``, a non-positive ``context``, a negative or non-finite
            ``resolution``, ``max_base`` not a finite number > 1 (each named with its value).
    """
    _check_rotary_dim(rotary_dim)
    _check_context(context)
    if resolution is None:
        resolution = _default_resolution(context)
    ok = isinstance(resolution, (int, float)) and not isinstance(resolution, bool)
    if not (ok and math.isfinite(resolution) and resolution >= 0):
        raise ValueError(f"resolution must be a finite number >= 0, got {resolution!r}")
    _check_base(max_base, "max_base")
    with single_thread():
        return _lower_bound(rotary_dim, context, float(resolution), float(max_base))


@functools.lru_cache(maxsize=256)  # pure function of numbers; inspect asks for the same bound repeatedly
def _lower_bound(rotary_dim: int, context: int, resolution: float, max_base: float) -> float | None:
    # Every base failing for a shorter context fails for L too (it has the same m and more), so start at the bound
    # of the largest power of two below L (shared by every context up to twice that). The shorter context is
    # searched at least as finely (its guarantee then carries over) and, by default, as base_lower_bound searches
    # it, so that the cached result is shared.
    start = 0.0
    if context > 64:
        shorter = 1 << (context - 1).bit_length() - 1
        below = _lower_bound(rotary_dim, shorter, min(resolution, _default_resolution(shorter)), max_base)
        if below is None:
            return None
        start = math.log(below)
    scan = BoundScan(rotary_dim, context)
    u_max = math.log(max_base)
    u = scan.walk(start, resolution, u_max)
    while u is not None and _margin(rotary_dim, math.exp(u), context)[1] is not None:
        u = scan.walk(u + TINY * max(1.0, u), resolution, u_max)  # last-bit disagreement at an edge: go on
    return None if u is None else math.exp(u)


def _default_resolution(context: int) -> float:
    return 0.0 if context <= EXACT_CONTEXT else COARSE_RESOLUTION


def _check_rotary_dim(rotary_dim: object) -> None:
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, int) or rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(f"rotary_dim must be a positive even int, got {rotary_dim!r}")


def _check_base(base: object, name: str = "base") -> None:
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not (math.isfinite(base) and base > 1):
        raise ValueError(f"{name} must be a finite number > 1, got {base!r}")


def _check_positive_int(name: str, value: object) -> None:
    value = whole(value, 1, f"{name} must be a positive int, got {value!r}")


def _check_context(context: object) -> None:
    _check_positive_int("context", context)
