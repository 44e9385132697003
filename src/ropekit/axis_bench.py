# SPDX-License-Identifier: MIT
"""Multi-axis rotation time against 1-D rotation of the same tensors (issue 10 point 3: target <= 1.3x).

Three pairs, timed round-robin in one process (median and minimum over rounds), each as multi-axis time / 1-D time:

- ``apply``: :func:`ropekit.apply_rope_axes` with [3, b, s] positions vs :func:`ropekit.apply_rope` with [b, s]
  positions (tables built on every call in both);
- ``rotary``: :class:`ropekit.Rotary` with a multi-axis spec vs a 1-D spec (cached tables, the decoder's path);
- ``tables``: :func:`ropekit.apply_rope_tables` with multi-axis vs 1-D tables (the rotation itself: same kernels).

Shapes: format "bhsd", prefill b x hq q heads x hk kv heads x s tokens x d = 128, Qwen2-VL sections [16, 24, 24].
Run ``python -m ropekit.axis_bench [--quick]`` or ``python bench/multiaxis.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from ropekit.axis_tables import apply_rope_axes, axis_tables
from ropekit.module import Rotary
from ropekit.phases import rope_tables
from ropekit.presets_vl import qwen2_vl_spec
from ropekit.rotation.apply import apply_rope, apply_rope_tables
from ropekit.spec import RopeSpec

__all__ = ["run"]


def _times(
    fns: dict[str, Callable[[], Any]], rounds: int, inner: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall-clock and process CPU seconds per call, round-robin. On a shared, overloaded machine the CPU time
    (work actually done by this process, all threads) is far less disturbed than the wall clock."""
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for f in fns.values():
        f()  # warm-up (kernel build, caches)
    for _ in range(rounds):
        for name, f in fns.items():
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(inner):
                f()
            wall[name].append((time.perf_counter() - t0) / inner)
            cpu[name].append((time.process_time() - c0) / inner)
    return wall, cpu


def run(
    *, quick: bool = False, seq: int = 2048, batch: int = 1, q_heads: int = 16, kv_heads: int = 4
) -> dict[str, Any]:
    """Time the three pairs; returns seconds per call and the multi/1-D ratios."""
    if quick:
        seq = min(seq, 512)
    spec3 = qwen2_vl_spec()
    spec1 = RopeSpec(head_dim=128, base=spec3.base)
    q = torch.randn(batch, q_heads, seq, 128)
    k = torch.randn(batch, kv_heads, seq, 128)
    # an image-like prompt: text, then a 32 x 32 grid, then text (positions as get_rope_index would give)
    pos3 = torch.arange(seq).expand(3, batch, seq).clone()
    n_img = min(1024, seq // 2)
    side = int(n_img**0.5)
    grid = torch.arange(side * side)
    start = seq // 4
    pos3[1, :, start : start + side * side] = start + grid // side
    pos3[2, :, start : start + side * side] = start + grid % side
    pos3[0, :, start : start + side * side] = start
    pos1 = pos3[0]
    rot1, rot3 = Rotary(spec1, format="bhsd", max_seq_len=seq), Rotary(spec3, format="bhsd", max_seq_len=seq)
    c1, s1 = rope_tables(pos1, spec1)
    c3, s3 = axis_tables(pos3, spec3)
    fns = {
        "apply_1d": lambda: apply_rope(q, k, pos1, spec1, format="bhsd"),
        "apply_3axis": lambda: apply_rope_axes(q, k, pos3, spec3, format="bhsd"),
        "rotary_1d": lambda: rot1(q, k, positions=pos1),
        "rotary_3axis": lambda: rot3(q, k, positions=pos3),
        "tables_1d": lambda: apply_rope_tables(q, k, c1, s1, spec1, format="bhsd"),
        "tables_3axis": lambda: apply_rope_tables(q, k, c3, s3, spec3, format="bhsd"),
    }
    wall, cpu = _times(fns, rounds=6 if quick else 40, inner=1 if quick else 3)
    med = {k: statistics.median(v) for k, v in wall.items()}
    best = {k: min(v) for k, v in wall.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
    pairs = ("apply", "rotary", "tables")
    return {
        "shape": {"batch": batch, "q_heads": q_heads, "kv_heads": kv_heads, "seq": seq, "head_dim": 128},
        "threads": torch.get_num_threads(),
        "median_seconds": med,
        "min_seconds": best,
        "median_cpu_seconds": cpu_med,
        "ratio_multi_over_1d_median": {p: med[f"{p}_3axis"] / med[f"{p}_1d"] for p in pairs},
        "ratio_multi_over_1d_min": {p: best[f"{p}_3axis"] / best[f"{p}_1d"] for p in pairs},
        "ratio_multi_over_1d_cpu": {p: cpu_med[f"{p}_3axis"] / cpu_med[f"{p}_1d"] for p in pairs},
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seq", type=int, default=2048)
    args = ap.parse_args(argv)
    print(json.dumps(run(quick=args.quick, seq=args.seq), indent=2))


if __name__ == "__main__":
    main()
