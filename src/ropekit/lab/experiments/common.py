# SPDX-License-Identifier: MIT
"""Shared plumbing of the lab's experiments: budgets, trained models (checkpointed, resumable) and outputs
(a JSON result, a PNG plot and a Markdown table per experiment under ``--out``)."""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ropekit.lab.data import Corpus, train_batch
from ropekit.lab.model import LMConfig, TinyLM
from ropekit.lab.train import PRECISIONS, TrainResult, train

__all__ = ["Budget", "budget", "environment", "md_table", "prepare", "trained_model", "write_outputs"]


@dataclass(frozen=True)
class Budget:
    steps: int  # training steps per model
    batch: int  # sequences per step (batch * train_len tokens)
    eval_tokens: int  # tokens per perplexity evaluation
    ft_steps: int  # fine-tuning steps (scaling)
    lr: float = 1e-3  # peak learning rate (linear warm-up over 10% of the steps, then cosine decay to 10%)
    precision: str = "fp32"  # the trainer's precision: "fp32" or "bf16" (mixed; see ropekit.lab.train)


def budget(quick: bool, steps: int | None = None, tiny: bool = False, precision: str | None = None) -> Budget:
    """Budgets: tiny (tests), quick (under 5 minutes idle for 6 encodings: 250 steps of 32 x 128 bytes at peak
    lr 3e-3, bf16-mixed matmuls), full (800 steps at 1e-3, float32 -- the settings of the committed full runs)."""
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if tiny:
        return Budget(steps or 4, 4, 1024, 2, 1e-3, precision or "fp32")
    if quick:
        return Budget(steps or 250, 32, 16384, 40, 3e-3, precision or "bf16")
    return Budget(steps or 800, 32, 65536, 100, 1e-3, precision or "fp32")


def prepare(
    quick: bool, steps: int | None, tiny: bool, corpus: str | None, precision: str | None = None
) -> tuple[Budget, Corpus]:
    """The budget and the corpus every experiment starts from (a small corpus cap for the tiny test budget)."""
    from ropekit.lab.data import load_corpus

    b = budget(quick, steps, tiny, precision)
    return b, load_corpus(corpus, max_bytes=400_000 if tiny else 8_000_000)


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
    }


def trained_model(
    encoding: str,
    corpus: Corpus,
    *,
    train_len: int,
    b: Budget,
    seed: int,
    out: Path,
    tag: str | None = None,
    batcher: Callable[[torch.Generator], tuple[torch.Tensor, torch.Tensor]] | None = None,
    **encoding_kw: Any,
) -> tuple[TinyLM, TrainResult]:
    """A model trained (or resumed from ``out/ckpt``) with the same budget and seed as its siblings."""
    torch.manual_seed(seed)
    model = TinyLM(LMConfig(encoding=encoding, max_positions=train_len), **encoding_kw)
    tag = tag or encoding
    suffix = "" if (b.lr, b.precision) == (1e-3, "fp32") else f"-lr{b.lr:g}-{b.precision}"
    ckpt = out / "ckpt" / f"{tag}-L{train_len}-n{b.steps}-s{seed}{suffix}.safetensors"
    batcher = batcher or (lambda g: train_batch(corpus.train, b.batch, train_len, g))
    res = train(
        model,
        batcher,
        steps=b.steps,
        seed=seed,
        lr=b.lr,
        precision=b.precision,
        desc=f"[{tag} seed {seed} {b.precision}]",
        ckpt=ckpt,
        meta={"encoding": encoding, "train_len": train_len, "tag": tag},
    )
    return model, res


def write_outputs(
    out: Path, name: str, result: dict[str, Any], markdown: str, plot: Callable[[Any], None] | None
) -> dict[str, str]:
    """Write ``name``.json, ``name``.md and (with matplotlib) ``name``.png into ``out``; returns the paths.
    In data-parallel runs only rank 0 writes into ``out``; the other ranks write into a temporary folder."""
    from ropekit.lab.distributed import is_main

    if not is_main():
        import tempfile

        out = Path(tempfile.mkdtemp(prefix="ropekit-lab-rank-"))
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": str(out / f"{name}.json"), "markdown": str(out / f"{name}.md")}
    (out / f"{name}.json").write_text(json.dumps(result, indent=2, sort_keys=False) + "\n")
    if plot is not None:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            fig = plt.figure(figsize=(11, 4.5))
            plot(fig)
            fig.tight_layout()
            fig.savefig(out / f"{name}.png", dpi=110)
            plt.close(fig)
            paths["png"] = str(out / f"{name}.png")
            markdown += f"\n![{name}]({name}.png)\n"
        except ImportError:
            markdown += "\n(plot skipped: matplotlib is not installed; `pip install 'ropekit[plot]'`)\n"
    (out / f"{name}.md").write_text(markdown)
    return paths


def md_table(header: list[str], rows: list[list[Any]]) -> str:
    def fmt(v: Any) -> str:
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"
