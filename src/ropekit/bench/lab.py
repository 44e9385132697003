# SPDX-License-Identifier: MIT
"""``ropekit bench --mode lab``: training throughput of the lab's default model (:mod:`ropekit.lab.throughput`).

One optimizer step of the default :class:`ropekit.lab.model.TinyLM` (4 layers, width 128, RoPE, batch 32 x 128
tokens) in the variants the trainer offers, interleaved round by round in one process. The unit of the ratios
(the block's "floor") is the trainer's plain path: float32, eager, torch's thread setting. The others: bfloat16
autocast (the lab's quick runs), bfloat16 with ``torch.compile`` (its compile time is the ``warmup_s`` field:
the first 3 steps; float32 + compile measured 1.07x eager for a 70 s compile, so it is not in the mode), and the
thread count :func:`ropekit.lab.throughput.choose_threads` picks when it differs from torch's.
Every row also carries ``tokens_per_s`` (batch x length / median step time).

Shapes: b 32, L 128 (``--quick``: b 8, L 64, eager variants only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ropekit.bench.timing import rows

__all__ = ["run_lab"]

BASELINE = "fp32 eager (the trainer's plain path)"
_BATCH, _LEN, _QUICK_BATCH, _QUICK_LEN = 32, 128, 8, 64


def _variants(quick: bool) -> dict[str, str]:
    """{row name: throughput variant}."""
    from ropekit.lab.throughput import choose_threads

    out = {BASELINE: "fp32", "bf16 autocast": "bf16"}
    if quick:
        return out
    out["bf16 autocast + torch.compile"] = "bf16+compile"
    n = choose_threads()
    if n != torch.get_num_threads():
        out[f"fp32 eager, {n} thread(s) (choose_threads)"] = f"fp32@{n}"
        out[f"bf16 autocast, {n} thread(s) (choose_threads)"] = f"bf16@{n}"
    return out


def run_lab(*, quick: bool, rounds: int, progress: Callable[[str], None] | None) -> list[dict[str, Any]]:
    """Result rows (see :func:`ropekit.bench.timing.rows`) plus ``tokens_per_s`` and ``warmup_s``."""
    from ropekit.lab.throughput import measure

    batch, length = (_QUICK_BATCH, _QUICK_LEN) if quick else (_BATCH, _LEN)
    names = _variants(quick)
    if progress:
        progress(f"lab: {', '.join(names)}")
    res = measure(tuple(names.values()), batch=batch, length=length, steps=2, rounds=rounds)
    tokens = batch * length
    samples = {name: [tokens / tps * 1e3 for tps in res[v]["wall"]] for name, v in names.items()}
    case = (
        f"lab trainer step, default model, {batch}x{length} tokens, {torch.get_num_threads()} torch threads"
    )
    out = rows(case, "lab", samples, [BASELINE])
    for r in out:
        r["tokens_per_s"] = tokens / r["median_ms"] * 1e3
        r["warmup_s"] = res[names[r["impl"]]]["warmup_s"][0]
        r["variant"] = names[r["impl"]]
    return out
