# SPDX-License-Identifier: MIT
"""The float64 oracle: RoPE as the literal block-diagonal matrix of seed 004, section 10.3.

    R_{Theta,p} = blkdiag(R(p theta_0), ..., R(p theta_{n-1})) (+) I_{d - r},   R(phi) = [[cos, -sin], [sin, cos]]

built from 2x2 blocks with ``torch.block_diag`` in the seed's interleaved pairing, then conjugated by the channel
permutation for the half layout. Frequencies are recomputed here from the spec's *fields* with Python floats
(base ** (-2i / r), p-RoPE zeroing, position interpolation), independently of :meth:`RopeSpec.frequencies`.

It is slow on purpose (one dense d x d matrix per distinct position) and exists for tests and debugging.

Shapes: b batch, s sequence, h heads, d head_dim, t packed tokens.
"""

from __future__ import annotations

import math

import torch

from ropekit.scaling import Linear
from ropekit.spec import RopeSpec

__all__ = ["layout_permutation", "reference_frequencies", "reference_rope", "rotation_matrix"]


def reference_frequencies(spec: RopeSpec) -> list[float]:
    """theta_i as Python floats, written from the formulas (seed 004 section 11.1; Barbero et al. p-RoPE; PI)."""
    r = int(spec.rotary_dim)  # type: ignore[arg-type]
    n = r // 2
    theta = list(spec.freqs) if spec.freqs is not None else [spec.base ** (-2.0 * i / r) for i in range(n)]
    keep = math.floor(spec.p * n + 1e-9)
    if keep < n:
        ranked = sorted(range(n), key=lambda i: (-theta[i], i))  # highest first, ties by band index
        for i in ranked[keep:]:
            theta[i] = 0.0
    if spec.scaling is not None:
        if not isinstance(spec.scaling, Linear):
            raise NotImplementedError(f"the reference has no independent formula for {spec.scaling!r}")
        theta = [t / spec.scaling.factor for t in theta]
    return theta


def layout_permutation(spec: RopeSpec) -> torch.Tensor:
    """perm with x_layout = x_interleaved[perm]: the spec's channel order expressed in the seed's pairing.

    Interleaved channel 2i (first of band i) sits at layout channel ``x_i`` and 2i + 1 at ``y_i``.
    """
    d = spec.head_dim
    r = int(spec.rotary_dim)  # type: ignore[arg-type]
    perm = list(range(d))
    if spec.layout == "half":
        n = r // 2
        for i in range(n):
            perm[i] = 2 * i  # layout channel i holds band i's first coordinate
            perm[n + i] = 2 * i + 1  # layout channel n + i holds its second
    return torch.tensor(perm, dtype=torch.int64)


def rotation_matrix(spec: RopeSpec, position: float) -> torch.Tensor:
    """The d x d float64 matrix that RoPE applies at ``position`` in the spec's layout."""
    r = int(spec.rotary_dim)  # type: ignore[arg-type]
    a = spec.attention_factor  # multiplies cos and sin of the rotated bands only, as in HF transformers
    blocks = []
    for theta in reference_frequencies(spec):
        phi = float(position) * theta
        c, s = a * math.cos(phi), a * math.sin(phi)
        blocks.append(torch.tensor([[c, -s], [s, c]], dtype=torch.float64))
    if spec.head_dim > r:
        blocks.append(torch.eye(spec.head_dim - r, dtype=torch.float64))
    m: torch.Tensor = torch.block_diag(*blocks)  # type: ignore[no-untyped-call]
    perm = layout_permutation(spec)
    # x_layout = P x_inter with P[j, perm[j]] = 1, so M_layout = P M P^T.
    return m[perm][:, perm]


def reference_rope(
    x: torch.Tensor, positions: torch.Tensor, spec: RopeSpec, *, format: str = "bshd"
) -> torch.Tensor:
    """Rotate ``x`` with the literal matrices. Returns float64.

    Args:
        x: [b, s, h, d] ("bshd"), [b, h, s, d] ("bhsd") or [t, h, d] ("thd").
        positions: [s], [b, s] (or [t] for "thd"); any real dtype.
        spec: the spec.
        format: "bshd", "bhsd" or "thd".
    """
    x64 = x.detach().to(torch.float64)
    if format == "bhsd":
        x64 = x64.transpose(1, 2)
    if format == "thd":
        x64 = x64.unsqueeze(0)
    b, s = x64.shape[0], x64.shape[1]
    pos = positions.detach().to(torch.float64).cpu()
    if pos.dim() == 1:
        pos = pos.expand(b, s)
    out = torch.empty_like(x64)
    cache: dict[float, torch.Tensor] = {}
    for bi in range(b):
        for si in range(s):
            p = float(pos[min(bi, pos.shape[0] - 1), si])
            if p not in cache:
                cache[p] = rotation_matrix(spec, p).to(x64.device)
            out[bi, si] = x64[bi, si] @ cache[p].T  # each head row: (M @ v)^T = v^T M^T
    if format == "thd":
        out = out.squeeze(0)
    if format == "bhsd":
        out = out.transpose(1, 2)
    return out
