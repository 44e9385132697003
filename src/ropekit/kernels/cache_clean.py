# SPDX-License-Identifier: MIT
"""Stale builds in the kernel cache directory: which files are ropekit's, when one is stale, and how they are removed
without disturbing another process.

The cache directory (``$ROPEKIT_CACHE_DIR``, default ``~/.cache/ropekit``) collects one build per source version,
flags, CPU and compiler, and processes of several ropekit versions may share it. A build is stale when no process
has loaded it for :data:`STALE_AFTER_S` (30 days): each load refreshes the library's modification time
(:func:`_touch`), so the builds in use stay -- this version's, another installed version's, the other thread mode's
-- and those of uninstalled versions, former flags or a replaced compiler go. After loading the kernel, a process
removes (:func:`remove_stale_builds`):

- ``rope_cpu-<16 hex>-<8 hex>.so`` not loaded for 30 days, and its ``.json`` (a ``.json`` whose library is gone
  once it is 30 days old too);
- ``rope_cpu-tmp-<8 characters>.so`` / ``.json``, a build's output or metadata before its rename into place (which
  comes within the compiler's 300 s timeout, seconds after the file's last write), once :data:`ORPHAN_AFTER_S` (an
  hour) old: left by a build that was killed;
- ``tmp<8 characters>.so`` / ``.json``, the same files as ropekit versions before the ``rope_cpu-tmp-`` prefix named
  them (:mod:`tempfile`'s default name), once an hour old too, and only where the file is ropekit's: a library that
  exports ``ropekit_abi_version`` (every build of ``rope_cpu.c`` does) or a file that begins as a build's metadata
  does. That name is anyone's: another program's file of it, and an empty one, stay.

Nothing else is touched: no file of another name, no symlink, no directory, never the library the process loaded.
A build is installed complete (a rename), so a library of the pattern is never half-written; a file of a build in
progress has the temporary name and is recent. Loaders hold a shared ``flock`` on the directory from looking for
their build until it is loaded (:func:`cache_lock`), the cleaner an exclusive one, taken without waiting (a busy
directory is left to a later process): a build is never removed between another process's finding and loading it.
Processes of ropekit versions without the lock do not take it; for them the race needs a build unused for 30 days
loaded at the very moment another process cleans, and losing it costs a warning and a rebuild. Removing a library
that another process has mapped is safe (POSIX: the mapping keeps the file's data). Best effort: an error while
cleaning is ignored and never fails the load.

Shapes: none.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["ORPHAN_AFTER_S", "STALE_AFTER_S", "TEMP_PREFIX", "cache_lock", "remove_stale_builds"]

#: a cached build not loaded for this long (seconds; its modification time, refreshed by each load) is stale
STALE_AFTER_S = 30 * 86400.0
#: a build's temporary file this old (seconds) was left by a build that died (compiling is killed after 300 s)
ORPHAN_AFTER_S = 3600.0
#: how long a loader waits for a cleaner's exclusive lock (held for milliseconds) before going on without the lock
LOCK_WAIT_S = 5.0
#: the name prefix of a build's temporary files in the cache directory
TEMP_PREFIX = "rope_cpu-tmp-"
_BUILD = re.compile(r"rope_cpu-[0-9a-f]{16}-[0-9a-f]{8}\.(?:so|json)")
_TEMP = re.compile(re.escape(TEMP_PREFIX) + r"[a-z0-9_]{8}\.(?:so|json)")  # tempfile.mkstemp's 8 characters
#: the temporary names of ropekit versions before TEMP_PREFIX (tempfile.mkstemp's default prefix): ropekit's only by
#: their content (:func:`_legacy_is_ours`)
_LEGACY_TEMP = re.compile(r"tmp[a-z0-9_]{8}\.(?:so|json)")
#: an exported symbol of every build of rope_cpu.c (in the library's dynamic string table)
_LIB_MARK = b"ropekit_abi_version"
_META_MARK = b'{\n "compiler": '  # how every build's metadata begins (json.dump, indent=1, "compiler" first)
_LEGACY_MAX_BYTES = 16 << 20  # a build is under 1 MiB: a larger file of a legacy name is not read, and stays


@contextlib.contextmanager
def cache_lock(folder: Path, *, exclusive: bool) -> Iterator[bool]:
    """Hold an ``flock`` on the directory ``folder`` itself (no lock file): shared for a loader (waiting up to
    :data:`LOCK_WAIT_S` for a cleaner), exclusive for the cleaner (not waiting). Yields whether it is held: False
    where ``folder`` does not exist, the platform or filesystem has no flock, or the lock is busy."""
    fd = _lock_fd(folder, exclusive)
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock


def _lock_fd(folder: Path, exclusive: bool) -> int | None:
    try:
        import fcntl
    except ImportError:  # no flock (Windows)
        return None
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return None
    op = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    deadline = time.monotonic() + (0.0 if exclusive else LOCK_WAIT_S)
    while True:
        try:
            fcntl.flock(fd, op)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        except OSError:  # e.g. ENOLCK on a filesystem without locks
            break
    os.close(fd)
    return None


def _touch(path: Path) -> None:
    """Mark the build at ``path`` as used now (its modification time); best effort (e.g. a read-only cache)."""
    try:
        os.utime(path)
    except OSError:
        pass


def remove_stale_builds(folder: Path, keep: Path, *, now: float | None = None) -> list[Path]:
    """Remove the stale builds and the dead temporary files of the cache directory ``folder`` (see the module
    docstring), never ``keep`` (the library this process loaded) nor its metadata; the paths removed. Nothing is
    removed while another process holds the directory's lock. Best effort: never raises."""
    try:
        with cache_lock(folder, exclusive=True) as held:
            return _remove(folder, keep, time.time() if now is None else now) if held else []
    except Exception:  # noqa: BLE001 - cleaning is best effort: it never fails the load
        return []


