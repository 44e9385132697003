# SPDX-License-Identifier: MIT
"""``ropekit bench --mode extension``: a torch C++ extension against ropekit's ctypes kernel (issue 12, point 2).

The field's usual CPU kernel is a torch C++ extension: ``at::parallel_for`` on torch's own thread pool, a registered
torch op, no ctypes marshalling. ``kernels/rope_ext.cpp`` is the same rotation (float32, half layout, in place,
bhsd) written that way; this mode JIT-compiles it with ``torch.utils.cpp_extension.load`` (cold start timed; the
build is cached under ``$ROPEKIT_CACHE_DIR``), compiles ``rope_cpu.c`` afresh into a temporary folder (cold start
timed), and times both raw entry points side by side on prefill and decode shapes, with the floor of the same run.
It needs a C++ compiler, ninja and torch's headers; it is not part of ``--mode all``.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ropekit.bench.timing import measure, rows
from ropekit.kernels import build_key, cpu_build
from ropekit.phases import rope_tables
from ropekit.rotation import cpu_backend
from ropekit.rotation.apply import apply_rope_tables
from ropekit.spec import RopeSpec

__all__ = ["run_extension"]

SOURCE = Path(cpu_build.__file__).with_name("rope_ext.cpp")


def _build_extension() -> tuple[float, bool]:
    """Load (compiling if needed) the extension op; (seconds, compiled now)."""
    from torch.utils.cpp_extension import load

    key = hashlib.sha256((SOURCE.read_text() + torch.__version__).encode()).hexdigest()[:12]
    folder = cpu_build._cache_dir() / f"ext-{key}"
    folder.mkdir(parents=True, exist_ok=True)
    fresh = not any(folder.glob("*.so"))
    t0 = time.perf_counter()
    load(
        name="ropekit_ext_eval",
        sources=[str(SOURCE)],
        extra_cflags=["-O3", "-march=native"],
        build_directory=str(folder),
        is_python_module=False,
        verbose=False,
    )
    return time.perf_counter() - t0, fresh


def _ctypes_cold_start() -> float:
    cc = build_key._compiler()
    if cc is None:
        return float("nan")
    with tempfile.TemporaryDirectory() as tmp:
        return cpu_build._build(cc, build_key._FLAGS + build_key._arch_flags(), Path(tmp) / "rope_cpu.so")


def _impls(B: int, S: int, g: torch.Generator) -> dict[str, Callable[[], Any]]:
    op = torch.ops.ropekit_ext.rope_
    spec = RopeSpec(128, base=500_000.0)
    q, k = torch.randn(B, 32, S, 128, generator=g), torch.randn(B, 8, S, 128, generator=g)
    pos = torch.arange(S) if S > 1 else torch.randint(0, 100_000, (B, 1), generator=g)
    cos, sin = rope_tables(pos, spec)
    qb, kb = torch.empty_like(q), torch.empty_like(k)
    return {
        "floor: copy_": lambda: (qb.copy_(q), kb.copy_(k)),
        "floor: mul_(1.0)": lambda: (q.mul_(1.0), k.mul_(1.0)),
        "torch C++ extension op (at::parallel_for)": lambda: (op(q, cos, sin, 128), op(k, cos, sin, 128)),
        "ctypes kernel, raw call per tensor": lambda: (
            cpu_backend.raw_rotate(q, cos, sin, 128, "half", True),
            cpu_backend.raw_rotate(k, cos, sin, 128, "half", True),
        ),
        "ctypes kernel via apply_rope_tables": lambda: apply_rope_tables(
            q, k, cos, sin, spec, format="bhsd", inplace=True
        ),
    }


def run_extension(
    *, quick: bool, rounds: int, progress: Callable[[str], None] | None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows for prefill (1 x 32 + 8 heads x 4096 x 128) and decode (32 x 1 token), and the cold-start seconds."""
    if progress:
        progress("extension: compiling kernels/rope_ext.cpp (slow the first time) and rope_cpu.c")
    ext_s, fresh = _build_extension()
    info = {
        "extension_load_seconds": ext_s,
        "extension_compiled_now": fresh,
        "ctypes_compile_seconds": _ctypes_cold_start(),
    }
    out: list[dict[str, Any]] = []
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for kind, B, S in (("prefill", 1, 4096), ("decode", 32, 1)):
            if progress:
                progress(f"extension: {kind}")
            samples = measure(_impls(B, S, g), inner=200 if kind == "decode" else 1, rounds=rounds)
            name = f"extension vs ctypes: {kind} fp32 half"
            out += rows(name, "extension", samples, ("floor: copy_", "floor: mul_(1.0)"))
    return out, info
