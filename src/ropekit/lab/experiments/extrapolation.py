# SPDX-License-Identifier: MIT
"""``ropekit lab extrapolation``: train every encoding with the same budget and seed at ``train_len``; validation
perplexity at 1x, 2x, 4x, 8x (plain and sliding-window) and per-position loss at 8x. Compared with ALiBi's Table 2
(Press et al. 2022, WikiText-103, 247M parameters, L_train 512)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from ropekit.lab.evaluate import per_position_loss, perplexity
from ropekit.lab.experiments.common import environment, md_table, prepare, trained_model, write_outputs

__all__ = ["ENCODINGS", "run"]

ENCODINGS = ("nope", "sinusoidal", "learned", "alibi", "t5", "rope")
# ALiBi Table 2 (non-overlapping), ppl at L_valid / L_train = 1, ~2 (1012/512), ~5 (2512/512), ~15 (7512/512).
PUBLISHED = {
    "sinusoidal": (20.05, 43.54, 132.41, 293.02),
    "rope": (20.07, 21.37, 31.58, 51.12),
    "t5": (19.65, 18.79, 20.41, 39.29),
    "alibi": (19.73, 18.73, 18.41, 18.33),
}


def run(
    out: Path,
    *,
    quick: bool = False,
    tiny: bool = False,
    seeds: int = 1,
    train_len: int = 128,
    steps: int | None = None,
    corpus: str | None = None,
    encodings: tuple[str, ...] = ENCODINGS,
) -> dict[str, Any]:
    b, data = prepare(quick, steps, tiny, corpus)
    mults = (1, 2, 4, 8)
    results, per_pos, throughput = [], {}, {}
    for enc in encodings:
        for seed in range(seeds):
            model, tr = trained_model(enc, data, train_len=train_len, b=b, seed=seed, out=out)
            throughput[enc] = (
                round(tr.tokens_per_second)
                if tr.resumed_from < tr.steps
                else throughput.get(enc, "checkpoint")
            )
            for m in mults:
                L = m * train_len
                results.append(
                    {
                        "encoding": enc,
                        "seed": seed,
                        "eval_len": L,
                        "ppl": perplexity(model, data.valid, L, max_tokens=b.eval_tokens),
                        "ppl_sliding": perplexity(
                            model, data.valid, L, sliding=True, max_tokens=b.eval_tokens
                        ),
                    }
                )
            if seed == 0:
                per_pos[enc] = per_position_loss(model, data.valid, 8 * train_len, max_tokens=b.eval_tokens)
    result = {
        "experiment": "extrapolation",
        "train_len": train_len,
        "budget": b.__dict__,
        "corpus": data.source,
        "environment": environment(),
        "tokens_per_second": throughput,
        "results": results,
        "per_position_loss": per_pos,
    }
    md = _markdown(result, encodings, mults)

    def plot(fig: Any) -> None:
        from ropekit.lab import plots

        plots.extrapolation(fig, result, quick=quick)

    result["files"] = write_outputs(out, "extrapolation", result, md, plot)
    return result


def _mean(results: list[dict], enc: str, L: int, key: str) -> float:
    return statistics.mean(r[key] for r in results if r["encoding"] == enc and r["eval_len"] == L)


def _markdown(res: dict[str, Any], encodings: tuple[str, ...], mults: tuple[int, ...]) -> str:
    L, rs = res["train_len"], res["results"]
    rows = [
        [e]
        + [_mean(rs, e, m * L, "ppl") for m in mults]
        + [_mean(rs, e, m * L, "ppl_sliding") for m in mults]
        for e in encodings
    ]
    head = ["encoding"] + [f"{m}x plain" for m in mults] + [f"{m}x sliding" for m in mults]
    md = f"# Extrapolation: train at {L}, evaluate at 1x-8x\n\n"
    md += (
        f"Byte-level LM (4 layers, d 128, 4 heads of 32, GQA 2 kv heads), {res['budget']['steps']} steps of "
        f"{res['budget']['batch']} x {L} bytes, same seed for every encoding; corpus `{res['corpus']}` (split by file). "
        f"Throughput (tokens/s): {res['tokens_per_second']}. The learned table has {L} rows; positions past it reuse the last row.\n\n"
    )
    md += md_table(head, rows)
    md += "\nPublished (ALiBi Table 2, WikiText-103, 247M parameters, L_train 512; columns at L_valid/L_train = 1, ~2, ~5, ~15):\n\n"
    md += md_table(["encoding", "1x", "~2x", "~5x", "~15x"], [[k, *v] for k, v in PUBLISHED.items()])
    md += "\n## Claims\n\n" + "\n".join(f"- {c}" for c in _claims(rs, L, encodings)) + "\n"
    return md


def _claims(rs: list[dict], L: int, encodings: tuple[str, ...]) -> list[str]:
    have = set(encodings)
    r = {e: {m: _mean(rs, e, m * L, "ppl") for m in (1, 2, 4, 8)} for e in encodings}
    out = []

    def say(text: str, ok: bool) -> None:
        out.append(f"{text}: {'**reproduced**' if ok else '**not reproduced** at this scale'}")

    if "learned" in have:
        say(
            f"learned absolute positions cannot go past their table (ppl 1x {r['learned'][1]:.2f} -> 2x {r['learned'][2]:.2f})",
            r["learned"][2] > 1.2 * r["learned"][1],
        )
    if {"sinusoidal", "rope"} <= have:
        say(
            f"sinusoidal extrapolates worse than RoPE (4x: {r['sinusoidal'][4]:.2f} vs {r['rope'][4]:.2f})",
            r["sinusoidal"][4] > r["rope"][4],
        )
    if "rope" in have:
        say(
            f"RoPE degrades beyond the trained length (ppl 1x {r['rope'][1]:.2f} -> 8x {r['rope'][8]:.2f})",
            r["rope"][8] > 1.2 * r["rope"][1],
        )
    if "alibi" in have:
        say(
            f"ALiBi extrapolates (ppl 1x {r['alibi'][1]:.2f} -> 8x {r['alibi'][8]:.2f}, within 10%)",
            r["alibi"][8] <= 1.1 * r["alibi"][1],
        )
    order = [e for e in ("alibi", "t5", "rope", "sinusoidal") if e in have]
    if len(order) == 4:
        measured = sorted(order, key=lambda e: r[e][4])
        say(
            f"ordering at 4x ALiBi < T5 < RoPE < sinusoidal (measured: {' < '.join(measured)})",
            measured == order,
        )
    return out
