# SPDX-License-Identifier: MIT
"""Build, cache and load ropekit's fused CPU kernel (``rope_cpu.c``).

The kernel is plain C with its own small pthread pool and no torch headers, so it compiles in about a second with
the system C compiler (``$CC``, else ``cc``/``gcc``/``clang``) and is loaded with ctypes (a torch C++ extension
was measured against it and not kept: ``docs/kernels.md``). The shared library is cached in
``$ROPEKIT_CACHE_DIR`` (default ``~/.cache/ropekit``) under a key made of the source, the compiler, the flags and
the CPU model, and installed atomically, so concurrent processes share one build. Without a compiler, or with
``ROPEKIT_DISABLE_CPU_KERNEL=1``, :func:`load` returns None and ropekit uses its pure-PyTorch backend, saying so
once.
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

__all__ = ["ABI_VERSION", "HEADERS", "SOURCE", "BuildInfo", "build_info", "load"]

SOURCE = Path(__file__).with_name("rope_cpu.c")
HEADERS = (Path(__file__).with_name("rope_cache_write.h"),)  # included by SOURCE
ABI_VERSION = 6
_FLAGS = ["-O3", "-pthread", "-shared", "-fPIC", "-std=c11", "-Wno-aggressive-loop-optimizations"]
_lock = threading.Lock()
_state: dict[str, object] = {}


@dataclass(frozen=True)
class BuildInfo:
    """How the CPU kernel was obtained in this process."""

    available: bool
    path: str | None
    built: bool  # compiled in this process (False: loaded from the cache)
    seconds: float  # time spent compiling (0 when cached)
    reason: str  # why it is unavailable, or "ok"


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


def _cache_dir() -> Path:
    return Path(os.environ.get("ROPEKIT_CACHE_DIR") or Path.home() / ".cache" / "ropekit")


def _build(cc: str, out: Path) -> float:
    flags = _FLAGS + _arch_flags(cc)
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
    for name in ("ropekit_cache_write_f32", "ropekit_cache_write_bf16", "ropekit_cache_write_f16"):
        fn = getattr(lib, name)
        fn.argtypes = [P, P, P, P, P, P, P, P, P]
        fn.restype = None
    lib.ropekit_check_slots.argtypes = [P, I, I, P]
    lib.ropekit_check_slots.restype = ctypes.c_int
    lib.ropekit_check_offsets.argtypes = [P, I, I, I, P]
    lib.ropekit_check_offsets.restype = ctypes.c_int
    lib.ropekit_axis_gather.argtypes = [P, I, I, P, I, I, P, P]
    lib.ropekit_axis_gather.restype = ctypes.c_int64
    if lib.ropekit_abi_version() != ABI_VERSION:
        raise RuntimeError("stale kernel library (ABI mismatch)")
    return lib


def load() -> ctypes.CDLL | None:
    """The loaded kernel library, building it on first use; None when it cannot be had (see :func:`build_info`)."""
    with _lock:
        if "lib" in _state:
            return _state["lib"]  # type: ignore[return-value]
        lib, info = None, BuildInfo(False, None, False, 0.0, "disabled by ROPEKIT_DISABLE_CPU_KERNEL")
        if os.environ.get("ROPEKIT_DISABLE_CPU_KERNEL", "") not in ("", "0"):
            pass
        elif (cc := _compiler()) is None:
            info = BuildInfo(False, None, False, 0.0, "no C compiler found (set $CC)")
        else:
            try:
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
                            " ".join(_FLAGS + _arch_flags(cc)),
                            _cpu_model(),
                            platform.platform(),
                        ]
                    ).encode()
                ).hexdigest()[:16]
                path = _cache_dir() / f"rope_cpu-{key}.so"
                built, secs = False, 0.0
                if not path.exists():
                    secs, built = _build(cc, path), True
                lib = _setup(ctypes.CDLL(str(path)))
                info = BuildInfo(True, str(path), built, secs, "ok")
            except Exception as e:  # noqa: BLE001 - any failure means: fall back, and say why once
                lib, info = None, BuildInfo(False, None, False, 0.0, f"{type(e).__name__}: {e}")
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
