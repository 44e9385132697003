# SPDX-License-Identifier: MIT
"""``ropekit lab vision``: small ViTs (:mod:`ropekit.lab.vit`) trained at an 8 x 8 patch grid on the synthetic
position task of :mod:`ropekit.lab.shapes` (label = absolute row half of A + whether B is right of A), evaluated on
the same scenes rendered at 8 x 8, 12 x 12 and 16 x 16, for no position, learned absolute (interpolated), 1-D
raster RoPE, 2-D axial RoPE and RoPE-Mixed.

Compared with the direction of RoPE-ViT's table (Heo et al., ECCV 2024, arXiv 2403.13298; ImageNet-1k trained at
224, tested at 384: DeiT-S APE 79.4, axial 80.0, mixed 81.8): axial and mixed beat the learned absolute table at
the higher resolution. Each claim is judged on the accuracy at the larger grid, seed by seed
(:mod:`ropekit.lab.verdicts`).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ropekit.lab import plots_vision, shapes
from ropekit.lab.experiments.common import check_encodings, environment, md_table, write_outputs
from ropekit.lab.verdicts import Verdict, below, greater
from ropekit.lab.vit import ENCODINGS, TinyViT, ViTConfig

__all__ = [
    "GRIDS",
    "PUBLISHED",
    "VisionBudget",
    "accuracy",
    "claims",
    "retention",
    "run",
    "train_vit",
    "values",
    "vision_budget",
]

GRIDS = (8, 12, 16)
TRAIN_GRID = 8
# RoPE-ViT Table (ImageNet-1k top-1, DeiT-S, trained at 224 = 14 x 14 patches, tested at 224 / 384 = 24 x 24)
PUBLISHED = {"learned": (80.4, 79.4), "rope-axial": (80.9, 80.0), "rope-mixed": (80.9, 81.8)}


@dataclass(frozen=True)
class VisionBudget:
    steps: int
    batch: int
    eval_scenes: int
    lr: float
    dim: int
    depth: int
    noise: float = 0.1
    weight_decay: float = 0.05


def vision_budget(quick: bool, steps: int | None = None, tiny: bool = False) -> VisionBudget:
    """tiny (tests: seconds); quick (250 steps, 500 test scenes: under 5 minutes idle on 2 cores); full (400
    steps, 1000 test scenes: the committed run, sized to a loaded 2-core machine). Models: dim 64, depth 3."""
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    if tiny:
        return VisionBudget(steps or 3, 8, 16, 1e-3, 32, 1)
    if quick:
        return VisionBudget(steps or 250, 64, 500, 2e-3, 64, 3)
    return VisionBudget(steps or 400, 64, 1000, 2e-3, 64, 3)


def _lr(step: int, total: int, peak: float) -> float:
    warm = max(1, total // 10)
    if step < warm:
        return peak * (step + 1) / warm
    t = (step - warm) / max(1, total - warm)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def train_vit(encoding: str, b: VisionBudget, seed: int) -> tuple[TinyViT, list[float]]:
    """One model, trained at the 8 x 8 grid on fresh scenes each step (AdamW, warm-up + cosine to 10%, no weight
    decay on the class token, position table and RoPE-Mixed frequencies). Deterministic given ``seed``."""
    torch.manual_seed(seed)
    init_gen = torch.Generator().manual_seed(1000 + seed)
    model = TinyViT(ViTConfig(encoding=encoding, dim=b.dim, depth=b.depth), generator=init_gen)
    skip = model.no_weight_decay()
    decay = [p for n, p in model.named_parameters() if p.requires_grad and n not in skip and p.dim() > 1]
    rest = [p for n, p in model.named_parameters() if p.requires_grad and (n in skip or p.dim() <= 1)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": b.weight_decay}, {"params": rest, "weight_decay": 0.0}], lr=b.lr
    )
    gen = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for step in range(b.steps):
        for grp in opt.param_groups:
            grp["lr"] = _lr(step, b.steps, b.lr)
        x, y = shapes.batch(b.batch, TRAIN_GRID, gen, noise=b.noise)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]  # torch declares Tensor.backward without annotations
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    return model, losses


@torch.no_grad()
def accuracy(model: TinyViT, scenes: shapes.Scenes, grid: int, noise: float, seed: int) -> dict[str, float]:
    """Accuracy on ``scenes`` rendered at ``grid``: overall, and of each label bit (absolute row half of A,
    relative left/right of B)."""
    gen = torch.Generator().manual_seed(10_000 + seed)
    y = shapes.labels(scenes)
    preds = []
    for i in range(0, len(scenes), 250):
        sub = shapes.Scenes(scenes.a[i : i + 250], scenes.b[i : i + 250], scenes.c[i : i + 250])
        preds.append(model(shapes.render(sub, grid, noise=noise, gen=gen)).argmax(-1))
    p = torch.cat(preds)
    return {
        "accuracy": float((p == y).double().mean()),
        "absolute_bit": float(((p // 2) == (y // 2)).double().mean()),
        "relative_bit": float(((p % 2) == (y % 2)).double().mean()),
    }


def run(
    out: Path,
    *,
    quick: bool = False,
    tiny: bool = False,
    seeds: int = 1,
    steps: int | None = None,
    encodings: tuple[str, ...] = ENCODINGS,
    grids: tuple[int, ...] = GRIDS,
    **unused: Any,
) -> dict[str, Any]:
    """Train every encoding for every seed, evaluate at every grid; JSON + PNG + Markdown in ``out``."""
    bad = {k: v for k, v in unused.items() if v not in (None, 128)}  # the CLI's text-lab defaults
    if bad:
        raise ValueError(f"ropekit lab vision does not take {sorted(bad)} (got {bad})")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"seeds must be a positive int, got {seeds!r}")
    unknown = [e for e in encodings if e not in ENCODINGS]
    if unknown or not encodings:
        raise ValueError(f"encodings must be a non-empty subset of {ENCODINGS}, got {encodings!r}")
    check_encodings(encodings)  # a repeated encoding would count as another seed
    b = vision_budget(quick, steps, tiny)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # these models are too small for intra-op threads (2x the CPU time on 2 threads)
    try:
        return _run(out, b, quick=quick or tiny, seeds=seeds, encodings=encodings, grids=grids)
    finally:
        torch.set_num_threads(threads)


def _run(
    out: Path, b: VisionBudget, *, quick: bool, seeds: int, encodings: tuple[str, ...], grids: tuple[int, ...]
) -> dict[str, Any]:
    t0, c0 = time.perf_counter(), time.process_time()
    test = shapes.sample(
        b.eval_scenes, torch.Generator().manual_seed(123_456)
    )  # the same scenes at every grid
    rows: list[dict[str, Any]] = []
    curves: dict[str, list[float]] = {}
    cpu = 0.0
    jobs = [(enc, seed) for enc in encodings for seed in range(seeds)]
    done = {j: _part(out, b, *j, grids, test, wait=False) for j in jobs}  # parts held elsewhere: None
    for enc, seed in jobs:
        part = done[(enc, seed)] or _part(out, b, enc, seed, grids, test, wait=True)
        assert part is not None
        rows += part["rows"]
        cpu += part["cpu_seconds"]
        if seed == 0:
            curves[enc] = part["losses"]
    result: dict[str, Any] = {
        "experiment": "vision",
        "quick": quick,
        "train_grid": TRAIN_GRID,
        "grids": list(grids),
        "seeds": seeds,
        "budget": asdict(b),
        "task": {
            "label": "2 * [A in the top half] + [B right of A]",
            "side": shapes.SIDE,
            "distractors": shapes.DISTRACTORS,
            "abs_margin": shapes.ABS_MARGIN,
            "rel_margin": shapes.REL_MARGIN,
        },
        "environment": environment(),
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "cpu_seconds": round(time.process_time() - c0, 1),
        "training_cpu_seconds": round(
            cpu, 1
        ),  # summed over the models (also those trained by another process)
        "results": rows,
        "train_loss": curves,
    }
    result["claims"] = [v.line() for v in claims(rows, encodings, grids)]
    md = _markdown(result, encodings, grids)

    def plot(fig: Any) -> None:
        plots_vision.vision(fig, result, quick=quick)

    result["files"] = write_outputs(out, "vision", result, md, plot)
    return result


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _part(
    out: Path,
    b: VisionBudget,
    enc: str,
    seed: int,
    grids: tuple[int, ...],
    test: shapes.Scenes,
    *,
    wait: bool,
) -> dict[str, Any] | None:
    """One (encoding, seed): trained and evaluated, or loaded from ``out/parts`` (JSON) when a run with the same
    budget already did it. Several processes started on the same ``out`` share the work: each claims a part
    before training it (``.claim`` file holding its pid); a part another live process holds gives None, or is
    waited for with ``wait=True``."""
    tag = f"n{b.steps}-b{b.batch}-e{b.eval_scenes}-d{b.dim}x{b.depth}-lr{b.lr:g}-g{'.'.join(map(str, grids))}"
    parts = out / "parts"
    parts.mkdir(parents=True, exist_ok=True)
    path, claim = parts / f"{enc}-s{seed}-{tag}.json", parts / f"{enc}-s{seed}-{tag}.claim"
    while not path.exists():
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                holder = int(claim.read_text() or "0")
            except (OSError, ValueError):
                holder = 0
            if holder and not _alive(holder):
                claim.unlink(missing_ok=True)  # its process died: take the part over
            elif not wait:
                return None
            else:
                time.sleep(5)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        ts, cs = time.perf_counter(), time.process_time()
        model, losses = train_vit(enc, b, seed)
        rows: list[dict[str, Any]] = [
            {"encoding": enc, "seed": seed, "grid": g, **accuracy(model, test, g, b.noise, seed)}
            for g in grids
        ]
        data = {"rows": rows, "losses": losses, "cpu_seconds": time.process_time() - cs}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)
        claim.unlink(missing_ok=True)
        acc = {r["grid"]: round(r["accuracy"], 3) for r in rows}
        # progress on stderr, like the trainer's: stdout carries the result (--json)
        print(
            f"[vision {enc} seed {seed}] {time.perf_counter() - ts:.0f}s acc {acc}",
            file=sys.stderr,
            flush=True,
        )
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def values(rows: list[dict[str, Any]], enc: str, grid: int, key: str = "accuracy") -> list[float]:
    """One number per seed (seed order)."""
    return [
        r[key] for r in sorted(rows, key=lambda r: r["seed"]) if r["encoding"] == enc and r["grid"] == grid
    ]


def retention(rows: list[dict[str, Any]], enc: str, grid: int) -> list[float]:
    """Per seed: accuracy at ``grid`` divided by accuracy at the training grid (same model)."""
    return [a / b for a, b in zip(values(rows, enc, grid), values(rows, enc, TRAIN_GRID))]


def claims(rows: list[dict[str, Any]], encodings: tuple[str, ...], grids: tuple[int, ...]) -> list[Verdict]:
    """RoPE-ViT's direction at each larger grid, plus the task's sanity claims; judged on accuracy per seed."""
    have, out = set(encodings), []
    for g in (g for g in grids if g > TRAIN_GRID):
        q = f"accuracy at {g}x{g}"
        for enc, name in (("rope-axial", "2-D axial RoPE"), ("rope-mixed", "RoPE-Mixed")):
            if {enc, "learned"} <= have:
                out.append(
                    greater(
                        f"{name} beats learned absolute (interpolated) at {g}x{g} (RoPE-ViT, DeiT-S at 384)",
                        q,
                        (enc, values(rows, enc, g)),
                        ("learned", values(rows, "learned", g)),
                    )
                )
        if {"rope-mixed", "rope-axial"} <= have:
            out.append(
                greater(
                    f"RoPE-Mixed beats 2-D axial RoPE at {g}x{g} (RoPE-ViT, DeiT-S 81.8 vs 80.0 at 384)",
                    q,
                    ("rope-mixed", values(rows, "rope-mixed", g)),
                    ("rope-axial", values(rows, "rope-axial", g)),
                )
            )
        if {"rope-axial", "rope-1d"} <= have:
            out.append(
                greater(
                    f"2-D axial RoPE beats 1-D raster RoPE at {g}x{g} (raster order changes with the grid)",
                    q,
                    ("rope-axial", values(rows, "rope-axial", g)),
                    ("rope-1d", values(rows, "rope-1d", g)),
                )
            )
    top = max(grids)
    if TRAIN_GRID in grids and top > TRAIN_GRID:
        for enc, name in (("rope-axial", "2-D axial RoPE"), ("rope-mixed", "RoPE-Mixed")):
            if {enc, "learned"} <= have:
                out.append(
                    greater(
                        f"{name} keeps more of its 8x8 accuracy at {top}x{top} than learned absolute "
                        "(the resolution effect alone, whatever each seed reached at 8x8)",
                        f"accuracy at {top}x{top} / accuracy at 8x8",
                        (enc, retention(rows, enc, top)),
                        ("learned", retention(rows, "learned", top)),
                    )
                )
    if "none" in have and TRAIN_GRID in grids:
        out.append(
            below(
                "the task needs positions: without them the absolute bit stays near chance (0.5)",
                "absolute-bit accuracy of none at 8x8",
                values(rows, "none", TRAIN_GRID, "absolute_bit"),
                0.6,
            )
        )
    return out


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def _markdown(res: dict[str, Any], encodings: tuple[str, ...], grids: tuple[int, ...]) -> str:
    rows, b = res["results"], res["budget"]
    n = res["seeds"]

    def cell(enc: str, g: int, key: str = "accuracy") -> str:
        v = values(rows, enc, g, key)
        return f"{_mean(v):.3f}" + (f" [{min(v):.3f}..{max(v):.3f}]" if len(v) > 1 else "")

    md = "# Vision: trained at 8x8 patches, evaluated at " + ", ".join(f"{g}x{g}" for g in grids) + "\n\n"
    md += (
        f"ViT (dim {b['dim']}, depth {b['depth']}, 4 heads, class token), {b['steps']} steps of {b['batch']} "
        f"fresh scenes at 8x8, peak lr {b['lr']:g} (warm-up, cosine), {n} seed(s); evaluated on the same "
        f"{b['eval_scenes']} held-out scenes rendered at each grid (noise {b['noise']:g}). "
        f"Label: {res['task']['label']} (chance 0.25). Training took {res['training_cpu_seconds']:.0f} CPU-s "
        f"in all (one thread per process); this process ran {res['wall_seconds']:.0f} s wall.\n\n"
    )
    md += "Accuracy, mean [min..max] over seeds:\n\n"
    md += md_table(
        ["encoding"] + [f"{g}x{g}" for g in grids], [[e] + [cell(e, g) for g in grids] for e in encodings]
    )
    md += "\nPer label bit (absolute: A in the top half; relative: B right of A), mean over seeds:\n\n"
    head = ["encoding"] + [f"abs {g}" for g in grids] + [f"rel {g}" for g in grids]
    md += md_table(
        head,
        [
            [e]
            + [_mean(values(rows, e, g, "absolute_bit")) for g in grids]
            + [_mean(values(rows, e, g, "relative_bit")) for g in grids]
            for e in encodings
        ],
    )
    md += "\nPublished (RoPE-ViT, ImageNet-1k top-1 %, DeiT-S trained at 224, tested at 224 / 384):\n\n"
    md += md_table(["encoding", "224", "384"], [[k, *v] for k, v in PUBLISHED.items()])
    md += "\n## Claims\n\n" + "\n".join(f"- {c}" for c in res["claims"]) + "\n"
    return md
