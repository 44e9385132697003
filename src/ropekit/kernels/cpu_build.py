# SPDX-License-Identifier: MIT
"""Build, cache and load ropekit's fused CPU kernel (``rope_cpu.c``).

The kernel is plain C with no torch headers, so it compiles in seconds with the system C compiler and is loaded
with ctypes (a torch C++ extension was measured against it and not kept: ``docs/kernels.md``). The compiler is
``$CC`` split like a shell command line (a program and its flags, e.g. ``CC='gcc -m64'``), else the first of
``cc``/``gcc``/``clang`` on ``PATH``; a ``$CC`` whose program is not found is reported, never replaced.

The shared library is cached in ``$ROPEKIT_CACHE_DIR`` (default ``~/.cache/ropekit``) as
``rope_cpu-<build key>-<compiler key>.so``, installed atomically (concurrent processes share one build), with a
``.json`` beside it recording the compiler, its version and the flags. The build key covers everything that changes
the generated code apart from the compiler: the sources, the flags, the CPU (its identity and instruction-set lines
of ``/proc/cpuinfo``, i.e. what ``-march=native`` compiles for) and the OS/libc; the compiler key covers the
compiler command, its ``--version`` and its exact flags. Without a compiler (a runtime image that ships a cache
warmed at build time) the newest cached build with the same build key is loaded. A cached library that cannot be
loaded (truncated, foreign, a stale ABI) is rebuilt once, with a warning; an unusable cache directory (not
creatable, read-only) makes this process build in a temporary directory, with a warning. Without a compiler and
without a matching build, or with ``ROPEKIT_DISABLE_CPU_KERNEL=1``, :func:`load` returns None and ropekit uses its
pure-PyTorch backend, saying so once. :func:`build_info` says what happened.

Threads: where torch runs its intra-op pool on GNU OpenMP (``libgomp.so.1``, as its Linux wheels do) the kernel is
built with ``-fopenmp`` by GCC and its chunks run on that same runtime, i.e. on torch's own worker threads;
elsewhere, with another compiler (clang's ``-fopenmp`` links its own runtime), or with ``ROPEKIT_CPU_THREADS=pool``,
on a small pthread pool of its own. Why (torch's workers spin after every torch op, and a second pool then shares
the cores with them) and what it measured: ``docs/kernels.md``, "Threads".
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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

#: "openmp" (torch's OpenMP runtime; a warning and the pool where it cannot be shared) or "pool"; unset: "openmp"
#: where it can be shared, else "pool"
THREADS_ENV = "ROPEKIT_CPU_THREADS"
_lock = threading.Lock()
_state: dict[str, object] = {}
_tmp_dir: list[Path] = []  # the per-process build directory used when the cache directory is unusable


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


class _NoPrebuilt(RuntimeError):
    """No compiler, and no cached build for this CPU."""


class _Unwritable(OSError):
    """The cache directory cannot hold a new build."""


def _warn(message: str) -> None:
    """warnings.warn attributed to the first frame outside ropekit and torch: the user's call."""
    import torch

    skip = tuple(
        {os.path.dirname(os.path.dirname(__file__)) + os.sep, os.path.dirname(torch.__file__) + os.sep}
        | {os.path.realpath(os.path.dirname(os.path.dirname(__file__))) + os.sep}
    )
    frame, level = sys._getframe(1), 2  # level 2: _warn's caller
    while frame is not None and (
        frame.f_code.co_filename.startswith(skip) or frame.f_code.co_filename.startswith("<frozen")
    ):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]  # None ends the loop
    warnings.warn(message, stacklevel=level)


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


def _temp_dir(cache: Path, err: OSError) -> Path:
    """This process's build directory when the cache directory is unusable (made once, with a warning; removed
    when the process that made it exits)."""
    if not _tmp_dir:
        folder = Path(tempfile.mkdtemp(prefix="ropekit-kernel-"))
        pid = os.getpid()

        def _remove() -> None:
            if os.getpid() == pid:  # not in a forked child that exits through Python
                shutil.rmtree(folder, ignore_errors=True)

        atexit.register(_remove)
        _tmp_dir.append(folder)
        cause = err.__cause__ if isinstance(err, _Unwritable) and err.__cause__ is not None else err
        _warn(
            f"ropekit: the kernel cache directory {cache} is not usable ({type(cause).__name__}: {cause}); "
            f"building the fused CPU kernel in the temporary directory {folder} for this process only "
            "(set ROPEKIT_CACHE_DIR to a writable directory to keep the build)"
        )
    return _tmp_dir[0]


