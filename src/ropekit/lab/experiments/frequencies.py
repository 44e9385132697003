# SPDX-License-Identifier: MIT
"""``ropekit lab frequencies``: how a trained RoPE model uses its bands (Barbero et al. 2025, "Round and Round We
Go!", ICLR; seed 001).

- per-band query/key norms by layer (their Fig. 2 analogue): the mean norm of each 2-D pair of q and k, before
  rotation, over validation tokens;
- positional heads: previous-token heads (mean attention on position i - 1 above 0.5) and diagonal heads (on i),
  with the bands they rely on (each band's mean |contribution| to that head's logits on those query-key pairs);
- p-RoPE: models with p in {0.25, 0.5, 0.75, 1} (and NoPE) trained with the same budget; validation loss at 1x and 2x.
Compared with Barbero et al. Table 2 (Gemma 2B, Wiki ppl: NoPE 4.86, RoPE 4.46, 0.25-RoPE 4.53, 0.75-RoPE 4.44).

The band norms and positional heads are measured on every seed's RoPE model (``per_seed``); :func:`claims` judges
each claim from the result JSON alone with :mod:`ropekit.lab.verdicts` (seed by seed, on the spread), so a result
can be re-judged without its checkpoints.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, cast

import torch

from ropekit.lab.data import train_batch
from ropekit.lab.encodings.rope import RoPE
from ropekit.lab.evaluate import perplexity
from ropekit.lab.experiments.common import (
    ModelPlan,
    check_plans,
    check_seeds,
    environment,
    md_table,
    model_plan,
    prepare,
    trained_model,
    write_outputs,
)
from ropekit.lab.model import Block, LMConfig, TinyLM
from ropekit.lab.verdicts import Verdict, above, summary, untestable
from ropekit.rotation.apply import apply_rope
from ropekit.spec import RopeSpec

__all__ = ["band_norms", "claims", "positional_heads", "run"]

P_VALUES = (0.25, 0.5, 0.75, 1.0)


def _blocks(model: TinyLM) -> list[Block]:
    """The model's transformer blocks (an nn.ModuleList, whose items are typed as plain Modules)."""
    return [cast(Block, blk) for blk in model.blocks]


@torch.no_grad()
def band_norms(model: TinyLM, tokens: torch.Tensor) -> dict[str, list[list[float]]]:
    """Mean norm of each (i, i + n) pair of q and k per layer (before rotation): {"q": [layer][band], "k": ...}."""
    rec: dict[str, list[torch.Tensor]] = {"q": [], "k": []}
    hooks = []
    for blk in _blocks(model):
        for name, lin in (("q", blk.attn.wq), ("k", blk.attn.wk)):
            hooks.append(lin.register_forward_hook(lambda m, i, o, name=name: rec[name].append(o)))
    model(tokens)
    for h in hooks:
        h.remove()
    hd = model.cfg.head_dim
    n = hd // 2
    out: dict[str, list[list[float]]] = {}
    for name, outs in rec.items():
        rows = []
        for o in outs:
            x = o.view(*o.shape[:2], -1, hd)  # (b, s, heads, d)
            norms = (x[..., :n].pow(2) + x[..., n:].pow(2)).sqrt()  # (b, s, heads, n)
            rows.append(norms.mean(dim=(0, 1, 2)).tolist())
        out[name] = rows
    return out


