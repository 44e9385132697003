# SPDX-License-Identifier: MIT
"""Float (continuous) positions on the CPU: ropekit's C tables against the PyTorch reduction they replace.

``python -m ropekit.bench.float_positions [--rounds N] [--threads T] [--cpu-time]`` times, in alternating rounds of the same run,
each case with the C kernel (``kernels/rope_phase.h``, what :func:`ropekit.phases.rope_tables` runs for float
positions on the CPU) and with the PyTorch path (``ropekit.reduction.reduced_turns`` and torch's cos/sin, what ran
before and still runs where the kernel cannot: traced calls, other devices, no compiler), plus integer positions
(exact rows of the shared table cache) as the reference the float decode is compared with. Prints one line per
case: best and median microseconds per call, and the ratio of the medians.

Cases (head_dim 128, base 1e4): ``apply_rope`` decode of q [32, 1, 32, 128] at float32 positions [32, 1] (and at
int64 positions), ``rope_tables`` of float64 positions [4096] and of float32 positions [32, 1].

Shapes: as listed above.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from ropekit import phases
from ropekit.phases import rope_tables
from ropekit.rotation.apply import apply_rope
from ropekit.spec import RopeSpec

__all__ = ["main", "run"]

_PATHS = ("C kernel", "PyTorch")


def _path(name: str) -> None:
    """Route float positions through the C kernel (``"C kernel"``) or the PyTorch reduction (``"PyTorch"``)."""
    phases._kernel_tables = _KERNEL if name == "C kernel" else _no_kernel  # type: ignore[assignment]


_KERNEL = phases._kernel_tables


def _no_kernel(*args: object) -> None:
    return None


#: the clock: wall time, or this thread's CPU time (``--cpu-time``: steadier on a shared machine, and the same
#: as wall time for one-thread work on an idle one; it misses the work of other threads)
_CLOCK: list[Callable[[], float]] = [time.perf_counter]


def _time(fn: Callable[[], Any], inner: int) -> float:
    clock = _CLOCK[0]
    t0 = clock()
    for _ in range(inner):
        fn()
    return (clock() - t0) / inner * 1e6


def run(rounds: int = 15) -> list[tuple[str, str, float, float]]:
    """(case, path, best us, median us) per case and path, each path timed once per round, alternating."""
    g = torch.Generator().manual_seed(0)
    spec = RopeSpec(head_dim=128)
    q = torch.randn(32, 1, 32, 128, generator=g)
    pf32 = torch.rand(32, 1, generator=g) * 4000
    pint = (torch.rand(32, 1, generator=g) * 4000).long()
    pf64 = torch.rand(4096, dtype=torch.float64, generator=g) * 4000
    cases: dict[str, tuple[Callable[[], Any], int]] = {
        "apply_rope decode, float32 positions [32, 1]": (lambda: apply_rope(q, None, pf32, spec), 200),
        "rope_tables, float32 positions [32, 1]": (lambda: rope_tables(pf32, spec), 200),
        "rope_tables, float64 positions [4096]": (lambda: rope_tables(pf64, spec), 5),
    }
    samples: dict[tuple[str, str], list[float]] = {}
    try:
        for path in _PATHS:  # warm-up
            _path(path)
            for fn, inner in cases.values():
                _time(fn, min(inner, 20))
        _time(lambda: apply_rope(q, None, pint, spec), 50)
        for _ in range(rounds):
            for path in _PATHS:
                _path(path)
                for case, (fn, inner) in cases.items():
                    samples.setdefault((case, path), []).append(_time(fn, inner))
            samples.setdefault(("apply_rope decode, int64 positions [32, 1]", "cache rows"), []).append(
                _time(lambda: apply_rope(q, None, pint, spec), 200)
            )
    finally:
        _path("C kernel")
    return [(c, p, min(v), statistics.median(v)) for (c, p), v in samples.items()]


def main(argv: list[str] | None = None) -> None:
    """Command line: print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave as is)")
    ap.add_argument("--cpu-time", action="store_true", help="time this thread's CPU time, not wall time")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    _CLOCK[0] = time.thread_time if args.cpu_time else time.perf_counter
    res = run(args.rounds)
    med = {(c, p): m for c, p, _, m in res}
    clock = "CPU time of this thread" if args.cpu_time else "wall time"
    print(f"threads {torch.get_num_threads()}, {args.rounds} alternating rounds, {clock}; us per call")
    for case, path, best, median in res:
        ratio = med[(case, "PyTorch")] / median if (case, "PyTorch") in med else float("nan")
        print(f"{case:48s} {path:10s} best {best:9.1f}  median {median:9.1f}  PyTorch/this {ratio:5.2f}")


if __name__ == "__main__":
    main()
