# SPDX-License-Identifier: MIT
"""Distance decay: Su's upper bound against the actual dot product of rotated queries and keys.

RoFormer (Su et al. 2021, arXiv 2104.09864, section 3.4.3) bounds the rotated dot product by Abel summation:
with h_i the complex product of band i of q and k and S_j = sum_{k<j} exp(i m theta_k),
|sum_i h_i exp(i m theta_i)| <= max_i |h_{i+1} - h_i| * sum_{j=1}^{n} |S_j|, and plots the *relative* bound
(1/n) sum_{j=1}^{n} |S_j| (m), which decays with the distance m. Barbero et al. 2025 ("Round and Round We Go!",
arXiv 2410.06205; seed 001) point out that the bound is not the expectation: for q, k i.i.d. N(0, I) the expected
dot product is 0 at every distance (its standard deviation is sqrt(r), also independent of m), and the decaying
curve is what all-ones q, k give (sum_i 2 cos(m theta_i)).

Convention: the query at position p, the key m tokens earlier at p - m; dot(m) = <R(p theta) q, R((p - m) theta) k>,
which depends on m only. ``seq_len``: the sequence length the frequencies are taken at (``RopeSpec.frequencies``), as
:func:`~ropekit.analysis.spectrum.spectrum` and :func:`~ropekit.analysis.rotations.rotations` take them at their
context. It matters for the schemes whose frequencies depend on the length: LongRoPE's long factors replace its
short ones beyond ``original_max_position_embeddings``, dynamic NTK's base grows beyond its
``max_position_embeddings``. None: the frequencies at initialisation (LongRoPE's short factors, dynamic NTK
unscaled). Shapes: N samples, M distances, n bands, r = 2n rotary channels.
"""

from __future__ import annotations

import torch

from ropekit.integers import whole
from ropekit.spec import RopeSpec, require_spec

__all__ = ["gaussian_dot_moments", "gaussian_dot_samples", "ones_dot", "rotated_dot", "su_bound"]


def _distances(distances: torch.Tensor) -> torch.Tensor:
    if distances.dim() != 1 or distances.is_floating_point() and not torch.isfinite(distances).all():
        raise ValueError(f"distances must be a finite 1-D tensor, got shape {tuple(distances.shape)}")
    return distances.to(torch.float64)


def _theta(spec: RopeSpec, seq_len: int | None) -> torch.Tensor:
    require_spec(spec)
    if seq_len is not None:
        seq_len = whole(seq_len, 1, f"seq_len must be a positive int or None, got {seq_len!r}")
    return spec.frequencies(seq_len)


def su_bound(spec: RopeSpec, distances: torch.Tensor, *, seq_len: int | None = None) -> torch.Tensor:
    """[M] float64 Su's relative upper bound (1/n) sum_{j=1}^{n} |S_j(m)|, S_j(m) = sum_{k<j} exp(i m theta_k).

    Equals (n + 1) / 2 at m = 0. theta: the frequencies at ``seq_len`` (see the module docstring).
    """
    theta = _theta(spec, seq_len)
    m = _distances(distances)
    phase = m.unsqueeze(-1) * theta  # [M, n]
    s = torch.polar(torch.ones_like(phase), phase).cumsum(-1)  # S_1 .. S_n
    return s.abs().mean(-1)


def rotated_dot(
    spec: RopeSpec,
    q: torch.Tensor,
    k: torch.Tensor,
    distances: torch.Tensor,
    *,
    seq_len: int | None = None,
) -> torch.Tensor:
    """[N, M] float64 dot(m) of q [N, r] and k [N, r] (rotary channels, in the spec's layout) at each distance.

    Per band with q = (x, y), k = (u, v): cos(m theta) (x u + y v) + sin(m theta) (x v - y u); theta at
    ``seq_len``.
    """
    theta = _theta(spec, seq_len)
    r = int(spec.rotary_dim)  # type: ignore[arg-type]
    if q.shape != k.shape or q.dim() != 2 or q.shape[-1] != r:
        raise ValueError(
            f"q and k must both be [N, rotary_dim={r}], got {tuple(q.shape)} and {tuple(k.shape)}"
        )
    m = _distances(distances)
    xs, ys = spec.pairs()
    q, k = q.to(torch.float64), k.to(torch.float64)
    x, y, u, v = q[:, xs], q[:, ys], k[:, xs], k[:, ys]  # [N, n]
    phase = m.unsqueeze(-1) * theta  # [M, n]
    return (x * u + y * v) @ torch.cos(phase).T + (x * v - y * u) @ torch.sin(phase).T


def ones_dot(spec: RopeSpec, distances: torch.Tensor, *, seq_len: int | None = None) -> torch.Tensor:
    """[M] float64 dot(m) for all-ones q and k: sum_i 2 cos(m theta_i) (the curve that does decay); theta at
    ``seq_len``."""
    theta = _theta(spec, seq_len)
    m = _distances(distances)
    return 2.0 * torch.cos(m.unsqueeze(-1) * theta).sum(-1)


def gaussian_dot_moments(spec: RopeSpec, distances: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Closed-form mean and standard deviation [M] of dot(m) for q, k i.i.d. N(0, I_r): 0 and sqrt(r)."""
    m = _distances(distances)
    r = float(spec.rotary_dim)  # type: ignore[arg-type]
    return torch.zeros_like(m), torch.full_like(m, r**0.5)


def gaussian_dot_samples(
    spec: RopeSpec,
    distances: torch.Tensor,
    *,
    samples: int = 1024,
    seed: int = 0,
    seq_len: int | None = None,
) -> torch.Tensor:
    """[samples, M] float64 dot(m) for ``samples`` draws of q, k i.i.d. N(0, I_r) (Monte Carlo); theta at
    ``seq_len``."""
    samples = whole(samples, 1, f"samples must be a positive int, got {samples!r}")
    g = torch.Generator().manual_seed(seed)
    r = int(spec.rotary_dim)  # type: ignore[arg-type]
    q = torch.randn(samples, r, generator=g, dtype=torch.float64)
    k = torch.randn(samples, r, generator=g, dtype=torch.float64)
    return rotated_dot(spec, q, k, distances, seq_len=seq_len)
