# SPDX-License-Identifier: MIT
"""Timing for ``ropekit bench``: round-robin rounds, medians, spread, and ratios to the floor of the same run.

Every round runs each implementation once (``inner`` calls, timed together for decode-sized work), so slow drifts
of a shared machine hit all implementations alike; the median over rounds is reported with the 25th-75th
percentile spread, and every ratio is taken against the floor measured in the same rounds.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["measure", "rows"]


def _time(fn: Callable[[], Any], inner: int, sync: Callable[[], None]) -> float:
    sync()
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    sync()
    return (time.perf_counter() - t0) / inner * 1e3


def measure(
    impls: dict[str, Callable[[], Any]],
    *,
    inner: int,
    rounds: int,
    sync: Callable[[], None] = lambda: None,
) -> dict[str, list[float]]:
    """Milliseconds per call of each implementation, one sample per round (after a warm-up outside the rounds)."""
    for fn in impls.values():
        _time(fn, min(inner, 20) if inner > 1 else 3, sync)
    samples: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(rounds):
        for name, fn in impls.items():
            samples[name].append(_time(fn, inner, sync))
    return samples


def _quartiles(v: list[float]) -> tuple[float, float]:
    if len(v) < 2:
        return v[0], v[0]
    q = statistics.quantiles(v, n=4, method="inclusive")
    return q[0], q[2]


def rows(
    case: str, mode: str, samples: dict[str, list[float]], floors: Sequence[str]
) -> list[dict[str, Any]]:
    """One result row per implementation: median, quartiles, and the ratio to the faster of the floors."""
    med = {name: statistics.median(v) for name, v in samples.items()}
    floor = min(med[f] for f in floors)
    out = []
    for name, v in samples.items():
        lo, hi = _quartiles(v)
        out.append(
            {
                "mode": mode,
                "case": case,
                "impl": name,
                "median_ms": med[name],
                "q25_ms": lo,
                "q75_ms": hi,
                "ratio_to_floor": med[name] / floor,
                "is_floor": name in floors,
            }
        )
    return out
