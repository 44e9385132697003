# SPDX-License-Identifier: MIT
"""Shared plumbing of the lab's experiments: budgets, trained models (checkpointed, resumable) and outputs
(a JSON result, a PNG plot and a Markdown table per experiment under ``--out``)."""

from __future__ import annotations

import json
import platform
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

import torch

from ropekit.lab.checkpoint import SCALING_CLASS_KEY
from ropekit.lab.data import Corpus, train_batch
from ropekit.lab.model import LMConfig, TinyLM
from ropekit.lab.train import PRECISIONS, TrainResult, check_resume, train
from ropekit.scaling import Scaling

__all__ = [
    "SCALING_CLASS_KEY",
    "Budget",
    "ModelPlan",
    "budget",
    "check_corpus",
    "check_encodings",
    "check_plans",
    "check_seeds",
    "environment",
    "md_table",
    "model_plan",
    "prepare",
    "trained_model",
    "write_outputs",
]

Batcher = Callable[[torch.Generator], tuple[torch.Tensor, torch.Tensor]]


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
    quick: bool,
    steps: int | None,
    tiny: bool,
    corpus: str | None,
    precision: str | None = None,
    *,
    train_len: int,
    train_mult: int = 1,
    valid_mult: int = 8,
) -> tuple[Budget, Corpus]:
    """The budget and the corpus every experiment starts from (a small corpus cap for the tiny test budget),
    checked by :func:`check_corpus` for windows of ``train_mult`` and ``valid_mult`` x ``train_len``."""
    from ropekit.lab.data import load_corpus

    b = budget(quick, steps, tiny, precision)
    data = load_corpus(corpus, max_bytes=400_000 if tiny else 8_000_000)
    check_corpus(data, train_len, train_mult=train_mult, valid_mult=valid_mult)
    return b, data


def check_corpus(data: Corpus, train_len: int, *, train_mult: int = 1, valid_mult: int = 8) -> None:
    """Refuse, before any training, a corpus whose training split holds no training window of ``train_mult`` x
    ``train_len`` bytes (+ 1 target, + 1 for a choice of start) or whose validation split holds no evaluation window
    of ``valid_mult`` x ``train_len`` (+ 1): ValueError naming the corpus, both split sizes and what is needed."""
    need_t, need_v = train_mult * train_len + 2, valid_mult * train_len + 1
    nt, nv = data.train.numel(), data.valid.numel()
    if nt < need_t or nv < need_v:
        raise ValueError(
            f"corpus {data.source!r} (--corpus; {data.split}) is too small for --train-len {train_len}: its "
            f"training split holds {nt:,} bytes (needs >= {need_t:,}: {train_mult} x {train_len} + 2) and its "
            f"validation split {nv:,} (needs >= {need_v:,} for evaluation at {valid_mult} x {train_len} + 1); "
            "give a larger corpus or a shorter --train-len"
        )


def check_encodings(encodings: tuple[str, ...]) -> None:
    """Refuse an empty or repeated encoding list (ValueError naming the repeats): a repeated encoding trains the
    same model again (same seed, same checkpoint), which a verdict would count as another seed."""
    if not encodings:
        raise ValueError("encodings (--encodings) must name at least one encoding, got none")
    repeated = sorted({e for e in encodings if encodings.count(e) > 1})
    if repeated:
        raise ValueError(
            f"encodings (--encodings) lists {', '.join(map(repr, repeated))} more than once "
            f"({','.join(encodings)}): each encoding is trained once per seed; use --seeds for more seeds"
        )


def check_seeds(seeds: int, first_seed: int = 0) -> range:
    """The seeds of a run, ``first_seed .. first_seed + seeds - 1``; ValueError unless ``seeds`` >= 1 and
    ``first_seed`` >= 0 are ints."""
    if type(seeds) is not int or seeds < 1:
        raise ValueError(f"seeds (--seeds) must be an int >= 1, got {seeds!r}")
    if type(first_seed) is not int or first_seed < 0:
        raise ValueError(f"first_seed (--first-seed) must be an int >= 0, got {first_seed!r}")
    return range(first_seed, first_seed + seeds)


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
    }


