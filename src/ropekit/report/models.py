# SPDX-License-Identifier: MIT
"""Run a model with weights and collect what :mod:`ropekit.analysis.weights` needs: the queries and keys just
before rotation and the attention weights, per layer.

Two kinds of models: a transformers causal LM (Llama-style ``self_attn.q_proj``/``k_proj``, optional
``q_norm``/``k_norm``; loaded with eager attention so the attention weights are returned) and a lab
:class:`~ropekit.lab.model.TinyLM` (``attn.wq``/``wk``, attention recorded with ``record=True``).

Shapes: b batch, s sequence, h heads, d head dim, n bands, l layers.
"""

from __future__ import annotations

from typing import Any

import torch

from ropekit.analysis.weights import WeightAnalysis, band_norms, positional_scores
from ropekit.spec import RopeSpec

__all__ = ["analyse_hf_model", "analyse_lab_model", "sample_tokens"]


def sample_tokens(vocab: int, batch: int, length: int, seed: int = 0) -> torch.Tensor:
    """[batch, length] int64 token ids drawn uniformly from [0, vocab) with a fixed seed."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, length), generator=g)


def _collect(
    spec: RopeSpec, q: list[torch.Tensor], k: list[torch.Tensor], attn: list[torch.Tensor], inputs: str
) -> WeightAnalysis:
    if not q or len(q) != len(k) or len(q) != len(attn):
        raise ValueError(
            f"could not collect queries/keys/attention per layer (got {len(q)}, {len(k)}, {len(attn)} layers)"
        )
    prev, diag = zip(*(positional_scores(a) for a in attn))
    return WeightAnalysis(
        q_norms=torch.stack([band_norms(x, spec) for x in q]),
        k_norms=torch.stack([band_norms(x, spec) for x in k]),
        previous=torch.stack(list(prev)),
        diagonal=torch.stack(list(diag)),
        inputs=inputs,
    )


def _heads(x: torch.Tensor, head_dim: int) -> torch.Tensor:
    return x if x.dim() == 4 else x.view(*x.shape[:2], -1, head_dim)  # (b, s, h, d)


@torch.no_grad()
def analyse_hf_model(model: Any, spec: RopeSpec, tokens: torch.Tensor) -> WeightAnalysis:
    """Band norms and positional scores of a transformers causal LM run on ``tokens`` [b, s].

    The model must be loaded with ``attn_implementation="eager"`` (attention weights are needed).
    """
    q: list[torch.Tensor] = []
    k: list[torch.Tensor] = []
    hooks = []
    attn_modules = [m for name, m in model.named_modules() if name.endswith("self_attn")]
    if not attn_modules or not all(hasattr(m, "q_proj") and hasattr(m, "k_proj") for m in attn_modules):
        raise ValueError(
            f"{type(model).__name__}: expected Llama-style self_attn.q_proj / k_proj modules for the weight "
            "analysis; pass the model's config.json instead for the configuration-only report"
        )
    for m in attn_modules:
        for store, proj, norm in ((q, "q_proj", "q_norm"), (k, "k_proj", "k_norm")):
            mod = getattr(m, norm, None) or getattr(m, proj)  # the tensor that is rotated next
            hooks.append(
                mod.register_forward_hook(
                    lambda _m, _i, o, store=store: store.append(_heads(o, spec.head_dim))
                )
            )
    try:
        out = model(input_ids=tokens, output_attentions=True)
    finally:
        for h in hooks:
            h.remove()
    attn = [a for a in (out.attentions or ()) if a is not None]
    b, s = tokens.shape
    return _collect(spec, q, k, attn, f"{b} x {s} random token ids")


@torch.no_grad()
def analyse_lab_model(model: Any, tokens: torch.Tensor, inputs: str) -> WeightAnalysis:
    """Band norms and positional scores of a lab TinyLM with a RoPE encoding run on ``tokens`` [b, s]."""
    spec = getattr(model.pe, "spec", None)
    if not isinstance(spec, RopeSpec):
        raise ValueError(  # noqa: TRY004 - the CLI reports ValueErrors
            f"the lab model's encoding {model.cfg.encoding!r} has no RoPE bands to analyse"
        )
    q: list[torch.Tensor] = []
    k: list[torch.Tensor] = []
    hooks = []
    for blk in model.blocks:
        for store, lin in ((q, blk.attn.wq), (k, blk.attn.wk)):
            hooks.append(
                lin.register_forward_hook(
                    lambda _m, _i, o, store=store: store.append(_heads(o, spec.head_dim))
                )
            )
    try:
        model(tokens, record=True)
    finally:
        for h in hooks:
            h.remove()
    attn = [blk.attn.last_attention for blk in model.blocks]
    return _collect(spec, q, k, attn, inputs)