@torch.no_grad()
def positional_heads(model: TinyLM, tokens: torch.Tensor, threshold: float = 0.5) -> list[dict[str, Any]]:
    """Previous-token and diagonal heads, with the three bands contributing most to their logits."""
    q_rec: list[torch.Tensor] = []
    k_rec: list[torch.Tensor] = []
    hooks = []
    for blk in _blocks(model):
        hooks.append(blk.attn.wq.register_forward_hook(lambda m, i, o: q_rec.append(o)))
        hooks.append(blk.attn.wk.register_forward_hook(lambda m, i, o: k_rec.append(o)))
    model(tokens, record=True)
    for hook in hooks:
        hook.remove()
    if not isinstance(model.pe, RoPE):
        raise TypeError(f"positional_heads needs a RoPE model, got encoding {type(model.pe).__name__}")
    cfg, spec = model.cfg, model.pe.spec
    hd, n, rep = cfg.head_dim, cfg.head_dim // 2, cfg.n_heads // cfg.n_kv_heads
    b, s = tokens.shape
    pos = torch.arange(s).expand(b, s)
    found = []
    for li, blk in enumerate(_blocks(model)):
        att = blk.attn.last_attention  # (b, h, s, s)
        assert att is not None  # record=True fills it
        q = q_rec[li].view(b, s, cfg.n_heads, hd)
        k = k_rec[li].view(b, s, cfg.n_kv_heads, hd).repeat_interleave(rep, 2)
        qr, kr = apply_rope(q, k, pos, spec)
        assert kr is not None  # apply_rope rotates k when it is given
        for h in range(cfg.n_heads):
            prev = att[:, h].diagonal(offset=-1, dim1=-2, dim2=-1).mean().item()
            diag = att[:, h].diagonal(dim1=-2, dim2=-1).mean().item()
            kind = "previous-token" if prev > threshold else ("diagonal" if diag > threshold else None)
            if kind is None:
                continue
            off = 1 if kind == "previous-token" else 0
            qa, ka = qr[:, off:, h], kr[:, : s - off, h]  # query i with key i - off
            contrib = (
                (qa[..., :n] * ka[..., :n] + qa[..., n:] * ka[..., n:]).abs().mean(dim=(0, 1))
            )  # per band
            top = contrib.argsort(descending=True)[:3].tolist()
            found.append(
                {"layer": li, "head": h, "kind": kind, "score": round(max(prev, diag), 3), "top_bands": top}
            )
    return found


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
) -> dict[str, Any]:
    seed_range = check_seeds(seeds)
    b, data = prepare(quick, steps, tiny, corpus, precision, train_len=train_len, valid_mult=2)
    g = torch.Generator().manual_seed(123)
    val_tokens, _ = train_batch(data.valid, 8 if not tiny else 2, train_len, g)
    sweep: list[dict[str, Any]] = []
    per_seed: list[dict[str, Any]] = []
    tput: int | str = "checkpoint"

    def plan(p: float, seed: int) -> ModelPlan:
        if p == 0.0:
            return model_plan("nope", data, train_len=train_len, b=b, seed=seed, out=out)
        if p == 1.0:  # RopeSpec(head_dim, p=1) is the default: the checkpoint extrapolation and scaling share
            return model_plan("rope", data, train_len=train_len, b=b, seed=seed, out=out)
        spec = RopeSpec(LMConfig().head_dim, p=p)
        return model_plan(
            "rope", data, train_len=train_len, b=b, seed=seed, out=out, tag=f"prope{p}", spec=spec
        )

    plans = check_plans(plan(p, seed) for p in (*P_VALUES, 0.0) for seed in seed_range)
    for p in (*P_VALUES, 0.0):
        for seed in seed_range:
            model, tr = trained_model(plans.pop(0))
            sweep.append(
                {
                    "p": p,
                    "seed": seed,
                    "loss_1x": math.log(perplexity(model, data.valid, train_len, max_tokens=b.eval_tokens)),
                    "loss_2x": math.log(
                        perplexity(model, data.valid, 2 * train_len, max_tokens=b.eval_tokens)
                    ),
                }
            )
            if p == 1.0:  # the band analysis on every seed's RoPE model (same validation tokens)
                per_seed.append(
                    {
                        "seed": seed,
                        "band_norms": band_norms(model, val_tokens),
                        "positional_heads": positional_heads(model, val_tokens),
                    }
                )
                if seed == 0 and tr.resumed_from < tr.steps:
                    tput = round(tr.tokens_per_second)
    result = {
        "experiment": "frequencies",
        "train_len": train_len,
        "budget": b.__dict__,
        "corpus": data.source,
        "corpus_identity": data.identity,
        "environment": environment(),
        "p_sweep": sweep,
        # seed 0's analysis at the top level (the figure), every seed's in per_seed (the verdicts)
        "band_norms": per_seed[0]["band_norms"],
        "positional_heads": per_seed[0]["positional_heads"],
        "tokens_per_second": tput,
        "per_seed": per_seed,
    }
    md = _markdown(result)

    def plot(fig: Any) -> None:
        from ropekit.lab import plots

        plots.frequencies(fig, result, quick=quick)

    result["files"] = write_outputs(out, "frequencies", result, md, plot)
    return result


