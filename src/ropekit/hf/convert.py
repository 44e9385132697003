# SPDX-License-Identifier: MIT
"""q/k projection weights between Meta's interleaved pairing and HF's half split (rope-types.md 5.4).

Row t of head h is global row h*H + t. Within a head, write the rotated rows as pair j in [0, d/2) and member
r in {0, 1}: Meta/interleaved row 2j + r, HF/half-split row r*(d/2) + j, where d is the rotary dim (the rows
past d, pass-through channels, stay where they are). Converting q and k with the same permutation leaves every
q.k unchanged, so a model keeps its outputs when its weights and its RoPE layout change together. Biases
(1-D) get the same row permutation; v and o are untouched; split a fused qkv first.

Shapes: W [n_heads * H, in_features] or bias [n_heads * H].
"""

from __future__ import annotations

import torch

__all__ = ["half_from_interleaved_index", "permute_for_half", "permute_for_interleaved"]


def half_from_interleaved_index(head_dim: int, rotary_dim: int | None = None) -> torch.Tensor:
    """idx with x_half = x_interleaved[idx] within one head."""
    d = head_dim if rotary_dim is None else rotary_dim
    if d % 2 or not 0 < d <= head_dim:
        raise ValueError(f"rotary_dim must be even and in (0, head_dim={head_dim}], got {d}")
    half = torch.arange(d).view(d // 2, 2).t().reshape(-1)  # [0, 2, 4, ..., 1, 3, 5, ...]
    return torch.cat([half, torch.arange(d, head_dim)])


def _permute(w: torch.Tensor, n_heads: int, head_dim: int, idx: torch.Tensor, name: str) -> torch.Tensor:
    if not isinstance(w, torch.Tensor) or w.dim() not in (1, 2) or w.shape[0] != n_heads * head_dim:
        shape = tuple(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__
        raise ValueError(
            f"{name}: weight must have n_heads * head_dim = {n_heads * head_dim} rows, got {shape}"
        )
    rows = w.reshape(n_heads, head_dim, *w.shape[1:])
    return rows[:, idx.to(w.device)].reshape(w.shape).contiguous()


def permute_for_half(
    w: torch.Tensor, n_heads: int, head_dim: int, rotary_dim: int | None = None
) -> torch.Tensor:
    """Meta/interleaved -> HF/half-split rows of a q or k projection (n_heads: q heads or kv heads)."""
    return _permute(
        w, n_heads, head_dim, half_from_interleaved_index(head_dim, rotary_dim), "permute_for_half"
    )


def permute_for_interleaved(
    w: torch.Tensor, n_heads: int, head_dim: int, rotary_dim: int | None = None
) -> torch.Tensor:
    """HF/half-split -> Meta/interleaved rows (the inverse of :func:`permute_for_half`)."""
    idx = half_from_interleaved_index(head_dim, rotary_dim)
    inv = torch.empty_like(idx)
    inv[idx] = torch.arange(idx.numel())
    return _permute(w, n_heads, head_dim, inv, "permute_for_interleaved")
