# SPDX-License-Identifier: MIT
"""One attention block of ring attention: masked softmax attention of local queries over one K/V block, its
log-sum-exp (LSE) merge with the running result, and its backward (flash-attention's recurrences).

Ring attention (Liu et al. 2023, arXiv 2310.01889) computes ``softmax(q k^T * scale) v`` block by block: for one
query row, block j gives the normalised partial output ``o_j`` and ``lse_j = log sum_keys exp(score)``; two partial
results merge exactly with

    lse = logaddexp(lse_a, lse_b),    o = exp(lse_a - lse) * o_a + exp(lse_b - lse) * o_b.

The backward needs only the final ``o`` and ``lse`` (FlashAttention-2, Dao 2023, arXiv 2307.08691, Algorithm 2):
with ``p = exp(s - lse)`` and ``delta = rowsum(do * o)``: ``dv = p^T do``, ``ds = p * (do v^T - delta)``,
``dq = ds k * scale``, ``dk = ds^T q * scale``.

Shapes (grouped-query layout, q head ``h = j * g + i`` reads kv head ``j``):
    q, o, dq:  [b, h_kv, g, s_q, d]     k, dk: [b, h_kv, s_k, d]     v, dv: [b, h_kv, s_k, d_v]
    lse, delta: [b, h_kv, g, s_q]       mask: [s_q, s_k] bool (True = may attend)
"""

from __future__ import annotations

import torch

__all__ = ["block_backward", "block_forward", "block_mask", "merge_lse"]


def block_mask(
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    *,
    causal: bool,
    q_doc: torch.Tensor | None = None,
    k_doc: torch.Tensor | None = None,
) -> torch.Tensor:
    """[s_q, s_k] bool: key j is visible to query i (causal: ``k_pos[j] <= q_pos[i]``; documents must match)."""
    mask = torch.ones(q_pos.numel(), k_pos.numel(), dtype=torch.bool, device=q_pos.device)
    if causal:
        mask &= k_pos.unsqueeze(0) <= q_pos.unsqueeze(1)
    if q_doc is not None and k_doc is not None:
        mask &= k_doc.unsqueeze(0) == q_doc.unsqueeze(1)
    return mask


def _scores(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    s = torch.matmul(q, k.unsqueeze(2).transpose(-1, -2)) * scale  # [b, h_kv, g, s_q, s_k]
    return s.masked_fill(~mask, float("-inf"))


def block_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) of the queries over one block. Every query row must see at least one key of the block."""
    s = _scores(q, k, mask, scale)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1))
    return torch.matmul(p, v.unsqueeze(2)), lse


def merge_lse(
    o_a: torch.Tensor, lse_a: torch.Tensor, o_b: torch.Tensor, lse_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact merge of two partial attention results over disjoint key sets.

    ``lse_a`` may be -inf (no keys yet, ``o_a`` then ignored); ``lse_b`` must be finite.
    """
    lse = torch.logaddexp(lse_a, lse_b)
    o = torch.exp(lse_a - lse).unsqueeze(-1) * o_a + torch.exp(lse_b - lse).unsqueeze(-1) * o_b
    return o, lse


def block_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
    do: torch.Tensor,
    lse: torch.Tensor,
    delta: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """This block's contributions (dq, dk, dv), given the final lse and delta = rowsum(do * o) of the rows."""
    p = torch.exp(_scores(q, k, mask, scale) - lse.unsqueeze(-1))
    dv = torch.matmul(p.transpose(-1, -2), do).sum(2)  # summed over the g query heads sharing a kv head
    dp = torch.matmul(do, v.unsqueeze(2).transpose(-1, -2))
    ds = p * (dp - delta.unsqueeze(-1))
    dq = torch.matmul(ds, k.unsqueeze(2)) * scale
    dk = torch.matmul(ds.transpose(-1, -2), q).sum(2) * scale
    return dq, dk, dv
