# SPDX-License-Identifier: MIT
"""Multi-axis vs 1-D RoPE per call on one thread, timed in thread CPU time: the ``--mode axes`` cases for a
loaded machine (issue 10 point 3).

Wall-clock medians of ``ropekit bench --mode axes`` move by up to 10x between runs when other processes share
the cores (a sample is whatever the scheduler left it). CPU time of the calling thread, with torch limited to
one thread (the fused kernel then runs on the caller alone), counts only the work of the call, so the ratio
``apply_rope_axes`` / ``apply_rope`` (and tables-given multi-axis / 1-D) stays comparable between runs. It does not
see memory-bandwidth contention, and it is not the 2-thread wall time a user gets: report it as what it is.

    python -m ropekit.bench.axes_cpu [--rounds N]

Prints one line per multi-axis entry point and case: median microseconds and the ratio to the same entry point's
1-D median of the same rounds (M-RoPE: Wang et al. 2024, arXiv 2409.12191; 2-D: Heo et al. 2024, arXiv
2403.13298).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

import torch

from ropekit.bench.axes import _case

__all__ = ["main", "run_cpu_time"]


def run_cpu_time(*, rounds: int = 9, sizes: dict[str, int] | None = None) -> list[dict[str, object]]:
    """Rows {case, impl, median_us, ratio_to_1d} for the ``tables`` and ``apply`` entry points of every case."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out: list[dict[str, object]] = []
    try:
        for dt in (torch.float32, torch.bfloat16):
            for kind in ("prefill", "decode", "vision"):
                case, impls = _case(kind, dt, False, sizes)
                names = [n for n in impls if n.endswith((" apply", " tables"))]
                inner = 100 if kind == "decode" else 4
                samples: dict[str, list[float]] = {n: [] for n in names}
                for n in names:
                    impls[n]()
                for _ in range(rounds):
                    for n in names:
                        fn, t0 = impls[n], time.thread_time()
                        for _ in range(inner):
                            fn()
                        samples[n].append((time.thread_time() - t0) / inner * 1e6)
                med = {n: statistics.median(v) for n, v in samples.items()}
                for n in names:
                    name, _, entry = n.rpartition(" ")
                    if name != "1-d":
                        out.append(
                            {
                                "case": case,
                                "impl": n,
                                "median_us": med[n],
                                "ratio_to_1d": med[n] / med[f"1-d {entry}"],
                            }
                        )
    finally:
        torch.set_num_threads(threads)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ropekit.bench.axes_cpu", description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    for r in run_cpu_time(rounds=args.rounds):
        print(f"{r['case']:36s} {r['impl']:22s} {r['median_us']:9.1f} us  {r['ratio_to_1d']:5.2f}x 1-D")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