def _remove(folder: Path, keep: Path, now: float) -> list[Path]:
    mtimes: dict[str, float] = {}  # the regular files (no symlink, no directory) of ropekit's names
    with os.scandir(folder) as it:
        for entry in it:
            if not any(p.fullmatch(entry.name) for p in (_BUILD, _TEMP, _LEGACY_TEMP)):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                mtimes[entry.name] = st.st_mtime
    kept = {keep.name, keep.with_suffix(".json").name} if keep.parent == folder else set()

    def stale(name: str) -> bool:
        if name in kept:
            return False
        if _TEMP.fullmatch(name):
            return now - mtimes[name] > ORPHAN_AFTER_S
        if _LEGACY_TEMP.fullmatch(name):
            return now - mtimes[name] > ORPHAN_AFTER_S and _legacy_is_ours(folder / name)
        if name.endswith(".json") and os.path.lexists(folder / f"{name[: -len('.json')]}.so"):
            return False  # a library's metadata goes with it
        return now - mtimes[name] > STALE_AFTER_S

    removed = []
    for name in sorted(mtimes, key=lambda n: n.endswith(".json")):  # libraries first, then their metadata
        if stale(name):
            try:
                os.unlink(folder / name)
            except OSError:
                continue
            removed.append(folder / name)
    return removed


def _legacy_is_ours(path: Path) -> bool:
    """Whether the regular file ``path`` of an older ropekit's temporary name (``tmp<8 characters>.so`` / ``.json``)
    is ropekit's: a kernel build (a library with ropekit's ABI symbol, whole or as far as a killed compiler wrote
    it) or a build's metadata (whole or partly written). Not read through a symlink; an unreadable, empty or large
    file is not ropekit's."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if path.suffix == ".json":
                return f.read(len(_META_MARK)) == _META_MARK
            data = f.read(_LEGACY_MAX_BYTES + 1)
    except OSError:
        return False
    return len(data) <= _LEGACY_MAX_BYTES and _LIB_MARK in data
