# SPDX-License-Identifier: MIT
"""Exact reduction of the RoPE phase p * theta modulo one turn, for every int64 position.

One float64 product ``p * theta`` is exact only while it needs at most 53 bits: the phase error of the float64
recipe grows like ``|p| * 2^-53`` (1.7e-5 rad at 2^40, 0.6 rad at 2^53). Here the phase is computed in *turns*
(``t = p * theta / (2 pi)``, reduced mod 1) with a split that keeps every large product exact:

1. positions: ``p = hi * 2^32 + lo`` with ``lo = p & (2^32 - 1)`` in [0, 2^32) and ``hi = p >> 32`` in
   [-2^31, 2^31) (both exact in float64);
2. per band, computed once in exact arithmetic (Python integers, 2 pi to ~1400 bits by Machin's
   formula): ``W_j = frac(2^(32 j) * theta / (2 pi))`` for j = 0, 1, split as ``W_j = A_j + B_j + R_j`` where
   A_j holds fraction bits 1..21, B_j bits 22..42 and R_j < 2^-42 the rest (rounded to float64);
3. per position and band: ``c * A_j`` and ``c * B_j`` (c = lo or hi, at most 32 bits; A_j, B_j at most 21
   significant bits) are exact float64 products, and so is their reduction ``x - floor(x)``; ``c * R_j`` is
   below 2^-10 turn and carries a rounding error below 2^-62 turn;
4. the sum of the six terms is reduced once more to [-1/2, 1/2] turn.

The result is within ~2^-51 turn (~3e-15 rad) of the true ``p * theta mod 2 pi`` for every int64 p, where theta
is the spec's float64 frequency (for scaling schemes: the scaled float64 frequency, e.g. ``fl(theta / s)`` for
linear scaling). Float positions x (float32/float64) are split as ``trunc(x) + f`` (both exact): the integer
part goes through the path above, the fraction adds ``f * theta / (2 pi)`` with one float64 rounding.
Magnitudes of 2^63 and beyond cannot be split this way and are refused by :func:`ropekit.phases.check_positions`.

``ropekit/kernels/rope_phase.h`` repeats :func:`reduced_turns` operation for operation in C (float positions on the
CPU, :mod:`ropekit.phases`): a change to the recipe here must be made there too.

Shapes: P any position shape, n bands.
"""

from __future__ import annotations

import functools

import torch

__all__ = ["FLOAT_POSITION_BOUND", "band_constants", "reduced_turns"]

#: float positions must satisfy |x| < FLOAT_POSITION_BOUND (their integer part must fit in an int64)
FLOAT_POSITION_BOUND = 2.0**63

_CHUNK = 32  # bits per position chunk
_PIECE = 53 - _CHUNK  # significant bits per exact frequency piece: chunk x piece fits a float64 mantissa
_LOW_MASK = (1 << _CHUNK) - 1


def _arctan_inv(x: int, one: int) -> int:
    """atan(1/x) * one, by its alternating series in integers (error a few units)."""
    total, term, k, x2 = 0, one // x, 1, x * x
    while term:
        total += term // k if (k // 2) % 2 == 0 else -(term // k)
        term //= x2
        k += 2
    return total


@functools.lru_cache(maxsize=4)
def _two_pi_fixed(bits: int) -> int:
    """floor(2 pi * 2^bits) up to a few units, from Machin's formula pi = 16 atan(1/5) - 4 atan(1/239)."""
    guard = 32
    one = 1 << (bits + guard)
    pi = 16 * _arctan_inv(5, one) - 4 * _arctan_inv(239, one)
    return (2 * pi) >> guard


_PI_BITS = 1400  # enough for theta up to the float64 maximum (2^1024) and 2^32 scaling, with 300 spare bits


def _turn_pieces(theta: float, shift: int) -> tuple[float, float, float]:
    """frac(2^shift * theta / (2 pi)) as (A, B, R): A, B exact with _PIECE bits each, R the float64 rest.

    In integers: theta = num / den exactly, 2 pi ~ P / 2^_PI_BITS, so 2^shift theta / (2 pi) = N / D with
    N = num 2^(shift + _PI_BITS), D = den P; its fraction is (N mod D) / D, cut into _PIECE-bit pieces by integer
    division. Python's int / int is correctly rounded, so R is the float64 nearest the rest (as
    ``float(Fraction)``, ~10x slower: this runs once per frequency table, for a dynamic scaling once per length).
    """
    num, den = theta.as_integer_ratio()
    d = den * _two_pi_fixed(_PI_BITS)
    r = (num << (shift + _PI_BITS)) % d  # frac = r / d
    a, r = divmod(r << _PIECE, d)  # A = a / 2^_PIECE, rest r / (d 2^_PIECE)
    b, r = divmod(r << _PIECE, d)  # B = b / 2^(2 _PIECE), rest r / (d 2^(2 _PIECE))
    return a / (1 << _PIECE), b / (1 << 2 * _PIECE), r / (d << 2 * _PIECE)


@functools.lru_cache(maxsize=256)
def band_constants(thetas: tuple[float, ...]) -> tuple[tuple[float, ...], ...]:
    """Per-band constants for :func:`reduced_turns`: 7 rows (A0, B0, R0, A1, B1, R1, theta / 2 pi) of n floats.

    ``thetas`` are the float64 frequencies (finite, >= 0). Computed once per frequency table (exact integers).
    """
    rows: list[list[float]] = [[] for _ in range(7)]
    two_pi = _two_pi_fixed(_PI_BITS)
    for th in thetas:
        for j in range(2):
            for m, val in enumerate(_turn_pieces(th, _CHUNK * j)):
                rows[3 * j + m].append(val)
        num, den = th.as_integer_ratio()
        rows[6].append((num << _PI_BITS) / (den * two_pi))  # correctly rounded theta / (2 pi)
    return tuple(tuple(r) for r in rows)


def _frac(x: torch.Tensor) -> torch.Tensor:
    return x - torch.floor(x)  # exact in floating point


def _int_turns(p: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """frac-sum of the six exact pieces for int64 p [*P]; c [7, n] float64 -> [*P, n] in [0, 4)."""
    lo = torch.bitwise_and(p, _LOW_MASK).to(torch.float64).unsqueeze(-1)
    hi = torch.bitwise_right_shift(p, _CHUNK).to(torch.float64).unsqueeze(-1)
    big = (_frac(lo * c[0]) + _frac(lo * c[1])) + (_frac(hi * c[3]) + _frac(hi * c[4]))  # exact
    return big + (lo * c[2] + hi * c[5])


def reduced_turns(positions: torch.Tensor, consts: torch.Tensor) -> torch.Tensor:
    """The phase of every (position, band) in turns, reduced to [-1/2, 1/2].

    Args:
        positions: [*P] integer tensor (any int64 value) or float32/float64 tensor with |x| < 2^63 (unchecked
            here: see :func:`ropekit.phases.check_positions`).
        consts: [7, n] float64 from :func:`band_constants`, on the positions' device.

    Returns:
        [*P, n] float64 t with ``2 pi t = p * theta (mod 2 pi)`` to within ~2^-51 turn. Branch-free (traceable by
        torch.compile with no data-dependent control flow).
    """
    if positions.is_floating_point():
        x = positions.to(torch.float64)
        ip = torch.trunc(x)
        t = _int_turns(ip.to(torch.int64), consts) + (x - ip).unsqueeze(-1) * consts[6]
    else:
        t = _int_turns(positions.to(torch.int64), consts)
    return t - torch.round(t)
