# SPDX-License-Identifier: MIT
"""``ropekit lab passkey``: retrieval accuracy against context length for each encoding.

Each encoding is trained (same budget and seed) on passkey sequences of ``train_len`` bytes -- a 5-digit key
hidden at a random depth in filler, then "What is the pass key? The pass key is" -- and asked to generate the key
greedily at 1x-8x that length, at depths 0.1..0.9 (exact match of all 5 digits). Compared with the passkey results
of Chen et al. 2023 (PI, Table 4) and Peng et al. 2024 (YaRN, Table 5), and the synthetic-task ordering of
Kazemnejad et al. 2023 (NoPE best on length generalisation, RoPE poor past ~1.5x).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from ropekit.lab.data import PASSKEY_MIN_LENGTH, passkey_batch, passkey_training_batch
from ropekit.lab.experiments.common import (
    budget,
    check_encodings,
    check_plans,
    check_seeds,
    environment,
    md_table,
    model_plan,
    trained_model,
    write_outputs,
)
from ropekit.lab.model import TinyLM
from ropekit.lab.verdicts import Verdict, above, below, greater

__all__ = ["accuracy", "claims", "run"]

ENCODINGS = ("nope", "sinusoidal", "learned", "alibi", "t5", "rope")
#: peak learning rate of the full passkey run (the quick mode's; a RoPE model copies the key after ~500 steps there)
PEAK_LR = 3e-3


@torch.no_grad()
def accuracy(model: TinyLM, length: int, trials: int, seed: int) -> float:
    """Exact-key accuracy of greedy decoding with a context of ``length`` tokens: sequences of ``length + 1`` bytes,
    prompt up to the answer, 5 digits generated (the last digit is predicted at position ``length - 1``). A context
    of the training length is then exactly the training sequences' (:func:`passkey_training_batch` trains on
    ``train_len + 1`` bytes); one byte shorter, a model that learned to copy in training can miss by one digit."""
    length += 1
    g = torch.Generator().manual_seed(seed)
    hits = 0
    depths = [0.1 + 0.8 * i / max(1, trials - 1) for i in range(trials)]
    for d in depths:
        tokens, key, start = passkey_batch(1, length, g, depth=d)
        out = model.generate(tokens[:, :start], 5)
        hits += int(torch.equal(out, key))
    return hits / trials


def run(
    out: Path,
    *,
    quick: bool = False,
    tiny: bool = False,
    seeds: int = 1,
    train_len: int = 128,
    steps: int | None = None,
    corpus: str | None = None,
    precision: str | None = None,
    encodings: tuple[str, ...] = ENCODINGS,
) -> dict[str, Any]:
    """Train every encoding on passkey sequences and measure its retrieval accuracy; JSON + PNG + Markdown in
    ``out``. The sequences are synthetic (filler text around a key), so there is no corpus: ``corpus`` is refused
    rather than ignored. Refused before any work (ValueError): a ``corpus``, a ``train_len`` too short for one
    passkey sequence, a repeated encoding, a checkpoint in ``out`` that another run wrote."""
    if corpus is not None:
        raise ValueError(
            f"lab passkey does not take a corpus (--corpus {corpus!r}): its sequences are synthetic filler text "
            "around a hidden key"
        )
    if type(train_len) is not int or train_len < PASSKEY_MIN_LENGTH - 1:  # trains on train_len + 1 bytes
        raise ValueError(
            f"--train-len {train_len!r} is too short for the passkey task (needs >= {PASSKEY_MIN_LENGTH - 1}: "
            "the needle, the question and the 5-digit answer)"
        )
    seed_range = check_seeds(seeds)
    check_encodings(encodings)
    b = budget(quick, steps, tiny, precision)
    if (
        not quick and not tiny
    ):  # copying emerges late: at the full budget's 1e-3 the models had not learned it
        b = dataclasses.replace(b, lr=PEAK_LR)
    trials = 3 if tiny else (10 if quick else 20)
    mults = (1, 2, 4) if tiny else (1, 2, 4, 8)
    task = {"task": "passkey", "targets": "the key's two copies"}  # the data: synthetic, no corpus
    plans = check_plans(
        # tag: loss on the key's copies (older checkpoints: every byte)
        model_plan(enc, task, train_len=train_len, b=b, seed=seed, out=out, tag=f"passkey-copies-{enc}")
        for enc in encodings
        for seed in seed_range
    )
    rows: list[dict[str, Any]] = []
    tput: dict[str, Any] = {}
    for plan in plans:
        enc, seed = plan.cfg.encoding, plan.seed
        model, tr = trained_model(plan, lambda g: passkey_training_batch(b.batch, train_len, g))
        tput[enc] = round(tr.tokens_per_second)
        for m in mults:
            rows.append(
                {
                    "encoding": enc,
                    "seed": seed,
                    "length": m * train_len,
                    "accuracy": accuracy(model, m * train_len, trials, 7 + seed),
                }
            )
    result = {
        "experiment": "passkey",
        "train_len": train_len,
        "budget": b.__dict__,
        "trials": trials,
        "corpus": None,  # synthetic sequences (see the module docstring)
        "environment": environment(),
        "tokens_per_second": tput,
        "results": rows,
    }

    def mean(enc: str, L: int) -> float:
        v: list[float] = [r["accuracy"] for r in rows if r["encoding"] == enc and r["length"] == L]
        return sum(v) / len(v)

    md = f"# Passkey retrieval: trained at {train_len}, tested at up to {mults[-1]}x\n\n"
    md += (
        f"{b.steps} training steps of {b.batch} passkey sequences (peak lr {b.lr:g}; loss on the key's two copies "
        f"only); {trials} trials per length at depths 0.1..0.9.\n\n"
    )
    md += md_table(
        ["encoding"] + [f"{m}x" for m in mults],
        [[e] + [mean(e, m * train_len) for m in mults] for e in encodings],
    )
    md += (
        "\nPublished: PI Table 4 (LLaMA 7B): direct fine-tuning to 8192 reaches an effective passkey window of 1792-2560 "
        "tokens, PI the full 8192 after 200 steps; YaRN Table 5: YaRN-7B s32 99.4% up to 128k. Kazemnejad et al. "
        "(synthetic tasks, train <= 20, test 2x): NoPE generalises best, RoPE poorly.\n\n## Claims\n\n"
    )
    md += "\n".join(f"- {v.line()}" for v in claims(result)) + "\n"
    best = max(mean(e, train_len) for e in encodings)
    if best < 0.5:
        md += (
            f"\nNo encoding learned the task in-distribution with this budget (best mean accuracy at 1x: "
            f"{best:.2f}), so the length claims are not testable here.\n"
        )

    def plot(fig: Any) -> None:
        from ropekit.lab import plots

        plots.passkey(fig, result, quick=quick)

    result["files"] = write_outputs(out, "passkey", result, md, plot)
    return result


def claims(res: dict[str, Any]) -> list[Verdict]:
    """Claims judged per seed on the retrieval accuracy (:mod:`ropekit.lab.verdicts`), from the result JSON alone
    (the encodings are those in its results; the longest length tested is the top multiple)."""
    rows, L = res["results"], res["train_len"]
    have = {r["encoding"] for r in rows}
    top = max(r["length"] for r in rows) // L

    def acc(enc: str, length: int) -> list[float]:  # one number per distinct seed (one trained model)
        by_seed = {r["seed"]: r["accuracy"] for r in rows if r["encoding"] == enc and r["length"] == length}
        return [by_seed[s] for s in sorted(by_seed)]

    out: list[Verdict] = []
    if "rope" in have:
        out.append(
            above("RoPE retrieves the key in-distribution", "accuracy at 1x of rope", acc("rope", L), 0.5)
        )
        out.append(
            below(
                "RoPE fails past its training length (PI Table 4: direct fine-tuning extends the passkey window "
                "slowly)",
                f"accuracy at {top}x of rope",
                acc("rope", top * L),
                0.5,
            )
        )
    if "alibi" in have:
        out.append(
            below(
                "ALiBi's local bias does not give long-range retrieval",
                f"accuracy at {top}x of alibi",
                acc("alibi", top * L),
                0.5,
            )
        )
    if {"nope", "rope"} <= have and top >= 2:
        out.append(
            greater(
                "NoPE generalises past the training length better than RoPE (Kazemnejad et al. 2023)",
                "accuracy at 2x",
                ("nope", acc("nope", 2 * L)),
                ("rope", acc("rope", 2 * L)),
            )
        )
    return out
