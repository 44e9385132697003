# SPDX-License-Identifier: MIT
"""Which OpenMP runtime the fused CPU kernel can share with torch.

Where torch runs its intra-op pool on GNU OpenMP (``libgomp.so.1``, as its Linux wheels do) the kernel is built with
``-fopenmp`` by GCC and its chunks run on that same runtime, i.e. on torch's own worker threads; otherwise on a
small pthread pool of its own (:mod:`ropekit.kernels.cpu_build`; why and what it measured: ``docs/kernels.md``,
"Threads").

Shapes: none.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["openmp_runtimes"]


def openmp_runtimes() -> set[str]:
    """Files of the OpenMP runtimes (GNU, LLVM, Intel) mapped into this process; empty where /proc is absent."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return set()
    found = set()
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and os.path.basename(parts[5]).startswith(("libgomp", "libomp", "libiomp")):
            found.add(parts[5])
    return found


def _shared_runtime() -> str | None:
    """The libgomp the kernel can share with torch: torch's intra-op pool runs on OpenMP and exactly one OpenMP
    runtime is loaded, GNU's under its own name ``libgomp.so.1[...]`` (soname ``libgomp.so.1``, which a build
    linking ``-fopenmp`` needs: the loader then resolves it to this copy). None otherwise (e.g. a wheel whose
    libgomp was renamed ``libgomp-<hash>.so.1``: the build would load a second runtime)."""
    import torch

    if not torch.backends.openmp.is_available():  # type: ignore[no-untyped-call]  # untyped in torch
        return None
    runtimes = openmp_runtimes()
    if len(runtimes) != 1:
        return None
    (runtime,) = runtimes
    return runtime if os.path.basename(runtime).startswith("libgomp.so.1") else None
