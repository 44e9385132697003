# SPDX-License-Identifier: MIT
"""Training throughput of the lab's model, measured the way the numbers in ``docs/lab.md`` were: variants
interleaved round by round in one process (so that a busy machine slows them alike), each timed over a few
optimizer steps by wall clock and by this process's CPU time (which a busy machine disturbs much less).

    python -m ropekit.lab.throughput --variants fp32,bf16 --rounds 3 --threads 1

Variants: ``fp32``, ``bf16`` (mixed, see :mod:`ropekit.lab.train`), either with ``+compile``. Random bytes as
data (throughput does not depend on them). Shapes: b batch, L length; tokens per step = b * L.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ropekit.lab.data import train_batch
from ropekit.lab.model import LMConfig, TinyLM

__all__ = ["measure"]


def _stepper(variant: str, encoding: str, batch: int, length: int) -> Callable[[], float]:
    prec, _, opt_flag = variant.partition("+")
    if prec not in ("fp32", "bf16") or opt_flag not in ("", "compile"):
        raise ValueError(f"variant must be fp32 or bf16, optionally +compile; got {variant!r}")
    torch.manual_seed(0)
    model = TinyLM(LMConfig(encoding=encoding, max_positions=length))
    fwd = torch.compile(model) if opt_flag else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    data = torch.randint(0, 256, (1_000_000,), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(0)

    def step() -> float:
        x, y = train_batch(data, batch, length, gen)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=prec == "bf16"):
            logits, _ = fwd(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(loss)

    return step


def measure(
    variants: tuple[str, ...] = ("fp32", "bf16"),
    *,
    encoding: str = "rope",
    batch: int = 32,
    length: int = 128,
    steps: int = 4,
    rounds: int = 3,
) -> dict[str, dict[str, list[float]]]:
    """{variant: {"wall": [tokens/s per round], "cpu": [tokens per CPU-second per round]}} after 3 warm-up steps."""
    steppers = {}
    for v in variants:
        steppers[v] = _stepper(v, encoding, batch, length)
        for _ in range(3):
            steppers[v]()
    out: dict[str, dict[str, list[float]]] = {v: {"wall": [], "cpu": []} for v in variants}
    for _ in range(rounds):
        for v in variants:
            w, c = time.perf_counter(), time.process_time()
            for _ in range(steps):
                steppers[v]()
            out[v]["wall"].append(steps * batch * length / (time.perf_counter() - w))
            out[v]["cpu"].append(steps * batch * length / max(time.process_time() - c, 1e-9))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="fp32,bf16")
    ap.add_argument("--encoding", default="rope")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args(argv)
    if a.threads is not None:
        torch.set_num_threads(a.threads)
    res = measure(tuple(a.variants.split(",")), encoding=a.encoding, steps=a.steps, rounds=a.rounds)
    base = statistics.median(res[next(iter(res))]["cpu"])
    print(f"{a.encoding}, {torch.get_num_threads()} thread(s), 32 x 128 tokens per step")
    for v, r in res.items():
        print(
            f"{v:14s} wall tok/s median {statistics.median(r['wall']):9,.0f} (range {min(r['wall']):,.0f}-"
            f"{max(r['wall']):,.0f})  tok per CPU-s median {statistics.median(r['cpu']):9,.0f}  "
            f"x{statistics.median(r['cpu']) / base:.2f} vs {next(iter(res))}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
