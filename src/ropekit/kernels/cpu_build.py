# SPDX-License-Identifier: MIT
"""Build, cache and load ropekit's fused CPU kernel (``rope_cpu.c``).

The kernel is plain C with no torch headers, so it compiles in seconds with the system C compiler and is loaded
with ctypes (a torch C++ extension was measured against it and not kept: ``docs/kernels.md``). The compiler is
``$CC`` split like a shell command line (a program and its flags, e.g. ``CC='gcc -m64'``), else the first of
``cc``/``gcc``/``clang`` on ``PATH``; a ``$CC`` whose program is not found is reported, never replaced.

The shared library is cached in ``$ROPEKIT_CACHE_DIR`` (default ``~/.cache/ropekit``) as
``rope_cpu-<build key>-<compiler key>.so``, installed atomically (concurrent processes share one build), with a
``.json`` beside it recording the compiler, its version and the flags; builds no process has loaded for 30 days
(of former sources, flags or compilers) are removed after each load (:mod:`ropekit.kernels.cache_clean`). The
build key covers everything that changes the generated code apart from the compiler: the sources, the flags, the
CPU (its identity and instruction-set lines of ``/proc/cpuinfo``, i.e. what ``-march=native`` compiles for) and the
OS/libc; the compiler key covers the compiler command, its ``--version`` and its exact flags. Without a compiler
(a runtime image that ships a cache warmed at build time) the newest cached build with the same build key is
loaded. A cached library that cannot be loaded (truncated, foreign, a stale ABI) is rebuilt once, with a warning;
an unusable cache directory (not creatable, read-only) makes this process build in a temporary directory, with a
warning. Without a compiler and without a matching build, or with ``ROPEKIT_DISABLE_CPU_KERNEL=1``, :func:`load`
returns None and ropekit uses its pure-PyTorch backend, saying so once. :func:`build_info` says what happened.

Threads: where torch runs its intra-op pool on GNU OpenMP (``libgomp.so.1``, as its Linux wheels do) the kernel is
built with ``-fopenmp`` by GCC and its chunks run on that same runtime, i.e. on torch's own worker threads;
elsewhere, with another compiler (clang's ``-fopenmp`` links its own runtime), or with ``ROPEKIT_CPU_THREADS=pool``,
on a small pthread pool of its own. Why (torch's workers spin after every torch op, and a second pool then shares
the cores with them) and what it measured: ``docs/kernels.md``, "Threads".

The pieces: :mod:`~ropekit.kernels.build_key` (the compiler, flags and cache keys),
:mod:`~ropekit.kernels.build_cache` (compiling, installing and finding builds), :mod:`~ropekit.kernels.cache_clean`
(stale builds), :mod:`~ropekit.kernels.kernel_abi` (the ctypes signatures), :mod:`~ropekit.kernels.openmp` (the
shared runtime) and :mod:`~ropekit.kernels.warn`; the names this module defined before the split stay importable
from it.

Shapes: none.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from ropekit.kernels.build_cache import (
    _build,
    _build_and_open,
    _cache_dir,
    _compile,
    _exists,
    _meta_path,
    _NoPrebuilt,
    _obtain,
    _obtain_prebuilt,
    _read_meta,
    _temp_dir,
    _tmp_dir,
    _Unwritable,
    _write_meta,
)
from ropekit.kernels.build_key import (
    ABI_VERSION,
    HEADERS,
    SOURCE,
    _build_key,
    _Compiler,
    _compiler_key,
    _CompilerError,
    _cpu_id,
    _cpu_isa_known,
    _find_compiler,
    _flags,
    _platform_id,
)
from ropekit.kernels.cache_clean import remove_stale_builds
from ropekit.kernels.kernel_abi import _open, _setup
from ropekit.kernels.openmp import _shared_runtime, openmp_runtimes
from ropekit.kernels.warn import _warn

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
#: names defined here before the module was split (build_cache, kernel_abi, openmp, warn): still importable from here
__all__ += [
    "_NoPrebuilt",
    "_Unwritable",
    "_build",
    "_build_and_open",
    "_build_key",
    "_cache_dir",
    "_compile",
    "_compiler_key",
    "_cpu_id",
    "_cpu_isa_known",
    "_exists",
    "_flags",
    "_meta_path",
    "_obtain",
    "_obtain_prebuilt",
    "_open",
    "_platform_id",
    "_read_meta",
    "_setup",
    "_shared_runtime",
    "_temp_dir",
    "_tmp_dir",
    "_write_meta",
]

#: "openmp" (torch's OpenMP runtime; a warning and the pool where it cannot be shared) or "pool"; unset: "openmp"
#: where it can be shared, else "pool"
THREADS_ENV = "ROPEKIT_CPU_THREADS"
_lock = threading.Lock()
_state: dict[str, object] = {}  # "lib" and "info" once loaded (tests reset it: a new process)


@dataclass(frozen=True)
class BuildInfo:
    """How the CPU kernel was obtained in this process."""

    available: bool
    path: str | None
    built: bool  # compiled in this process (False: loaded from the cache)
    seconds: float  # time spent compiling (0 when cached)
    reason: str  # why it is unavailable, or "ok" (with why the pool was used where OpenMP was tried first)
    threads: str = "none"  # "openmp" (torch's OpenMP runtime, shared), "pool" (the kernel's own), "none"
    #: the compiler command that built the library and its version line (from the build's metadata when it was
    #: loaded from the cache without a compiler); "" when unavailable
    compiler: str = ""


def _threads_wanted() -> str:
    raw = os.environ.get(THREADS_ENV, "")
    mode = raw.strip().lower()
    if mode not in ("", "openmp", "pool"):
        raise ValueError(
            f"{THREADS_ENV}={raw!r}: expected 'openmp' or 'pool' (or unset: openmp where possible)"
        )
    return mode


def _load_kernel(cc: _Compiler | None, mode: str) -> tuple[ctypes.CDLL | None, BuildInfo]:
    runtime = _shared_runtime() if mode != "pool" else None
    notes: list[str] = []
    if mode == "openmp" and runtime is None:
        notes.append(
            f"{THREADS_ENV}=openmp: torch's OpenMP runtime cannot be shared here ({openmp_runtimes()})"
        )
    missing: list[str] = []  # no compiler and nothing cached: one reason, not one per build
    for threads in (["openmp"] if runtime else []) + ["pool"]:
        if threads == "openmp" and cc is not None and cc.family != "gcc":
            notes.append(
                f"openmp build skipped: {cc.argv[0]} is not GCC (its -fopenmp links its own OpenMP runtime, not "
                "torch's libgomp)"
            )
            continue
        try:
            lib, path, built, secs, compiler = _obtain(cc, threads)
        except _NoPrebuilt as e:
            missing.append(str(e))
            continue
        except Exception as e:  # noqa: BLE001 - any failure means: try the next, else fall back, and say why
            notes.append(f"{threads} build: {type(e).__name__}: {e}")
            continue
        if threads == "openmp" and openmp_runtimes() != {runtime}:
            # the build loaded a second OpenMP runtime: its library stays mapped, unused (no thread starts)
            notes.append(f"openmp build loaded a second OpenMP runtime ({sorted(openmp_runtimes())})")
            continue
        if notes and mode == "openmp":  # asked for, not had (auto: build_info().reason says why)
            _warn(f"ropekit: fused CPU kernel on its own thread pool ({'; '.join(notes)})")
        return lib, BuildInfo(True, str(path), built, secs, "; ".join(["ok", *notes]), threads, compiler)
    reason = "; ".join(dict.fromkeys(missing + notes))
    return None, BuildInfo(False, None, False, 0.0, reason)


def load() -> ctypes.CDLL | None:
    """The loaded kernel library, building it on first use; None when it cannot be had (see :func:`build_info`)."""
    with _lock:
        if "lib" in _state:
            return _state["lib"]  # type: ignore[return-value]
        mode = _threads_wanted()  # a bad value raises before anything is built
        lib, info = None, BuildInfo(False, None, False, 0.0, "disabled by ROPEKIT_DISABLE_CPU_KERNEL")
        if os.environ.get("ROPEKIT_DISABLE_CPU_KERNEL", "") in ("", "0"):
            try:
                cc = _find_compiler()
            except _CompilerError as e:
                info = BuildInfo(False, None, False, 0.0, str(e))
            else:
                lib, info = _load_kernel(cc, mode)
        if lib is None:
            _warn(f"ropekit: fused CPU kernel unavailable ({info.reason}); using the pure-PyTorch backend")
        elif info.path is not None:
            _remove_stale(Path(info.path))
        _state["lib"], _state["info"] = lib, info
        return lib


def _remove_stale(loaded: Path) -> None:
    """After loading the build ``loaded``: remove the cache directory's stale builds
    (:func:`ropekit.kernels.cache_clean.remove_stale_builds`). Best effort: an error never fails the load."""
    cache = _cache_dir()
    if loaded.parent != cache:  # built in this process's temporary directory: the cache directory is unusable
        return
    with contextlib.suppress(Exception):
        remove_stale_builds(cache, loaded)


def build_info() -> BuildInfo:
    """Load (or build) the kernel if not done yet and report how it went."""
    load()
    return _state["info"]  # type: ignore[return-value]