def _compile(argv: Sequence[str], flags: list[str], folder: Path) -> tuple[Path, float]:
    """Compile into a new temporary file in ``folder``: (its path, seconds). _Unwritable when ``folder`` cannot
    be created or written; RuntimeError when the compiler fails."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(suffix=".so", dir=folder)
        os.close(fd)
    except OSError as e:
        raise _Unwritable(str(e)) from e
    tmp = Path(name)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [*argv, *flags, "-o", str(tmp), str(SOURCE)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"compiler failed ({shlex.join(argv)}): {proc.stderr.strip()[:500]}")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp, time.perf_counter() - t0


def _build(cc: str | Sequence[str], flags: list[str], out: Path) -> float:
    """Compile the kernel into ``out`` (installed atomically: a concurrent process sees either nothing or a
    complete library); the seconds it took."""
    tmp, secs = _compile([cc] if isinstance(cc, str) else cc, flags, out.parent)
    try:
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return secs


def _setup(lib: ctypes.CDLL) -> ctypes.CDLL:
    # the ABI first: a stale or foreign library fails here, before its symbols are looked up
    lib.ropekit_abi_version.restype = ctypes.c_int
    if (abi := lib.ropekit_abi_version()) != ABI_VERSION:
        raise RuntimeError(f"stale kernel library (ABI {abi}, expected {ABI_VERSION})")
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
    return lib


def _open(path: Path) -> ctypes.CDLL:
    return _setup(ctypes.CDLL(str(path)))


def _meta_path(lib: Path) -> Path:
    return lib.with_suffix(".json")


def _read_meta(lib: Path) -> dict[str, object]:
    try:
        meta = json.loads(_meta_path(lib).read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _write_meta(lib: Path, meta: dict[str, object]) -> None:
    """The build's metadata beside it (atomically; best effort: the library works without it)."""
    try:
        fd, name = tempfile.mkstemp(suffix=".json", dir=lib.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(meta, f, indent=1)
        os.replace(name, _meta_path(lib))
    except OSError:
        pass
    finally:
        Path(name).unlink(missing_ok=True)


def _exists(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def _build_and_open(
    cc: _Compiler, flags: list[str], path: Path, meta: dict[str, object]
) -> tuple[ctypes.CDLL, float, Path]:
    """Compile, load and install the library at ``path`` (in a temporary directory when the cache directory is
    unusable): (library, seconds, where it was installed). It is loaded under its temporary name before it is
    installed, so a stale library of the same final name that this process loaded stays apart, and a build that
    does not load is never installed."""
    try:
        tmp, secs = _compile(cc.argv, flags, path.parent)
    except _Unwritable as e:
        path = _temp_dir(path.parent, e) / path.name
        tmp, secs = _compile(cc.argv, flags, path.parent)
    try:
        lib = _open(tmp)
        _write_meta(path, meta)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return lib, secs, path


def _obtain_prebuilt(threads: str) -> tuple[ctypes.CDLL, Path, bool, float, str]:
    """Without a compiler: the newest cached build with this build key (sources, flags, CPU, OS) that loads."""
    cache = _cache_dir()
    if not _cpu_isa_known():
        raise _NoPrebuilt(
            "no C compiler found (set $CC), and /proc/cpuinfo does not give this CPU's instruction set, so no "
            "cached build can be matched to it"
        )
    try:
        found = [(p.stat().st_mtime, p) for p in cache.glob(f"rope_cpu-{_build_key(threads)}-*.so")]
    except OSError:
        found = []
    for _, p in sorted(found, reverse=True):
        try:
            lib = _open(p)
        except Exception as e:  # noqa: BLE001 - truncated, foreign or stale: try the next one
            _warn(
                f"ropekit: the cached CPU kernel {p} cannot be loaded ({type(e).__name__}: {e}) and there is no C "
                "compiler to rebuild it; delete the file"
            )
            continue
        compiler = str(_read_meta(p).get("compiler", "unknown (no build metadata)"))
        return lib, p, False, 0.0, compiler
    raise _NoPrebuilt(f"no C compiler found (set $CC), and no cached build for this CPU in {cache}")


def _obtain(cc: _Compiler | None, threads: str) -> tuple[ctypes.CDLL, Path, bool, float, str]:
    """(library, path, built now, compile seconds, compiler): from the cache, else compiled into it."""
    if cc is None:
        return _obtain_prebuilt(threads)
    flags = _flags(cc, threads)
    key = _build_key(threads)
    path = _cache_dir() / f"rope_cpu-{key}-{_compiler_key(cc, flags)}.so"
    if _exists(path):
        try:
            return _open(path), path, False, 0.0, cc.describe()
        except Exception as e:  # noqa: BLE001 - truncated or foreign (OSError), stale ABI (RuntimeError), ...
            _warn(
                f"ropekit: the cached CPU kernel {path} cannot be loaded ({type(e).__name__}: {e}); rebuilding it"
            )
    meta: dict[str, object] = {
        "compiler": cc.describe(),
        "argv": list(cc.argv),
        "version": cc.version,
        "flags": flags,
        "build_key": key,
        "threads": threads,
        "abi": ABI_VERSION,
        "cpu": _cpu_id(),
        "platform": _platform_id(),
    }
    lib, secs, path = _build_and_open(cc, flags, path, meta)
    return lib, path, True, secs, cc.describe()


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
        _state["lib"], _state["info"] = lib, info
        return lib


def build_info() -> BuildInfo:
    """Load (or build) the kernel if not done yet and report how it went."""
    load()
    return _state["info"]  # type: ignore[return-value]
