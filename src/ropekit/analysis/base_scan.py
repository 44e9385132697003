# SPDX-License-Identifier: MIT
"""The search behind :func:`ropekit.analysis.bands.base_lower_bound` (Men et al. 2024, arXiv 2405.14591).

B(m; b) = sum_i cos(m * b^(-2i/d)) over the n = d/2 bands; a base b passes for context L when B(m; b) >= 0 for
every integer 0 <= m <= L. The passing bases are not an interval: near the bound they form windows, some only
0.03% wide (d 128, L 16384: 231 644 passes, bases 0.034% above it fail again), so a grid search steps over
them. This module walks u = ln b upward and proves each step's bases fail:

- at u, some m has B(m; u) < 0 (found in a pool of recently near-failing m, else from all m <= L, evaluated
  from the largest m down, stopping at the first row block that has one);
- with x_i = m e^(-t_i u), t_i = 2i/d: d2B/du2 = -sum_i t_i^2 x_i (sin x_i + x_i cos x_i), bounded by
  M2 = sum_i t_i^2 (min(x_i, x_i^2) + x_i^2); every x_i only shrinks as u grows and that majorant grows with x,
  so M2 taken at u bounds |d2B/du2| on all of [u, inf). Hence B(m; u + h) <= B + h B' + h^2 M2 / 2 (B, B' at
  u), which stays below delta / 2 up to an explicit h; delta = 2e-9 + 2e-15 n (L + 1) bounds twice the float64
  rounding error of B, so every base in [e^u, e^(u+h)) fails, or meets the condition by less than delta.
  Repeating from u + h walks B(m; .) just past its next root (quadratic convergence), and the longest such run
  over the failing m is the step;
- a step shorter than ``resolution`` is replaced by ``resolution`` (unproven; 0 proves every step, down to
  1e-12 relative); once a base passes, bisection between it and the last failing base finds the window's edge.

Shapes: n bands, L context length, A row blocks of K = isqrt(L) + 1 positions.
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["TINY", "BoundScan", "bound_rows", "theta_of"]

_F64 = torch.float64
#: smallest step in u = ln(base), relative to u (the "exact" search's resolution)
TINY = 1e-12
_POOL = 512  # near-failing m kept between full evaluations
_PUSH = 4  # failing m walked to their roots per step
_ROWS = 16  # row blocks in the first chunk of a full evaluation (then doubling)


def theta_of(rotary_dim: int, base: float) -> torch.Tensor:
    """[n] float64 theta_i = base^(-2i/d), as :func:`~ropekit.analysis.bands.base_bound_margin` computes them."""
    n = rotary_dim // 2
    return torch.tensor(base, dtype=_F64).pow(-torch.arange(0, n, dtype=_F64) * 2 / rotary_dim)


def bound_rows(theta: torch.Tensor, context: int) -> _Rows:
    """B(m) for 0 <= m <= L on the grid m = a K + k (K = isqrt(L) + 1), row block by row block: ``.values(a0, a1)``
    gives ([A, K] values, [A, K] m) for rows a0 <= a < a1, +inf where m > L.

    Angle addition: cos(m theta) = cos(a K theta) cos(k theta) - sin(a K theta) sin(k theta), so a block of rows
    is two [A, n] x [n, K] matrix products instead of A K n cosines.
    """
    return _Rows(theta, context)


class _Rows:
    """The k-side tables of :func:`bound_rows` for one theta, shared by every block of rows."""

    def __init__(self, theta: torch.Tensor, context: int) -> None:
        self.theta, self.L = theta, context
        self.K = math.isqrt(context) + 1
        self.k = torch.arange(self.K, dtype=_F64)
        k_angle = self.k.unsqueeze(-1) * theta  # [K, n]
        self.ck, self.sk = torch.cos(k_angle).T, torch.sin(k_angle).T

    def values(self, a0: int, a1: int) -> tuple[torch.Tensor, torch.Tensor]:
        a = torch.arange(a0, a1, dtype=_F64) * self.K
        a_angle = a.unsqueeze(-1) * self.theta  # [A, n]
        b = torch.cos(a_angle) @ self.ck - torch.sin(a_angle) @ self.sk
        m = a.unsqueeze(-1) + self.k
        return b.masked_fill(m > self.L, math.inf), m


class BoundScan:
    """The walk over u = ln(base) for one (rotary_dim, context); see the module docstring.

    The per-m work is on a few m at a time, so it is numpy (a few microseconds per operation, where torch's
    dispatch costs tens); the evaluation of every m is :func:`bound_rows`' matrix products.
    """

    def __init__(self, rotary_dim: int, context: int) -> None:
        self.d, self.L = rotary_dim, context
        self.t = np.arange(rotary_dim // 2, dtype=np.float64) * 2 / rotary_dim
        self.t2 = self.t * self.t
        self.rows = context // (math.isqrt(context) + 1) + 1
        self.pool = np.zeros(0)
        self._pool_t = torch.zeros(0, dtype=_F64)  # the pool again, for torch's faster bulk cosine
        self._t_t = torch.from_numpy(self.t)
        self.delta = 2e-9 + 2e-15 * (rotary_dim // 2) * (context + 1)  # see the module docstring

    def _failing(self, u: float) -> np.ndarray:
        """m with B(m; e^u) < 0 (empty: the base passes): from the pool if one fails there, else block by block
        from the largest m, stopping after the first block with one."""
        if self.pool.size:
            b = self._pool_b(u)
            if (b < 0).any():
                return self.pool[b < 0]
        rows = _Rows(theta_of(self.d, math.exp(u)), self.L)
        found: list[np.ndarray] = []
        near: list[tuple[np.ndarray, np.ndarray]] = []
        a1, size = self.rows, _ROWS
        while a1 > 0:  # blocks from the largest m down, doubling: failures are most often among the largest m
            bt, mt = rows.values(max(0, a1 - size), a1)
            a1, size = a1 - size, 2 * size
            b, m = bt.flatten().numpy(), mt.flatten().numpy()
            keep = m <= self.L
            b, m = b[keep], m[keep]
            if (b < 0).any():
                found.append(m[b < 0])
            near.append((b / np.maximum(m, 1.0), m))
            if found:
                break
        score = np.concatenate([sc for sc, _ in near])
        ms = np.concatenate([m for _, m in near])
        k = min(_POOL, score.size)
        self.pool = ms[np.argpartition(score, k - 1)[:k]]
        self._pool_t = torch.from_numpy(self.pool)
        return np.concatenate(found) if found else np.zeros(0)

    def _pool_b(self, u: float) -> np.ndarray:
        """B(m; e^u) for the m in the pool."""
        return torch.cos(self._pool_t.unsqueeze(-1) * torch.exp(-self._t_t * u)).sum(-1).numpy()

    def _run(self, ms: np.ndarray, v: np.ndarray) -> np.ndarray:
        """[k] proven length of B(m; .) < delta / 2 from v (0 where it is not); see the module docstring."""
        x = ms[:, None] * np.exp(-self.t * v[:, None])
        b = np.cos(x).sum(-1) - self.delta / 2
        b1 = (x * np.sin(x)) @ self.t
        m2 = (x * (np.minimum(x, 1.0) + x)) @ self.t2
        h = (np.sqrt(np.maximum(b1 * b1 - 2 * b * m2, 0.0)) - b1) / np.maximum(m2, 1e-300)
        h = np.where(m2 > 0, h, math.inf)  # only band 0 (theta = 1 at every base): B(m) never changes
        return np.where(b < 0, h, 0.0)

    def advance(self, failing: np.ndarray, u: float, floor: float) -> float:
        """Proven failing run from u: the longest over the failing m walked to their roots (0 if none).

        The walk is skipped when the first bound is far below ``floor`` (a step that short is replaced anyway).
        """
        if failing.size == 0:
            return 0.0
        h = self._run(failing, np.full(failing.shape, u))
        if float(h.max()) * 2 < floor or math.isinf(h.max()):  # inf: a B(m) no base changes (rotary_dim 2)
            return float(h.max())
        ms = failing[np.argsort(h)[-_PUSH:]]
        v = np.full(ms.shape, u)
        for _ in range(12):  # each step is proven; stop once the longest run grows by less than 1%
            step = self._run(ms, v)
            before, v = float(v.max()) - u, v + step
            if float(v.max()) - u <= 1.01 * before + TINY * u:
                break
        return float(v.max()) - u

    def walk(self, u: float, resolution: float, u_max: float) -> float | None:
        """The smallest passing u from ``u`` up (see the module docstring); None past ``u_max``."""
        last_fail: float | None = None
        coarse = False
        while u <= u_max:
            failing = self._failing(u)
            if failing.size == 0:  # the full evaluation found no B(m) < 0
                break
            floor = max(resolution, TINY * max(1.0, u))
            run = self.advance(failing, u, floor)
            last_fail, coarse = u, run < floor
            u += max(run, floor)
        else:
            return None
        if coarse and last_fail is not None:
            u = self._edge(last_fail, u)
        return u

    def _edge(self, lo: float, hi: float) -> float:
        """Bisection: lo fails, hi passes; the smallest passing u found in between (to TINY)."""
        while hi - lo > TINY * max(1.0, hi):
            mid = 0.5 * (lo + hi)
            failing = self._failing(mid)
            if failing.size == 0:
                hi = mid
            else:
                lo = mid + self.advance(failing, mid, 0.0)
                if lo >= hi:  # the proven run reaches hi: hi is the edge
                    break
        return hi
