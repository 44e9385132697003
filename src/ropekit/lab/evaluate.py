# SPDX-License-Identifier: MIT
"""Evaluation: perplexity at a length, plain and sliding-window, and the loss per position.

- plain: non-overlapping chunks of ``length`` tokens, every token scored (context grows from 0 to length-1);
- sliding: windows of ``length`` moved by ``length // 4``, only each window's last quarter scored, so every scored
  token sees at least 3/4 of the window as context (the ALiBi paper's sliding evaluation, strided);
- per-position loss: the mean loss at each position of the plain chunks (where an encoding breaks).

Shapes: n chunks, L length.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ropekit.lab.model import TinyLM

__all__ = ["chunk_losses", "per_position_loss", "perplexity"]


def _chunks(data: torch.Tensor, length: int, stride: int, max_tokens: int) -> torch.Tensor:
    """Windows of ``length + 1`` tokens every ``stride``; ValueError when ``data`` is shorter than one window (the
    experiments check their corpus before training, :func:`ropekit.lab.experiments.common.check_corpus`)."""
    if data.numel() < length + 1:
        raise ValueError(f"{data.numel()} tokens of evaluation data hold no window of {length} + 1 tokens")
    n = min((data.numel() - length - 1) // stride + 1, max(1, max_tokens // length))
    idx = torch.arange(n).unsqueeze(1) * stride + torch.arange(length + 1)
    return data[idx].long()


@torch.no_grad()
def _losses(model: TinyLM, windows: torch.Tensor, batch_tokens: int = 16_384) -> torch.Tensor:
    L = windows.shape[1] - 1
    bs = max(1, batch_tokens // L)
    out = []
    for i in range(0, windows.shape[0], bs):
        w = windows[i : i + bs]
        logits, _ = model(w[:, :-1])
        out.append(F.cross_entropy(logits.transpose(1, 2), w[:, 1:], reduction="none"))
    return torch.cat(out)  # [n, L]


@torch.no_grad()
def chunk_losses(model: TinyLM, data: torch.Tensor, length: int, *, max_tokens: int = 65_536) -> torch.Tensor:
    """The loss of every token of the plain (non-overlapping) chunks, [n, length]: ``perplexity`` (plain) is
    exp of its mean and ``per_position_loss`` its mean over chunks, so one pass can give both."""
    model.eval()
    return _losses(model, _chunks(data, length, length, max_tokens))


@torch.no_grad()
def perplexity(
    model: TinyLM, data: torch.Tensor, length: int, *, sliding: bool = False, max_tokens: int = 65_536
) -> float:
    model.eval()
    if not sliding:
        return math.exp(float(_losses(model, _chunks(data, length, length, max_tokens)).mean()))
    stride = max(1, length // 4)
    losses = _losses(model, _chunks(data, length, stride, max_tokens * 4 // 4))
    return math.exp(float(losses[:, -stride:].mean()))


@torch.no_grad()
def per_position_loss(
    model: TinyLM, data: torch.Tensor, length: int, *, max_tokens: int = 65_536
) -> list[float]:
    model.eval()
    return _losses(model, _chunks(data, length, length, max_tokens)).mean(0).tolist()
