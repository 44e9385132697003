# SPDX-License-Identifier: MIT
"""Training throughput of the lab's model, measured the way the numbers in ``docs/lab.md`` were: variants
interleaved round by round in one process (so that a busy machine slows them alike), each timed over a few
optimizer steps by wall clock and by this process's CPU time (which a busy machine disturbs much less).

    python -m ropekit.lab.throughput --variants fp32,bf16,bf16+compile --rounds 3 --threads auto

Variants: ``fp32``, ``bf16`` (mixed, see :mod:`ropekit.lab.train`), either with ``+compile``
(``torch.compile`` of the model; its compile time, the first steps, is reported separately), either with
``@N`` (N torch threads while that variant runs, e.g. ``bf16+compile@1``). Threads ``auto``
(:func:`choose_threads`) times the model's own matmul at 1 .. ``os.cpu_count()`` threads and takes the fastest:
on a machine other processes load, fewer threads than cores win (OpenMP threads that wait for a descheduled peer
collapse). Random bytes as data (throughput does not depend on them). Shapes: b batch, L length; tokens per
step = b * L.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from ropekit.lab.data import train_batch
from ropekit.lab.model import LMConfig, TinyLM

__all__ = ["choose_threads", "measure", "parse_variant", "threads_set"]


def parse_variant(variant: str) -> tuple[str, bool, int | None]:
    """``"bf16+compile@1"`` -> ("bf16", True, 1); refuses anything else with the variant named."""
    body, _, threads = variant.partition("@")
    prec, _, opt_flag = body.partition("+")
    ok_threads = threads == "" or (threads.isdigit() and int(threads) > 0)
    if prec not in ("fp32", "bf16") or opt_flag not in ("", "compile") or not ok_threads:
        raise ValueError(
            f"variant must be fp32 or bf16, optionally +compile, optionally @THREADS (a positive integer); "
            f"got {variant!r}"
        )
    return prec, bool(opt_flag), int(threads) if threads else None


@contextmanager
def threads_set(n: int | None) -> Iterator[None]:
    """``torch.set_num_threads(n)`` inside the block (nothing when n is None); restored after."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def choose_threads(cfg: LMConfig | None = None, tokens: int = 4096, budget_s: float = 0.3) -> int:
    """The thread count (1 .. ``os.cpu_count()``) at which the model's widest matmul runs fastest right now.

    Each count is timed alternately for about ``budget_s`` in all (median of its repetitions): a quick
    measurement, not a promise; it follows the machine's load at the time it is called.
    """
    cfg = cfg or LMConfig()
    cores = max(1, os.cpu_count() or 1)
    if cores == 1:
        return 1
    g = torch.Generator().manual_seed(0)
    a, w = torch.randn(tokens, cfg.d_model, generator=g), torch.randn(cfg.d_model, cfg.ffn, generator=g)
    counts = list(range(1, cores + 1))
    times: dict[int, list[float]] = {n: [] for n in counts}
    t_end = time.perf_counter() + budget_s
    while time.perf_counter() < t_end or min(len(v) for v in times.values()) < 3:
        for n in counts:
            with threads_set(n):
                t0 = time.perf_counter()
                torch.mm(a, w)
                times[n].append(time.perf_counter() - t0)
    return min(counts, key=lambda n: statistics.median(times[n][1:]))


def _stepper(variant: str, encoding: str, batch: int, length: int) -> Callable[[], float]:
    prec, compiled, _ = parse_variant(variant)
    torch.manual_seed(0)
    model = TinyLM(LMConfig(encoding=encoding, max_positions=length))
    fwd = torch.compile(model) if compiled else model
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
        return float(loss.detach())

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
    """{variant: {"wall": [tokens/s per round], "cpu": [tokens per CPU-second per round], "warmup_s": [s]}}.

    ``warmup_s`` is the wall time of the 3 warm-up steps (for ``+compile`` variants: the compile time).
    """
    steppers = {}
    out: dict[str, dict[str, list[float]]] = {v: {"wall": [], "cpu": [], "warmup_s": []} for v in variants}
    for v in variants:
        with threads_set(parse_variant(v)[2]):
            steppers[v] = _stepper(v, encoding, batch, length)
            t0 = time.perf_counter()
            for _ in range(3):
                steppers[v]()
            out[v]["warmup_s"].append(time.perf_counter() - t0)
    for _ in range(rounds):
        for v in variants:
            with threads_set(parse_variant(v)[2]):
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
    ap.add_argument("--threads", default=None, help="an integer, or auto (choose_threads)")
    a = ap.parse_args(argv)
    if a.threads == "auto":
        torch.set_num_threads(choose_threads())
    elif a.threads is not None:
        torch.set_num_threads(int(a.threads))
    res = measure(tuple(a.variants.split(",")), encoding=a.encoding, steps=a.steps, rounds=a.rounds)
    base = statistics.median(res[next(iter(res))]["wall"])
    print(f"{a.encoding}, {torch.get_num_threads()} thread(s), 32 x 128 tokens per step")
    for v, r in res.items():
        print(
            f"{v:18s} wall tok/s median {statistics.median(r['wall']):9,.0f} (range {min(r['wall']):,.0f}-"
            f"{max(r['wall']):,.0f}) x{statistics.median(r['wall']) / base:.2f} vs {next(iter(res))}  "
            f"tok per CPU-s {statistics.median(r['cpu']):9,.0f}  warm-up {r['warmup_s'][0]:.1f} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