@dataclass(frozen=True)
class ModelPlan:
    """One model to train (or resume from ``ckpt``) and everything that determines it (``meta``, recorded in the
    checkpoint and compared on resume: :func:`ropekit.lab.checkpoint.check_resume`)."""

    cfg: LMConfig
    ckpt: Path
    meta: dict[str, Any]
    b: Budget
    seed: int
    train_len: int
    tag: str
    corpus: Corpus | None  # the default batches' source (windows of its training split)
    encoding_kw: dict[str, Any]

    def check(self) -> None:
        """ValueError naming the checkpoint when one exists and was written by another run."""
        if self.ckpt.exists():
            check_resume(self.ckpt, self.cfg, self.meta)


def _plain(v: Any) -> Any:
    """``v`` with its dataclasses as dicts of their fields (``dataclasses.asdict``'s form), recursively, and each
    :class:`~ropekit.scaling.Scaling` among them also naming its class (:data:`SCALING_CLASS_KEY`: two schemes
    with the same field names stay apart)."""
    if is_dataclass(v) and not isinstance(v, type):
        d = {f.name: _plain(getattr(v, f.name)) for f in fields(v)}
        return {SCALING_CLASS_KEY: type(v).__name__, **d} if isinstance(v, Scaling) else d
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _json(value: Any) -> Any:
    """``value`` as JSON data, for the checkpoint's identity: dataclasses such as a RopeSpec as dicts of their
    fields, a scaling scheme's with its class name under :data:`SCALING_CLASS_KEY` (e.g. ``{"class": "Yarn",
    "factor": 4.0, ...}``); anything else JSON cannot hold as its ``repr``. Nothing is pickled."""
    return json.loads(json.dumps(_plain(value), default=repr))


def model_plan(
    encoding: str,
    data: Corpus | dict[str, Any],
    *,
    train_len: int,
    b: Budget,
    seed: int,
    out: Path,
    tag: str | None = None,
    **encoding_kw: Any,
) -> ModelPlan:
    """The model ``encoding`` trained at ``train_len`` with budget ``b`` and ``seed``, checkpointed under
    ``out/ckpt``. ``data``: the corpus it trains on (windows of its training split), or a JSON identity of the
    batches a caller's batcher gives (e.g. a synthetic task). ``encoding_kw`` go to the encoding (e.g. ``spec=``)."""
    tag = tag or encoding
    suffix = "" if (b.lr, b.precision) == (1e-3, "fp32") else f"-lr{b.lr:g}-{b.precision}"
    corpus = data if isinstance(data, Corpus) else None
    meta = {
        "encoding": encoding,
        "encoding_kw": _json(encoding_kw),
        "train_len": train_len,
        "tag": tag,
        "data": corpus.identity if corpus is not None else _json(data),
        "batch": b.batch,
        "steps": b.steps,
        "seed": seed,
        "lr": b.lr,
        "precision": b.precision,
    }
    return ModelPlan(
        LMConfig(encoding=encoding, max_positions=train_len),
        out / "ckpt" / f"{tag}-L{train_len}-n{b.steps}-s{seed}{suffix}.safetensors",
        meta,
        b,
        seed,
        train_len,
        tag,
        corpus,
        encoding_kw,
    )


def trained_model(plan: ModelPlan, batcher: Batcher | None = None) -> tuple[TinyLM, TrainResult]:
    """The model of ``plan`` trained (or resumed from its checkpoint, refused when another run wrote it) with
    batches from ``batcher`` (default: windows of the plan's corpus)."""
    if batcher is None:
        corpus, b, n = plan.corpus, plan.b, plan.train_len
        if corpus is None:
            raise ValueError("trained_model: a plan whose data is not a corpus needs a batcher")

        def batcher(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
            return train_batch(corpus.train, b.batch, n, g)

    torch.manual_seed(plan.seed)
    model = TinyLM(plan.cfg, **plan.encoding_kw)
    res = train(
        model,
        batcher,
        steps=plan.b.steps,
        seed=plan.seed,
        lr=plan.b.lr,
        precision=plan.b.precision,
        desc=f"[{plan.tag} seed {plan.seed} {plan.b.precision}]",
        ckpt=plan.ckpt,
        meta=plan.meta,
    )
    return model, res


def check_plans(plans: Iterable[ModelPlan]) -> list[ModelPlan]:
    """Every plan's existing checkpoint checked (:meth:`ModelPlan.check`) before any model trains; the plans."""
    plans = list(plans)
    for p in plans:
        p.check()
    return plans


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
