# SPDX-License-Identifier: MIT
"""The fused CPU kernel's cache directory: compiling a build into it, installing it, its metadata, and finding the
build a process loads.

The shared library is cached in ``$ROPEKIT_CACHE_DIR`` (default ``~/.cache/ropekit``) as
``rope_cpu-<build key>-<compiler key>.so`` (:mod:`ropekit.kernels.build_key`), installed atomically (concurrent
processes share one build), with a ``.json`` beside it recording the compiler, its version and the flags. Without a
compiler (a runtime image that ships a cache warmed at build time) the newest cached build with the same build key
is loaded. A cached library that cannot be loaded (truncated, foreign, a stale ABI) is rebuilt once, with a warning;
an unusable cache directory (not creatable, read-only) makes this process build in a temporary directory, with a
warning. Each load marks its build as used and holds the directory's shared lock while it looks for and loads it,
so that stale builds can be removed safely (:mod:`ropekit.kernels.cache_clean`).

Shapes: none.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from ropekit.kernels.build_key import (
    ABI_VERSION,
    SOURCE,
    _build_key,
    _Compiler,
    _compiler_key,
    _cpu_id,
    _cpu_isa_known,
    _flags,
    _platform_id,
)
from ropekit.kernels.cache_clean import TEMP_PREFIX, _touch, cache_lock
from ropekit.kernels.kernel_abi import _open
from ropekit.kernels.warn import _warn

__all__: list[str] = []

_tmp_dir: list[Path] = []  # the per-process build directory used when the cache directory is unusable
#: a compiler still running after this long (seconds) is killed, and the build fails
_COMPILE_TIMEOUT_S = 300.0


class _NoPrebuilt(RuntimeError):
    """No compiler, and no cached build for this CPU."""


class _Unwritable(OSError):
    """The cache directory cannot hold a new build."""


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
        fd, name = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=".so", dir=folder)
        os.close(fd)
    except OSError as e:
        raise _Unwritable(str(e)) from e
    tmp = Path(name)
    t0 = time.perf_counter()
    try:
        status, stderr = _run_compiler([*argv, *flags, "-o", str(tmp), str(SOURCE)])
        if status != 0:
            raise RuntimeError(f"compiler failed ({shlex.join(argv)}): {stderr.strip()[:500]}")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp, time.perf_counter() - t0


def _run_compiler(cmd: list[str]) -> tuple[int, str]:
    """Run the compiler command ``cmd``: (its exit status, its stderr). subprocess.TimeoutExpired after
    :data:`_COMPILE_TIMEOUT_S`. It runs in a process group of its own, and when it times out or this process is
    interrupted the whole group is killed -- the driver and the assembler and linker it started, which killing the
    driver alone leaves running to write the output after the build removed it -- and gone before this raises."""
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as proc:
        try:
            _, stderr = proc.communicate(timeout=_COMPILE_TIMEOUT_S)
        except BaseException:
            _kill_group(proc)
            raise
    return proc.returncode, stderr


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """Kill the process group that ``proc`` leads and wait (at most 2 s) until none of its processes is left."""
    if not hasattr(os, "killpg"):  # no process groups (Windows): the driver alone
        proc.kill()
        return
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except OSError:  # ProcessLookupError: the group is gone
            return
        time.sleep(0.01)


def _build(cc: str | Sequence[str], flags: list[str], out: Path) -> float:
    """Compile the kernel into ``out`` (installed atomically: a concurrent process sees either nothing or a
    complete library); the seconds it took."""
    tmp, secs = _compile([cc] if isinstance(cc, str) else cc, flags, out.parent)
    try:
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return secs


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
        fd, name = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=".json", dir=lib.parent)
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
        _touch(p)  # in use: not stale
        compiler = str(_read_meta(p).get("compiler", "unknown (no build metadata)"))
        return lib, p, False, 0.0, compiler
    raise _NoPrebuilt(f"no C compiler found (set $CC), and no cached build for this CPU in {cache}")


def _obtain(cc: _Compiler | None, threads: str) -> tuple[ctypes.CDLL, Path, bool, float, str]:
    """(library, path, built now, compile seconds, compiler): from the cache, else compiled into it; under the
    cache directory's shared lock (no other process removes the build before it is loaded)."""
    with cache_lock(_cache_dir(), exclusive=False):
        return _obtain_locked(cc, threads)


def _obtain_locked(cc: _Compiler | None, threads: str) -> tuple[ctypes.CDLL, Path, bool, float, str]:
    if cc is None:
        return _obtain_prebuilt(threads)
    flags = _flags(cc, threads)
    key = _build_key(threads)
    path = _cache_dir() / f"rope_cpu-{key}-{_compiler_key(cc, flags)}.so"
    if _exists(path):
        try:
            lib = _open(path)
        except Exception as e:  # noqa: BLE001 - truncated or foreign (OSError), stale ABI (RuntimeError), ...
            _warn(
                f"ropekit: the cached CPU kernel {path} cannot be loaded ({type(e).__name__}: {e}); rebuilding it"
            )
        else:
            _touch(path)  # in use: not stale
            return lib, path, False, 0.0, cc.describe()
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
