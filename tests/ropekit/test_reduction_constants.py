"""The per-band constants of the exact reduction (ropekit.reduction.band_constants) against their definition.

For each float64 frequency theta and j = 0, 1: ``W_j = frac(2^(32 j) theta / (2 pi))`` split as ``A_j + B_j + R_j``,
A_j a multiple of 2^-21 in [0, 1), B_j a multiple of 2^-42 in [0, 2^-21), R_j in [0, 2^-42) the float64 nearest
the rest; and the last row, the float64 nearest ``theta / (2 pi)``. Oracle: mpmath at 450 digits (~1490 bits:
the 2^1024 * 2^32 scaling of the largest theta and 400 fraction bits to spare), sharing no code with ropekit.
"""

from __future__ import annotations

import math
import random

import mpmath
import pytest

from ropekit.reduction import band_constants

RNG = random.Random(11)
THETAS = [0.0, 1.0, 0.5, 1000.5, 6.283185307179586, 5e-324, 1e-300, 1e300, 1.7976931348623157e308]
THETAS += [10_000.0 ** (-2 * i / 128) for i in range(0, 64, 9)]
THETAS += [RNG.uniform(0, 1) * 10.0 ** RNG.randrange(-300, 300) for _ in range(20)]


def _nearest(x: mpmath.mpf) -> float:
    """The float64 nearest x (ties to even), from mpmath's exact value: float() of a 450-digit mpf is correctly
    rounded, and is checked against the neighbours."""
    f = float(x)
    for g in (math.nextafter(f, -math.inf), math.nextafter(f, math.inf)):
        assert abs(mpmath.mpf(g) - x) >= abs(mpmath.mpf(f) - x)
    return f


@pytest.mark.parametrize("theta", THETAS)
def test_band_constants_match_their_definition(theta: float) -> None:
    with mpmath.workdps(450):
        rows = band_constants((theta,))
        assert all(len(r) == 1 for r in rows) and len(rows) == 7
        for j in range(2):
            a, b, r = rows[3 * j][0], rows[3 * j + 1][0], rows[3 * j + 2][0]
            w = mpmath.mpf(theta) * mpmath.mpf(2) ** (32 * j) / (2 * mpmath.pi)
            w -= mpmath.floor(w)
            assert a * 2**21 == int(a * 2**21) and 0 <= a < 1  # 21 fraction bits
            assert b * 2**42 == int(b * 2**42) and 0 <= b < 2**-21
            assert a == float(mpmath.floor(w * 2**21)) / 2**21  # the leading bits of W_j, cut (not rounded)
            assert b == float(mpmath.floor((w - a) * 2**42)) / 2**42
            assert r == _nearest(w - a - b) and 0 <= r <= 2**-42
        assert rows[6][0] == _nearest(mpmath.mpf(theta) / (2 * mpmath.pi))
