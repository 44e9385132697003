# SPDX-License-Identifier: MIT
"""Context parallelism: RoPE and exact attention on a sequence sharded across ranks (``torch.distributed``).

RoPE must use every token's **global** position; the load-balancing layouts scatter the positions a rank holds, and
using local ``0..s-1`` positions trains silently on wrong positions. See docs/distributed.md.

Public API:
    shard_positions  global RoPE position ids of the tokens a rank holds ("contiguous", "zigzag", "stripe";
                     packed documents with cu_seqlens)
    shard_indices    rows of the full (packed) tensor a rank holds (for per-token tables and ring masks)
    shard, unshard   a rank's part of a full tensor along a dim, and the inverse from all parts
    ring_attention   exact causal / per-document softmax attention with K/V passed around the ring (GQA,
                     log-sum-exp merge, differentiable once)
    seq_to_heads, heads_to_seq
                     DeepSpeed-Ulysses all-to-all between sequence shards and head shards
    causal_pairs     (query, key) pairs each rank computes under a causal mask, per layout (load balance)
    LAYOUTS          the layout names
"""

from ropekit.distributed.layouts import LAYOUTS, Layout, shard, shard_indices, shard_positions, unshard
from ropekit.distributed.ring import ring_attention
from ropekit.distributed.ulysses import heads_to_seq, seq_to_heads
from ropekit.distributed.work import causal_pairs

__all__ = [
    "LAYOUTS",
    "Layout",
    "causal_pairs",
    "heads_to_seq",
    "ring_attention",
    "seq_to_heads",
    "shard",
    "shard_indices",
    "shard_positions",
    "unshard",
]
