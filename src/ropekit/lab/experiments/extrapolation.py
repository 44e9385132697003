# SPDX-License-Identifier: MIT
"""``ropekit lab extrapolation``: train every encoding with the same budget and seed at ``train_len``; validation
perplexity at 1x, 2x, 4x, 8x (plain and sliding-window) and per-position loss at 8x. Compared with ALiBi's Table 2
(Press et al. 2022, WikiText-103, 247M parameters, L_train 512)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from ropekit.lab.data import unigram_perplexity
from ropekit.lab.evaluate import chunk_losses, perplexity
from ropekit.lab.experiments.common import (
    check_encodings,
    check_plans,
    check_seeds,
    environment,
    md_table,
    model_plan,
    prepare,
    trained_model,
    write_outputs,
)
from ropekit.lab.phases import PhaseClock
from ropekit.lab.verdicts import Verdict, above, below, greater, ordering

__all__ = ["ENCODINGS", "claims", "merge", "ratios", "run"]

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
    first_seed: int = 0,
    train_len: int = 128,
    steps: int | None = None,
    corpus: str | None = None,
    precision: str | None = None,
    encodings: tuple[str, ...] = ENCODINGS,
) -> dict[str, Any]:
    """Train every encoding for seeds ``first_seed .. first_seed + seeds - 1`` (another run with other seeds can be
    merged with this one, :func:`merge`) and evaluate it; JSON + PNG + Markdown in ``out``. Refused before any
    training (ValueError): a repeated encoding, a corpus too small for ``train_len``, a checkpoint in ``out`` that
    another run wrote."""
    seed_range = check_seeds(seeds, first_seed)
    check_encodings(encodings)
    clock = PhaseClock()
    with clock.phase("corpus"):
        b, data = prepare(quick, steps, tiny, corpus, precision, train_len=train_len, valid_mult=8)
        unigram = unigram_perplexity(data.train, data.valid)
    plans = check_plans(
        model_plan(enc, data, train_len=train_len, b=b, seed=seed, out=out)
        for enc in encodings
        for seed in seed_range
    )
    mults = (1, 2, 4, 8)
    results, per_pos = [], {}
    throughput: dict[str, int | str] = {}
    for plan in plans:
        enc, seed = plan.cfg.encoding, plan.seed
        with clock.phase(f"train {enc}"):
            model, tr = trained_model(plan)
        throughput[enc] = (
            round(tr.tokens_per_second) if tr.resumed_from < tr.steps else throughput.get(enc, "checkpoint")
        )
        with clock.phase("evaluate"):
            for m in mults:
                L = m * train_len
                losses = chunk_losses(model, data.valid, L, max_tokens=b.eval_tokens)
                if seed == first_seed and m == mults[-1]:  # per-position loss at 8x from the same pass
                    per_pos[enc] = losses.mean(0).tolist()
                results.append(
                    {
                        "encoding": enc,
                        "seed": seed,
                        "eval_len": L,
                        "ppl": math.exp(float(losses.mean())),
                        "ppl_sliding": perplexity(
                            model, data.valid, L, sliding=True, max_tokens=b.eval_tokens
                        ),
                    }
                )
    result = {
        "experiment": "extrapolation",
        "train_len": train_len,
        "budget": b.__dict__,
        "corpus": data.source,
        "corpus_identity": data.identity,
        "unigram_ppl": unigram,
        "first_seed": first_seed,  # the seed of per_position_loss
        "environment": environment(),
        "tokens_per_second": throughput,
        "results": results,
        "per_position_loss": per_pos,
    }
    with clock.phase("outputs"):
        files = _write(out, result, quick)
    result["phases"] = clock.as_dict()  # CPU and wall seconds per phase (ropekit.lab.phases)
    Path(files["json"]).write_text(json.dumps(result, indent=2) + "\n")
    result["files"] = files
    return result


def _write(out: Path, result: dict[str, Any], quick: bool) -> dict[str, str]:
    encodings = tuple(dict.fromkeys(r["encoding"] for r in result["results"]))
    mults = tuple(sorted({r["eval_len"] // result["train_len"] for r in result["results"]}))
    md = _markdown(result, encodings, mults)

    def plot(fig: Any) -> None:
        from ropekit.lab import plots

        plots.extrapolation(fig, result, quick=quick)

    return write_outputs(out, "extrapolation", result, md, plot)


_SAME = ("experiment", "train_len", "budget", "corpus", "unigram_ppl")


def merge(out: Path, paths: list[Path], *, quick: bool = False) -> dict[str, Any]:
    """One extrapolation result from several runs of the same experiment (e.g. the encodings split over
    processes or machines, or new encodings trained later): written to ``out`` like a run's outputs.

    The runs must agree on the training length, budget, corpus and its unigram perplexity (equal floats: the same
    data split) and, where both files record it, the corpus identity (sizes and content hash) -- else ValueError
    naming the field, the file and both values; an (encoding, seed) present in two files is refused too, so runs
    may split the encodings or the seeds (``first_seed``). Results keep each file's order; throughput and phases
    are kept per file; each encoding's per-position loss is that of its lowest seed.
    ``quick`` marks the figure as a quick run's.
    """
    if len(paths) < 2:
        raise ValueError(f"--merge needs at least two result files, got {len(paths)}")
    runs = [(p, _read_result(Path(p))) for p in paths]
    first_path, first = runs[0]
    seen: dict[tuple[str, int], tuple[int, Path]] = {}
    for i, (p, res) in enumerate(runs):
        both = [k for k in ("corpus_identity",) if k in res and k in first]  # older results lack it
        for key in (*_SAME, *both):
            if res.get(key) != first.get(key):
                raise ValueError(
                    f"--merge {p}: {key} = {res.get(key)!r} differs from {first_path}'s {first.get(key)!r} "
                    "(only runs of the same experiment, budget and corpus can be merged)"
                )
        for r in res["results"]:
            ks = (r["encoding"], r["seed"])
            if seen.get(ks, (i, p))[0] != i:
                raise ValueError(f"--merge {p}: encoding {ks[0]!r} seed {ks[1]} is also in {seen[ks][1]}")
            seen[ks] = (i, p)
    result = {key: first[key] for key in _SAME}
    ids = [r["corpus_identity"] for _, r in runs if "corpus_identity" in r]
    if ids:
        result["corpus_identity"] = ids[0]
    result["first_seed"] = min(r.get("first_seed", 0) for _, r in runs)
    result["environment"] = first.get("environment")
    result["tokens_per_second"] = {k: v for _, r in runs for k, v in r.get("tokens_per_second", {}).items()}
    result["results"] = [row for _, r in runs for row in r["results"]]
    by_seed = sorted(runs, key=lambda pr: -pr[1].get("first_seed", 0))  # the lowest seed's loss last, kept
    result["per_position_loss"] = {
        k: v for _, r in by_seed for k, v in r.get("per_position_loss", {}).items()
    }
    result["merged_from"] = [
        {
            "file": str(p),
            "encodings": sorted({row["encoding"] for row in r["results"]}),
            "seeds": sorted({row["seed"] for row in r["results"]}),
            "phases": r.get("phases"),
        }
        for p, r in runs
    ]
    result["files"] = _write(out, result, quick)
    return result


def _read_result(p: Path) -> dict[str, Any]:
    """An extrapolation result JSON for ``merge``; ValueError naming the ``--merge`` file when it is unreadable,
    not JSON, or not an extrapolation result with its rows."""
    try:
        res = json.loads(p.read_text())
    except OSError as e:
        raise ValueError(f"--merge {p}: cannot read it ({e.strerror or e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"--merge {p}: not a JSON file ({e})") from None
    if not isinstance(res, dict) or res.get("experiment") != "extrapolation":
        got = res.get("experiment") if isinstance(res, dict) else type(res).__name__
        raise ValueError(f"--merge {p}: not an extrapolation result (experiment={got!r})")
    lacking = [k for k in (*_SAME, "results") if k not in res]
    if lacking:
        raise ValueError(f"--merge {p}: an extrapolation result without {', '.join(lacking)}")
    rows = res.get("results")
    keys = ("encoding", "seed", "eval_len", "ppl", "ppl_sliding")
    if not isinstance(rows, list) or not all(isinstance(r, dict) and all(k in r for k in keys) for r in rows):
        raise ValueError(f"--merge {p}: 'results' must be a list of rows with {', '.join(keys)}")
    return res


def _mean(results: list[dict[str, Any]], enc: str, L: int, key: str) -> float:
    vals: list[float] = [r[key] for r in results if r["encoding"] == enc and r["eval_len"] == L]
    return statistics.mean(vals)


def _markdown(res: dict[str, Any], encodings: tuple[str, ...], mults: tuple[int, ...]) -> str:
    L, rs = res["train_len"], res["results"]
    rows = [
        [e]
        + [_mean(rs, e, m * L, "ppl") for m in mults]
        + [_mean(rs, e, m * L, "ppl_sliding") for m in mults]
        for e in encodings
    ]
    head = ["encoding"] + [f"{m}x plain" for m in mults] + [f"{m}x sliding" for m in mults]
    ident = res.get("corpus_identity")  # results written before it was recorded do not say how they split
    split = f" ({ident['split']}, {ident['train_bytes']:,} / {ident['valid_bytes']:,} bytes)" if ident else ""
    md = f"# Extrapolation: train at {L}, evaluate at 1x-8x\n\n"
    md += (
        f"Byte-level LM (4 layers, d 128, 4 heads of 32, GQA 2 kv heads), {res['budget']['steps']} steps of "
        f"{res['budget']['batch']} x {L} bytes, same seeds for every encoding; corpus `{res['corpus']}`{split}. "
        f"Throughput (tokens/s): {res['tokens_per_second']}."
        + (
            f" The learned table has {L} rows; positions past it reuse the last row."
            if "learned" in encodings
            else ""
        )
        + "\n\n"
    )
    md += md_table(head, rows)
    best, unigram = min(_mean(rs, e, L, "ppl") for e in encodings), res["unigram_ppl"]
    versus = (
        f"{unigram / best:.1f}x lower"
        if best <= unigram
        else f"{best / unigram:.1f}x higher: worse than the unigram baseline"
    )
    md += (
        f"\nBaseline: the corpus's unigram byte perplexity is {unigram:.2f}; the best model reaches "
        f"{best:.2f} at 1x ({versus}). Budget: peak lr {res['budget']['lr']:g} "
        f"(warm-up, cosine decay), {res['budget']['precision']} training, packed random windows.\n"
    )
    md += "\nPublished (ALiBi Table 2, WikiText-103, 247M parameters, L_train 512; columns at L_valid/L_train = 1, ~2, ~5, ~15):\n\n"
    md += md_table(["encoding", "1x", "~2x", "~5x", "~15x"], [[k, *v] for k, v in PUBLISHED.items()])
    md += "\n## Claims\n\n" + "\n".join(f"- {v.line()}" for v in claims(res)) + "\n"
    return md


def ratios(rs: list[dict[str, Any]], enc: str, L: int, m: int, key: str = "ppl") -> list[float]:
    """Degradation per seed: ppl at m x the training length divided by ppl at 1x (same seed); one number per
    distinct seed (one trained model), in seed order, however many rows repeat it."""

    def at(n: int) -> dict[int, float]:
        return {r["seed"]: r[key] for r in rs if r["encoding"] == enc and r["eval_len"] == n}

    one, far = at(L), at(m * L)
    return [far[s] / one[s] for s in sorted(far)]


def claims(res: dict[str, Any]) -> list[Verdict]:
    """The seeds' claims, each judged on ppl(n x)/ppl(1x) per seed (:mod:`ropekit.lab.verdicts`), from the
    result JSON alone (the encodings are those in its results)."""
    rs, L = res["results"], res["train_len"]
    have = {r["encoding"] for r in rs}

    def q(enc: str, m: int) -> tuple[str, list[float]]:
        return enc, ratios(rs, enc, L, m)

    out: list[Verdict] = []
    if "learned" in have:
        out.append(
            above(
                "learned absolute positions break past their table (seed 003)",
                "ppl(2x)/ppl(1x) of learned",
                q("learned", 2)[1],
                1.2,
            )
        )
    if {"sinusoidal", "rope"} <= have:
        out.append(
            greater(
                "sinusoidal extrapolates worse than RoPE (ALiBi Table 2)",
                "ppl(4x)/ppl(1x)",
                q("sinusoidal", 4),
                q("rope", 4),
            )
        )
    if "rope" in have:
        out.append(
            above("RoPE degrades beyond the trained length", "ppl(8x)/ppl(1x) of rope", q("rope", 8)[1], 1.2)
        )
    for enc, paper in (("alibi", "Press et al. 2022"), ("kerple-log", "Chi et al. 2022")):
        if enc in have:
            out.append(
                below(
                    f"{enc} extrapolates: within 10% of its 1x perplexity at 8x ({paper})",
                    f"ppl(8x)/ppl(1x) of {enc}",
                    q(enc, 8)[1],
                    1.1,
                )
            )
    for better in ("alibi", "nope"):
        if {better, "rope"} <= have:
            out.append(
                greater(
                    f"{better} degrades less than RoPE at 2x (Kazemnejad et al. 2023; Press et al. 2022)",
                    "ppl(2x)/ppl(1x)",
                    q("rope", 2),
                    q(better, 2),
                )
            )
    for enc in ("xpos", "fire"):
        if {enc, "rope"} <= have:
            out.append(
                greater(f"{enc} degrades less than RoPE at 4x", "ppl(4x)/ppl(1x)", q("rope", 4), q(enc, 4))
            )
    for enc in ("single-frequency", "dense-rotation"):
        if {enc, "rope"} <= have:
            out.append(
                greater(
                    f"seed 004's counter-example {enc} extrapolates worse than RoPE at 2x",
                    "ppl(2x)/ppl(1x)",
                    q(enc, 2),
                    q("rope", 2),
                )
            )
    order = [e for e in ("alibi", "t5", "rope", "sinusoidal") if e in have]
    if len(order) == 4:
        out.append(
            ordering(
                "degradation at 4x orders ALiBi < T5 < RoPE < sinusoidal (ALiBi Table 2)",
                "ppl(4x)/ppl(1x)",
                [q(e, 4) for e in order],
            )
        )
    return out
