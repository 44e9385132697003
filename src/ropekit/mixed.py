# SPDX-License-Identifier: MIT
"""``MixedRotary``: RoPE-Mixed, learnable per-head 2-D frequencies (Heo et al., "Rotary Position Embedding for
Vision Transformer", ECCV 2024, arXiv 2403.13298; code ``naver-ai/rope-vit``).

Band j of head h turns by ``x * f_x[h, j] + y * f_y[h, j]`` -- a learned direction and speed in the image plane --
instead of axial RoPE's ``x * theta_j`` or ``y * theta_j``. Complex (interleaved) channel pairs, as the paper.

Paper initialisation (``init="mixed"``, base 10): magnitudes ``mag_k = base^(-4k/D)`` for k < D/4, one random
angle phi per head; band k gets ``mag_k (cos phi, sin phi)`` and band D/4 + k gets ``mag_k (cos(phi + pi/2),
sin(phi + pi/2))``. ``init="axial"`` (base 100) puts ``theta_k`` on x for the first D/4 bands and on y for the
rest: with ``learnable=False`` the module is frozen axial RoPE: it matches
:func:`ropekit.presets_vl.rope_vit_axial_spec` rotated by :func:`ropekit.axis_tables.apply_rope_axes` to float32
rounding (not bit for bit: the angles are formed differently).

Angles are formed in float64 (products of float32 frequencies and positions are exact there) and reduced mod
2*pi; cos/sin are differentiable with respect to the frequencies (so the rotation is plain torch here: the fused
kernels take fixed tables and do not differentiate with respect to them).

Shapes: b batch, s tokens, h heads, D head dim, n = D / 2 bands. positions [2, s] (shared by the batch) or
[2, b, s] (per sequence: padded batches of different grids), rows (x, y) (column, row), as
:func:`ropekit.apply_rope_axes` takes multi-axis positions. Float positions may require grad (learned or
continuous coordinates): the angles are plain torch, so d angle / d x = f_x and d angle / d y = f_y.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from ropekit.integers import whole
from ropekit.phases import check_positions

__all__ = ["MixedRotary"]

_TWO_PI = 2.0 * math.pi
_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


class MixedRotary(nn.Module):
    """Learnable (or frozen) 2-D rotary frequencies per head.

    Args:
        head_dim: D, a multiple of 4.
        num_heads: heads h (each gets its own frequencies).
        init: "mixed" (the paper's random-direction init) or "axial" (x block then y block).
        base: frequency base (paper: 10 for mixed, 100 for axial; default chosen by ``init``).
        learnable: whether ``freqs`` is an ``nn.Parameter`` that trains (exclude it from weight decay:
            :meth:`no_weight_decay`).
        format: "bshd" or "bhsd" for q and k.
        generator: random source for the per-head angles of ``init="mixed"``.
        dtype: dtype of ``freqs`` (float32 default; float64 for gradcheck).

    Example:
        >>> rope = MixedRotary(64, num_heads=4)
        >>> q = torch.randn(2, 17, 4, 64)
        >>> pos = torch.stack([torch.arange(17) % 4, torch.arange(17) // 4])  # (x, y)
        >>> q_rot, _ = rope(q, None, positions=pos)
    """

    def __init__(
        self,
        head_dim: int,
        num_heads: int,
        *,
        init: Literal["mixed", "axial"] = "mixed",
        base: float | None = None,
        learnable: bool = True,
        format: Literal["bshd", "bhsd"] = "bshd",
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim <= 0 or head_dim % 4:
            raise ValueError(f"head_dim must be a positive multiple of 4, got {head_dim!r}")
        num_heads = whole(num_heads, 1, f"num_heads must be a positive int, got {num_heads!r}")
        if init not in ("mixed", "axial"):
            raise ValueError(f"init must be 'mixed' or 'axial', got {init!r}")
        if format not in ("bshd", "bhsd"):
            raise ValueError(f"format must be 'bshd' or 'bhsd', got {format!r}")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        b = (10.0 if init == "mixed" else 100.0) if base is None else base
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not (math.isfinite(b) and b > 1):
            raise ValueError(f"base must be a finite number > 1, got {base!r}")
        self.head_dim, self.num_heads, self.format, self.init, self.base = (
            head_dim,
            num_heads,
            format,
            init,
            float(b),
        )
        freqs = _initial_freqs(head_dim, num_heads, init, float(b), generator)
        self.freqs = nn.Parameter(freqs.to(dtype), requires_grad=learnable)  # [2, h, n]: f_x, f_y

    def no_weight_decay(self) -> set[str]:
        """Parameter names to keep out of weight decay (the paper excludes the frequencies)."""
        return {"freqs"}

    def angles(self, positions: torch.Tensor) -> torch.Tensor:
        """float64 angles [s, h, n] (positions [2, s]) or [b, s, h, n] (positions [2, b, s]) = x * f_x + y * f_y,
        reduced mod 2*pi (differentiable in ``freqs``, and in float positions that require grad)."""
        _check_xy(positions)
        p = positions.to(self.freqs.device, torch.float64)
        f = self.freqs.to(torch.float64)
        ang = p[0][..., None, None] * f[0] + p[1][..., None, None] * f[1]  # [*B, s, h, n]
        return torch.remainder(ang, _TWO_PI)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor | None = None, *, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Rotate q (and k) at 2-D positions (x, y); prefix tokens at (0, 0) stay unrotated.

        Args:
            q, k: [b, s, h, D] ("bshd") or [b, h, s, D] ("bhsd"); k may be None.
            positions: [2, s] shared by the batch, or [2, b, s] (or [2, 1, s]) per sequence; integer or
                float32/float64 (float positions that require grad are differentiated).

        Raises:
            TypeError, ValueError: naming the argument, as :func:`ropekit.axis_tables.apply_rope_axes` does:
            positions not a [2, s] / [2, b, s] integer or float32/float64 tensor; q or k not a floating 4-D tensor
            of the module's format, head_dim and num_heads; k with another batch size, sequence length or device
            than q.
        """
        _check_xy(positions)
        b, s = self._check_qk("q", q, positions)
        if positions.dim() == 3 and positions.shape[1] not in (1, b):
            raise ValueError(
                f"positions [2, batch, tokens] must have batch 1 or q's batch {b}, got {tuple(positions.shape)}"
            )
        if k is not None:
            kb, ks = self._check_qk("k", k, positions)
            if (kb, ks) != (b, s) or k.device != q.device:
                raise ValueError(
                    f"k must match q in batch and sequence length and device: q has (batch={b}, seq={s}) on "
                    f"{q.device}, k has (batch={kb}, seq={ks}) on {k.device}"
                )
        ang = self.angles(positions)
        cos, sin = torch.cos(ang), torch.sin(ang)
        return _rotate(q, cos, sin, self.format), None if k is None else _rotate(k, cos, sin, self.format)

    def _check_qk(self, name: str, x: object, positions: torch.Tensor) -> tuple[int, int]:
        """(batch, seq) of q or k after checking type, rank, head_dim, dtype, heads and tokens."""
        if not isinstance(
            x, torch.Tensor
        ):  # the exception types of apply_rope_axes: ValueError for q, TypeError for k
            raise (ValueError if name == "q" else TypeError)(
                f"{name} must be a 4-D {self.format} torch.Tensor with head_dim={self.head_dim}, got {type(x).__name__}"
            )
        if x.dim() != 4 or x.shape[-1] != self.head_dim:
            raise ValueError(
                f"{name} must be a 4-D {self.format} tensor with head_dim={self.head_dim}, got {tuple(x.shape)}"
            )
        if x.dtype not in _DTYPES:
            raise ValueError(f"{name} must be float32, float64, bfloat16 or float16, got {x.dtype}")
        heads, seq = (x.shape[2], x.shape[1]) if self.format == "bshd" else (x.shape[1], x.shape[2])
        if heads != self.num_heads:
            raise ValueError(f"{name} has {heads} heads but the module has num_heads={self.num_heads}")
        if seq != positions.shape[-1]:
            raise ValueError(f"positions cover {positions.shape[-1]} tokens but {name} has {seq}")
        return x.shape[0], seq

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, num_heads={self.num_heads}, init={self.init!r}, base={self.base:g}, "
            f"learnable={self.freqs.requires_grad}, format={self.format!r}"
        )


def _check_xy(positions: object) -> None:
    """positions must be a valid [2, s] or [2, b, s] positions tensor (float ones may require grad: the value rules
    of :func:`ropekit.phases.check_positions` are checked on the detached values)."""
    check_positions(positions.detach() if isinstance(positions, torch.Tensor) else positions)
    assert isinstance(positions, torch.Tensor)
    if positions.dim() not in (2, 3) or positions.shape[0] != 2:
        raise ValueError(
            "positions must have shape [2, tokens] or [2, batch, tokens] with rows (x, y), got "
            f"{tuple(positions.shape)}"
        )


def _initial_freqs(d: int, heads: int, init: str, base: float, gen: torch.Generator | None) -> torch.Tensor:
    q = d // 4
    mag = torch.tensor([base ** (-4.0 * k / d) for k in range(q)], dtype=torch.float64)  # [D/4]
    out = torch.zeros(2, heads, 2 * q, dtype=torch.float64)
    if init == "axial":
        out[0, :, :q] = mag
        out[1, :, q:] = mag
        return out
    phi = torch.rand(heads, 1, dtype=torch.float64, generator=gen) * _TWO_PI  # one angle per head
    out[0, :, :q], out[1, :, :q] = mag * torch.cos(phi), mag * torch.sin(phi)
    out[0, :, q:], out[1, :, q:] = mag * torch.cos(phi + math.pi / 2), mag * torch.sin(phi + math.pi / 2)
    return out


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, fmt: str) -> torch.Tensor:
    """Interleaved-pair rotation of x by per-token, per-head tables [s, h, n] or [b, s, h, n] (float64 math, x's
    dtype out)."""
    if fmt == "bhsd":
        cos, sin = cos.transpose(-3, -2), sin.transpose(-3, -2)  # [*B, h, s, n]
    cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    c, s = cos.to(cdt), sin.to(cdt)
    pairs = x.to(cdt).reshape(*x.shape[:-1], -1, 2)  # [..., n, 2]
    x1, x2 = pairs[..., 0], pairs[..., 1]
    out = torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).flatten(-2)
    return out.to(x.dtype)
