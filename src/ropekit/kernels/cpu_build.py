# SPDX-License-Identifier: MIT
"""Build, cache and load ropekit's fused CPU kernel (``rope_cpu.c``).

The kernel is plain C with no torch headers, so it compiles in seconds with the system C compiler (``$CC``, else
``cc``/``gcc``/``clang``) and is loaded with ctypes (a torch C++ extension was measured against it and not kept:
``docs/kernels.md``). The shared library is cached in
``$ROPEKIT_CACHE_DIR`` (default ``~/.cache/ropekit``) under a key made of the source, the compiler, the flags and
the CPU model, and installed atomically, so concurrent processes share one build. Without a compiler, or with
``ROPEKIT_DISABLE_CPU_KERNEL=1``, :func:`load` returns None and ropekit uses its pure-PyTorch backend, saying so
once.

Threads: where torch runs its intra-op pool on GNU OpenMP (``libgomp.so.1``, as its Linux wheels do) the kernel is
built with ``-fopenmp`` and its chunks run on that same runtime, i.e. on torch's own worker threads; elsewhere, or
with ``ROPEKIT_CPU_THREADS=pool``, on a small pthread pool of its own. Why (torch's workers spin after every torch
op, and a second pool then shares the cores with them) and what it measured: ``docs/kernels.md``, "Threads".
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ABI_VERSION",
    "HEADERS",
    "SOURCE",
    "THREADS_ENV",
    "BuildInfo",
    "build_info",
    "load",
    "openmp_runtimes",
]

SOURCE = Path(__file__).with_name("rope_cpu.c")
HEADERS = (Path(__file__).with_name("rope_cache_write.h"),)  # included by SOURCE
ABI_VERSION = 8
_FLAGS = ["-O3", "-pthread", "-shared", "-fPIC", "-std=c11", "-Wno-aggressive-loop-optimizations"]
#: "openmp" (torch's OpenMP runtime; a warning and the pool where it cannot be shared) or "pool"; unset: "openmp"
#: where it can be shared, else "pool"
THREADS_ENV = "ROPEKIT_CPU_THREADS"
_OMP_FLAGS = ["-fopenmp", "-DROPEKIT_OMP"]
_lock = threading.Lock()
_state: dict[str, object] = {}


@dataclass(frozen=True)
class BuildInfo:
    """How the CPU kernel was obtained in this process."""

    available: bool
    path: str | None
    built: bool  # compiled in this process (False: loaded from the cache)
    seconds: float  # time spent compiling (0 when cached)
    reason: str  # why it is unavailable, or "ok" (with why the pool was used where OpenMP was tried first)
    threads: str = "none"  # "openmp" (torch's OpenMP runtime, shared), "pool" (the kernel's own), "none"


def _compiler() -> str | None:
    for cand in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cand and shutil.which(cand):
            return shutil.which(cand)
    return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags")):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _arch_flags(cc: str) -> list[str]:
    # -march=native: the cache key includes the CPU, so a build never runs on a CPU it was not made for.
    return ["-march=native"] if platform.machine() in ("x86_64", "AMD64", "aarch64", "arm64") else []


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


def _cache_dir() -> Path:
    return Path(os.environ.get("ROPEKIT_CACHE_DIR") or Path.home() / ".cache" / "ropekit")


def _build(cc: str, flags: list[str], out: Path) -> float:
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [cc, *flags, "-o", tmp, str(SOURCE)], capture_output=True, text=True, timeout=300, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(f"compiler failed: {proc.stderr.strip()[:500]}")
        os.replace(tmp, out)  # atomic: a concurrent process sees either nothing or a complete library
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return time.perf_counter() - t0


def _setup(lib: ctypes.CDLL) -> ctypes.CDLL:
    I, P = ctypes.c_int64, ctypes.c_void_p
    for name in ("ropekit_rope_f32", "ropekit_rope_bf16", "ropekit_rope_f16"):
        fn = getattr(lib, name)
        fn.argtypes = [
            P,
            P,
            I,
            I,
            I,
            I,
            I,
            I,
            I,
            I,
            I,
            I,
            P,
            P,
            I,
            I,
            I,
            I,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
        ]
        fn.restype = None
    for name in ("ropekit_plan_f32", "ropekit_plan_bf16", "ropekit_plan_f16"):
        fn = getattr(lib, name)
        fn.argtypes = [P, P, P, P, P, P, P]
        fn.restype = None
    for name in ("ropekit_plan_gather_f32", "ropekit_plan_gather_bf16", "ropekit_plan_gather_f16"):
        fn = getattr(lib, name)
        fn.argtypes = [P, P, P, P, P, I, P, I, P]
        fn.restype = ctypes.c_int64
    for name in ("ropekit_plan_axes_f32", "ropekit_plan_axes_bf16", "ropekit_plan_axes_f16"):
        fn = getattr(lib, name)
        fn.argtypes = [P, P, P, P, P, I, P, I, I, P, P, P]
        fn.restype = ctypes.c_int64
    for name in ("ropekit_cache_write_f32", "ropekit_cache_write_bf16", "ropekit_cache_write_f16"):
        fn = getattr(lib, name)
        fn.argtypes = [P, P, P, P, P, P, P, P, P, I, P]
        fn.restype = ctypes.c_int64
    lib.ropekit_check_slots.argtypes = [P, I, I, P]
    lib.ropekit_check_slots.restype = ctypes.c_int
    lib.ropekit_check_offsets.argtypes = [P, I, I, I, P]
    lib.ropekit_check_offsets.restype = ctypes.c_int
    lib.ropekit_axis_gather.argtypes = [P, I, I, P, I, I, P, P, ctypes.c_int]
    lib.ropekit_axis_gather.restype = ctypes.c_int64
    if lib.ropekit_abi_version() != ABI_VERSION:
        raise RuntimeError("stale kernel library (ABI mismatch)")
    return lib


def _obtain(cc: str, flags: list[str]) -> tuple[ctypes.CDLL, str, bool, float]:
    """(library, path, built now, compile seconds): from the cache, else compiled into it."""
    version = subprocess.run(
        [cc, "--version"], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    key = hashlib.sha256(
        "\n".join(
            [
                SOURCE.read_text(),
                *(h.read_text() for h in HEADERS),
                cc,
                version,
                " ".join(flags),
                _cpu_model(),
                platform.platform(),
            ]
        ).encode()
    ).hexdigest()[:16]
    path = _cache_dir() / f"rope_cpu-{key}.so"
    built, secs = False, 0.0
    if not path.exists():
        secs, built = _build(cc, flags, path), True
    return _setup(ctypes.CDLL(str(path))), str(path), built, secs


def _threads_wanted() -> str:
    raw = os.environ.get(THREADS_ENV, "")
    mode = raw.strip().lower()
    if mode not in ("", "openmp", "pool"):
        raise ValueError(
            f"{THREADS_ENV}={raw!r}: expected 'openmp' or 'pool' (or unset: openmp where possible)"
        )
    return mode


def load() -> ctypes.CDLL | None:
    """The loaded kernel library, building it on first use; None when it cannot be had (see :func:`build_info`)."""
    with _lock:
        if "lib" in _state:
            return _state["lib"]  # type: ignore[return-value]
        mode = _threads_wanted()  # a bad value raises before anything is built
        lib, info = None, BuildInfo(False, None, False, 0.0, "disabled by ROPEKIT_DISABLE_CPU_KERNEL")
        if os.environ.get("ROPEKIT_DISABLE_CPU_KERNEL", "") not in ("", "0"):
            pass
        elif (cc := _compiler()) is None:
            info = BuildInfo(False, None, False, 0.0, "no C compiler found (set $CC)")
        else:
            runtime = _shared_runtime() if mode != "pool" else None
            notes: list[str] = []
            if mode == "openmp" and runtime is None:
                notes.append(
                    f"{THREADS_ENV}=openmp: torch's OpenMP runtime cannot be shared here ({openmp_runtimes()})"
                )
            for threads in (["openmp"] if runtime else []) + ["pool"]:
                flags = _FLAGS + _arch_flags(cc) + (_OMP_FLAGS if threads == "openmp" else [])
                try:
                    lib, path, built, secs = _obtain(cc, flags)
                except Exception as e:  # noqa: BLE001 - any failure means: try the next, else fall back, and say why
                    lib = None
                    notes.append(f"{threads} build: {type(e).__name__}: {e}")
                    continue
                if threads == "openmp" and openmp_runtimes() != {runtime}:
                    # the build loaded a second OpenMP runtime: its library stays mapped, unused (no thread starts)
                    lib = None
                    notes.append(f"openmp build loaded a second OpenMP runtime ({sorted(openmp_runtimes())})")
                    continue
                info = BuildInfo(True, path, built, secs, "; ".join(["ok", *notes]), threads)
                break
            if lib is None:
                info = BuildInfo(False, None, False, 0.0, "; ".join(notes))
            elif notes and mode == "openmp":  # asked for, not had (auto: build_info().reason says why)
                warnings.warn(
                    f"ropekit: fused CPU kernel on its own thread pool ({'; '.join(notes)})", stacklevel=3
                )
        if lib is None:
            warnings.warn(
                f"ropekit: fused CPU kernel unavailable ({info.reason}); using the pure-PyTorch backend",
                stacklevel=3,
            )
        _state["lib"], _state["info"] = lib, info
        return lib


def build_info() -> BuildInfo:
    """Load (or build) the kernel if not done yet and report how it went."""
    load()
    return _state["info"]  # type: ignore[return-value]