def _third(n_bands: int) -> int:
    return max(1, n_bands // 3)


def norm_ratio(norms: list[list[float]]) -> float:
    """Mean norm of the lowest-frequency third of the bands over that of the highest-frequency third, over all
    layers (``norms``: [layer][band], band 0 the highest frequency)."""
    n = len(norms[0])
    t = _third(n)
    hi = sum(sum(r[:t]) for r in norms) / (t * len(norms))
    lo = sum(sum(r[-t:]) for r in norms) / (t * len(norms))
    return lo / hi


def _analyses(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Every seed's band analysis; results written before ``per_seed`` existed hold seed 0's only."""
    if "per_seed" in res:
        return list(res["per_seed"])
    return [{"seed": 0, "band_norms": res["band_norms"], "positional_heads": res["positional_heads"]}]


def _losses(res: dict[str, Any], p: float, key: str = "loss_1x") -> dict[int, float]:
    return {r["seed"]: r[key] for r in res["p_sweep"] if r["p"] == p}


def claims(res: dict[str, Any]) -> list[Verdict]:
    """Barbero et al.'s claims, judged seed by seed from the result JSON (losses paired by seed: the p-RoPE models
    of a seed share its initialisation and data order)."""
    out: list[Verdict] = []
    an = _analyses(res)
    out.append(
        above(
            "low-frequency bands carry the largest q norms (Barbero et al. 2025, Gemma 7B)",
            "mean norm of q on the lowest-frequency third / on the highest-frequency third of the bands, RoPE",
            [norm_ratio(a["band_norms"]["q"]) for a in an],
            1.0,
        )
    )
    n_bands = len(an[0]["band_norms"]["q"][0])
    claim = "positional heads rely on the highest-frequency bands (Barbero et al. 2025, Gemma 7B)"
    counts = [len(a["positional_heads"]) for a in an]
    if any(c == 0 for c in counts):
        out.append(
            untestable(
                claim,
                f"positional heads (attention > 0.5 on i - 1 or i) per seed: {counts}",
                "a seed's RoPE model has no positional head, so the bands they use are not measured",
            )
        )
    else:
        t = _third(n_bands)
        out.append(
            above(
                claim,
                f"fraction of positional heads whose top band is in the highest-frequency third (bands 0..{t - 1}), "
                f"per seed (heads found {counts})",
                [
                    sum(h["top_bands"][0] < t for h in a["positional_heads"]) / len(a["positional_heads"])
                    for a in an
                ],
                0.5,
            )
        )
    rope, nope = _losses(res, 1.0), _losses(res, 0.0)
    rotating = [_losses(res, p) for p in P_VALUES]
    seeds = sorted(nope)
    out.append(
        above(
            "NoPE has the highest loss (Barbero et al. Table 2: Wiki ppl NoPE 4.8594, RoPE 4.4627)",
            "loss at 1x of NoPE - the lowest loss at 1x of the p-RoPE models (nats/byte)",
            [nope[s] - min(r[s] for r in rotating) for s in seeds],
            0.0,
        )
    )
    out.append(
        above(
            "0.75-RoPE beats RoPE (Barbero et al. Table 2: Wiki ppl 4.4414 vs 4.4627)",
            "loss at 1x of RoPE - loss at 1x of 0.75-RoPE (nats/byte)",
            [rope[s] - _losses(res, 0.75)[s] for s in seeds],
            0.0,
        )
    )
    out.append(
        above(
            "0.25-RoPE is worse than 0.75-RoPE (Barbero et al. Table 2: Wiki ppl 4.5302 vs 4.4414)",
            "loss at 1x of 0.25-RoPE - loss at 1x of 0.75-RoPE (nats/byte)",
            [_losses(res, 0.25)[s] - _losses(res, 0.75)[s] for s in seeds],
            0.0,
        )
    )
    return out


def _spread(v: list[float]) -> str:
    """mean [min..max] with 4 decimals (losses of p-RoPE variants differ in the third decimal)."""
    m = sum(v) / len(v)
    return f"{m:.4f}" if len(v) == 1 else f"{m:.4f} [{min(v):.4f}..{max(v):.4f}]"


def _markdown(res: dict[str, Any]) -> str:
    an = _analyses(res)
    rows = []
    for p in (*P_VALUES, 0.0):
        l1, l2 = list(_losses(res, p).values()), list(_losses(res, p, "loss_2x").values())
        rows.append(["NoPE" if p == 0 else f"p = {p}", _spread(l1), _spread(l2)])
    md = "# Frequency usage and p-RoPE\n\n"
    md += (
        "Mean |q| per band, lowest-frequency third over highest-frequency third (all layers), RoPE: "
        f"{summary([norm_ratio(a['band_norms']['q']) for a in an])}; |k|: "
        f"{summary([norm_ratio(a['band_norms']['k']) for a in an])}.\n\n"
    )
    md += "Positional heads (attention > 0.5 on i - 1 or on i) and the bands contributing most to their logits:\n\n"
    heads = [(a["seed"], h) for a in an for h in a["positional_heads"]]
    md += (
        md_table(
            ["seed", "layer", "head", "kind", "score", "top bands"],
            [[s, h["layer"], h["head"], h["kind"], h["score"], h["top_bands"]] for s, h in heads],
        )
        if heads
        else "(none found)\n"
    )
    md += "\np-RoPE sweep, validation loss (nats/byte), mean [min..max] over seeds:\n\n" + md_table(
        ["model", "loss at 1x", "loss at 2x"], rows
    )
    md += (
        "\nPublished (Barbero et al. 2025 Table 2, Gemma 2B, 8k context, Wiki ppl): NoPE 4.8594, RoPE 4.4627, "
        "0.25-RoPE 4.5302, 0.75-RoPE 4.4414 (differences of 0.5% between RoPE variants).\n\n## Claims\n\n"
    )
    return md + "\n".join(f"- {v.line()}" for v in claims(res)) + "\n"
