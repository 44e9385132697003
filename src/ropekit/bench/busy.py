# SPDX-License-Identifier: MIT
"""``ropekit bench --mode busy``: the CPU kernel beside processes that load every core.

Another program keeping the cores busy is the normal state of a shared server. The mode times the same
implementations twice in one run: idle, then beside ``os.cpu_count()`` spawned processes spinning in a Python
loop (started by this process, ended by their pids when the timing is done). Floors are torch's own elementwise
ops (``copy_``, ``mul_(1.0)``) over the same q and k, so the ratio to the floor is the ratio to torch's own op
under the same contention (target: <= 1.5x). Idle and busy rows share names but for the "idle"/"busy" prefix.
When ``--mode extension`` ran first in the same run, its torch C++ extension op is timed here too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from ropekit.bench.matrix import Case, _impls
from ropekit.bench.timing import measure, rows

__all__ = ["busy_machine", "run_busy"]

_KEEP = ("floor: copy_", "floor: mul_(1.0)", "ropekit (tables given)", "ropekit Rotary (cached tables)")
_FLOORS = ("floor: copy_", "floor: mul_(1.0)")


@contextmanager
def busy_machine(processes: int | None = None) -> Iterator[int]:
    """Spin ``processes`` (default: every core) Python processes for the duration of the block."""
    n = processes if processes is not None else (os.cpu_count() or 1)
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(n)
    ]
    try:
        time.sleep(0.3)  # let them reach the loop
        yield n
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def _extension_op(case: Case) -> Callable[[], Any] | None:
    """The torch C++ extension op of ``--mode extension`` on the same shapes, when that mode has loaded it."""
    try:
        op = torch.ops.ropekit_ext.rope_
    except (AttributeError, RuntimeError):
        return None
    from ropekit.phases import rope_tables
    from ropekit.spec import RopeSpec

    g = torch.Generator().manual_seed(0)
    q = torch.randn(case.batch, case.q_heads, case.seq, case.head_dim, generator=g)
    k = torch.randn(case.batch, case.kv_heads, case.seq, case.head_dim, generator=g)
    pos = torch.arange(case.seq) if case.kind == "prefill" else torch.randint(0, 100_000, (case.batch, 1))
    cos, sin = rope_tables(pos, RopeSpec(case.head_dim, base=500_000.0))
    return lambda: (op(q, cos, sin, case.head_dim), op(k, cos, sin, case.head_dim))


def run_busy(*, quick: bool, rounds: int, progress: Callable[[str], None] | None) -> list[dict[str, Any]]:
    """Rows for prefill and decode (float32, half), idle then busy, in one run."""
    cases = [Case("prefill", torch.float32, "half"), Case("decode", torch.float32, "half", batch=32, seq=1)]
    out: list[dict[str, Any]] = []
    with torch.no_grad():
        for state in ("idle", "busy"):
            for case in cases:
                impls = {k: f for k, f in _impls(case, "cpu", quick=True).items() if k in _KEEP}
                ext = _extension_op(case)
                if ext is not None:
                    impls["torch C++ extension op (at::parallel_for)"] = ext
                if progress:
                    progress(f"busy: {state} {case.name}")
                inner = 200 if case.kind == "decode" else 1
                if state == "busy":
                    with busy_machine():
                        samples = measure(impls, inner=inner, rounds=rounds)
                else:
                    samples = measure(impls, inner=inner, rounds=rounds)
                out += rows(f"{state}: {case.name}", "busy", samples, _FLOORS)
    return out
