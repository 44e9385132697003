# SPDX-License-Identifier: MIT
"""Training loop of the lab: AdamW with warmup + cosine decay, deterministic per seed, progress with ETA and
throughput, and resumable checkpoints (:mod:`ropekit.lab.checkpoint`, re-exported here).

Shapes: b batch, L training length.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ropekit.lab.checkpoint import (
    CheckpointInfo,
    check_resume,
    checkpoint_info,
    load_checkpoint,
    save_checkpoint,
)
from ropekit.lab.distributed import world
from ropekit.lab.model import TinyLM

__all__ = [
    "CheckpointInfo",
    "Progress",
    "TrainResult",
    "check_resume",
    "checkpoint_info",
    "load_checkpoint",
    "save_checkpoint",
    "train",
]

PRECISIONS = ("fp32", "bf16")
Batcher = Callable[[torch.Generator], tuple[torch.Tensor, torch.Tensor]]


class Progress:
    """A one-line progress bar on stderr (a line every 25% when stderr is not a terminal)."""

    def __init__(self, total: int, desc: str) -> None:
        self.total, self.desc, self.t0, self.last = total, desc, time.perf_counter(), 0.0
        self.tty = sys.stderr.isatty()
        self.next_mark = 0.25

    def update(self, i: int, info: str = "") -> None:
        now = time.perf_counter()
        frac = i / max(1, self.total)
        if self.tty and now - self.last < 0.5 and i < self.total:
            return
        if not self.tty and frac < self.next_mark and i < self.total:
            return
        self.last = now
        self.next_mark = math.floor(frac * 4) / 4 + 0.25
        el = now - self.t0
        eta = el / frac - el if frac > 0 else 0.0
        line = f"{self.desc} {i}/{self.total} {info} ETA {int(eta) // 60}m{int(eta) % 60:02d}s"
        print(
            ("\r" + line) if self.tty else line,
            end="" if self.tty and i < self.total else "\n",
            file=sys.stderr,
            flush=True,
        )


@dataclass
class TrainResult:
    steps: int
    final_loss: float
    tokens_per_second: float
    seconds: float
    losses: list[float] = field(default_factory=list)
    resumed_from: int = 0


def _lr(step: int, steps: int, lr: float, warmup: int) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def train(
    model: TinyLM,
    batcher: Batcher,
    *,
    steps: int,
    seed: int,
    lr: float = 1e-3,
    desc: str = "train",
    ckpt: Path | None = None,
    ckpt_every: int = 200,
    meta: dict[str, Any] | None = None,
    precision: str = "fp32",
    compile: bool = False,
    threads: int | str | None = None,
) -> TrainResult:
    """Train ``model`` for ``steps`` steps on batches from ``batcher(gen)``; resumes from ``ckpt`` if present.

    ``meta`` (JSON) says what else determines the trained model (the data, the encoding's settings, the batch
    size ...); the checkpoint records it with ``steps``, ``seed``, ``lr`` and ``precision``, and a checkpoint is
    resumed only when it records the same values and the same model config (else ValueError naming the file and
    each differing field: :func:`~ropekit.lab.checkpoint.check_resume`).

    ``precision``: "fp32", or "bf16" (mixed: float32 weights, optimizer and loss; the linear layers' matmuls in
    bfloat16 under ``torch.autocast``; attention and RoPE stay float32, see :mod:`ropekit.lab.model`).
    ``compile``: train through ``torch.compile`` (the weights are shared with ``model``).
    ``threads``: torch threads while training (restored after): an integer, ``"auto"``
    (:func:`ropekit.lab.throughput.choose_threads`: fewer threads than cores when other processes load the
    machine), or None (torch's setting).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if not (threads is None or threads == "auto" or (type(threads) is int and threads > 0)):
        raise ValueError(f"threads must be a positive int, 'auto' or None, got {threads!r}")
    from ropekit.lab.throughput import choose_threads, threads_set

    n = choose_threads(model.cfg) if threads == "auto" else threads
    with threads_set(n if isinstance(n, int) else None):
        return _train(model, batcher, steps, seed, lr, desc, ckpt, ckpt_every, meta, precision, compile)


def _train(
    model: TinyLM,
    batcher: Batcher,
    steps: int,
    seed: int,
    lr: float,
    desc: str,
    ckpt: Path | None,
    ckpt_every: int,
    meta: dict[str, Any] | None,
    precision: str,
    compile: bool,
) -> TrainResult:
    rank, size = world()  # data-parallel under torchrun (see ropekit.lab.distributed)
    if size > 1 and compile:
        raise ValueError("compile=True is not supported with data-parallel training; use one or the other")
    meta = dict(meta or {}, steps=steps, seed=seed, lr=lr, precision=precision)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    start = 0
    if ckpt is not None and ckpt.exists():
        check_resume(ckpt, model.cfg, meta)  # a checkpoint of another run (corpus, encoding, ...) is refused
        done = checkpoint_info(ckpt).step
        if done > steps:  # before anything is loaded
            raise ValueError(
                f"lab checkpoint {str(ckpt)!r} records step {done}, past this run's steps={steps}; it cannot be "
                "resumed by this run"
            )
        start, _ = load_checkpoint(ckpt, model, opt, gen)  # checks the optimizer and generator state too
    warmup = max(1, min(100, steps // 10))
    prog, losses, tokens, t0 = Progress(steps, desc), [], 0, time.perf_counter()
    model.train()
    fwd = torch.compile(model) if compile else model
    if size > 1:
        from torch.nn.parallel import DistributedDataParallel

        fwd = DistributedDataParallel(model)
    for step in range(start, steps):
        x, y = batcher(gen)  # the global batch, the same on every rank
        if size > 1:
            if x.shape[0] % size:
                raise ValueError(
                    f"the batch of {x.shape[0]} rows does not split evenly over {size} processes"
                )
            x, y = x.chunk(size)[rank], y.chunk(size)[rank]
        for g in opt.param_groups:
            g["lr"] = _lr(step, steps, lr, warmup)
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits, _ = fwd(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]  # torch declares Tensor.backward without annotations
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        tokens += x.numel() * size
        val = loss.detach()
        if size > 1:
            torch.distributed.all_reduce(val)
            val = val / size
        losses.append(val.item())
        el = time.perf_counter() - t0
        if rank == 0:
            prog.update(step + 1, f"loss {losses[-1]:.3f} {tokens / max(el, 1e-9):,.0f} tok/s")
        if rank == 0 and ckpt is not None and ((step + 1) % ckpt_every == 0 or step + 1 == steps):
            save_checkpoint(ckpt, model, opt, step + 1, gen, meta)
    model.eval()
    el = time.perf_counter() - t0
    return TrainResult(
        steps, losses[-1] if losses else float("nan"), tokens / el if tokens else 0.0, el, losses, start
    )
