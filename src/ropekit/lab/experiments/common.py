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
from ropekit.lab.train import TrainResult, train

__all__ = ["Budget", "budget", "environment", "md_table", "prepare", "trained_model", "write_outputs"]


@dataclass(frozen=True)
class Budget:
    steps: int  # training steps per model
    batch: int  # sequences per step (batch * train_len tokens)
    eval_tokens: int  # tokens per perplexity evaluation
    ft_steps: int  # fine-tuning steps (scaling)


def budget(quick: bool, steps: int | None = None, tiny: bool = False) -> Budget:
    if tiny:  # tests
        return Budget(steps or 4, 4, 1024, 2)
    if quick:
        return Budget(steps or 100, 32, 8192, 20)
    return Budget(steps or 800, 32, 65536, 100)


def prepare(quick: bool, steps: int | None, tiny: bool, corpus: str | None) -> tuple[Budget, Corpus]:
    """The budget and the corpus every experiment starts from (a small corpus cap for the tiny test budget)."""
    from ropekit.lab.data import load_corpus

    return budget(quick, steps, tiny), load_corpus(corpus, max_bytes=400_000 if tiny else 8_000_000)


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
    ckpt = out / "ckpt" / f"{tag}-L{train_len}-n{b.steps}-s{seed}.safetensors"
    batcher = batcher or (lambda g: train_batch(corpus.train, b.batch, train_len, g))
    res = train(
        model,
        batcher,
        steps=b.steps,
        seed=seed,
        desc=f"[{tag} seed {seed}]",
        ckpt=ckpt,
        meta={"encoding": encoding, "train_len": train_len, "tag": tag},
    )
    return model, res


def write_outputs(
    out: Path, name: str, result: dict[str, Any], markdown: str, plot: Callable[[Any], None] | None
) -> dict[str, str]:
    """Write ``name``.json, ``name``.md and (with matplotlib) ``name``.png into ``out``; returns the paths."""
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
