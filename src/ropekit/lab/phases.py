# SPDX-License-Identifier: MIT
"""Where a lab run's time goes: CPU seconds (all threads of this process) and wall seconds per phase.

On a machine that other processes load, wall time says little; CPU seconds of this process do not depend on the
load as much (they still include OpenMP threads spinning at barriers). ``startup`` is the CPU the process had
used before the experiment began (interpreter start, imports, argument parsing).

Usage::

    clock = PhaseClock()
    with clock.phase("corpus"):
        ...
    clock.as_dict()  # {"startup": {"cpu_s": .., "wall_s": null}, "corpus": {"cpu_s": .., "wall_s": ..}, ...}

Phases with the same name add up (e.g. "train" over every model).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["PhaseClock"]


class PhaseClock:
    """CPU and wall seconds per named phase, accumulated; created at the start of an experiment."""

    def __init__(self) -> None:
        self.startup_cpu = time.process_time()
        self.cpu: dict[str, float] = {}
        self.wall: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if not name:
            raise ValueError("phase name must be a non-empty string, got ''")
        c0, w0 = time.process_time(), time.perf_counter()
        try:
            yield
        finally:
            self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - c0
            self.wall[name] = self.wall.get(name, 0.0) + time.perf_counter() - w0

    def as_dict(self) -> dict[str, dict[str, float | None]]:
        """{"startup": {...}, phase: {"cpu_s": .., "wall_s": ..}, ...} rounded to 0.1 s."""
        out: dict[str, dict[str, float | None]] = {
            "startup": {"cpu_s": round(self.startup_cpu, 1), "wall_s": None}
        }
        for k in self.cpu:
            out[k] = {"cpu_s": round(self.cpu[k], 1), "wall_s": round(self.wall[k], 1)}
        return out

    def total_cpu(self) -> float:
        return self.startup_cpu + sum(self.cpu.values())
