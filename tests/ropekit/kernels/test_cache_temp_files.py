"""Temporary files of kernel builds in the cache directory: a build that fails, times out or is interrupted leaves
none behind (the compiler's own children included), and those left by killed builds -- this version's
``rope_cpu-tmp-*`` and the ``tmp*`` names of older ropekit versions -- are removed once an hour old, under the
directory lock, while a foreign file of the older name, an empty one and a recent one stay. The cache directory is a
temporary one."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ropekit.kernels import build_cache, cpu_build
from ropekit.kernels.cache_clean import remove_stale_builds
from tests.ropekit.kernels.test_cache_clean import DAY, _build_name, _file, _held, _snapshot, needs_cc

HOUR = DAY / 24

# A stand-in for a compiler driver that starts a linker (a child of its own) writing its -o late, and waits for it:
# killing the driver alone leaves the linker running, and it writes the output after the build removed it.
_SLOW_CC = """#!/bin/sh
out=""; prev=""
for a in "$@"; do if [ "$prev" = "-o" ]; then out="$a"; fi; prev="$a"; done
( sleep 1.5; echo "a late linker's output" > "$out" ) &
wait
"""


@pytest.fixture
def slow_cc(tmp_path: Path) -> Path:
    cc = tmp_path / "slowcc"
    cc.write_text(_SLOW_CC)
    cc.chmod(0o755)
    return cc


@pytest.fixture
def alarm_interrupt() -> Iterator[None]:
    """A KeyboardInterrupt (as Ctrl-C raises it) 0.5 s into the test."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _wait_past_the_late_write() -> None:
    time.sleep(2.5)  # the stand-in's linker writes 1.5 s after it started


def test_a_timed_out_build_leaves_nothing_behind(
    tmp_path: Path, slow_cc: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setattr(build_cache, "_COMPILE_TIMEOUT_S", 0.5)
    with pytest.raises(subprocess.TimeoutExpired):
        build_cache._compile([str(slow_cc)], [], cache)
    _wait_past_the_late_write()
    assert list(cache.iterdir()) == []


def test_an_interrupted_build_leaves_nothing_behind(
    tmp_path: Path, slow_cc: Path, alarm_interrupt: None
) -> None:
    cache = tmp_path / "cache"
    with pytest.raises(KeyboardInterrupt):
        build_cache._compile([str(slow_cc)], [], cache)
    _wait_past_the_late_write()
    assert list(cache.iterdir()) == []


def test_a_failed_build_leaves_nothing_behind(tmp_path: Path) -> None:
    cache, cc = tmp_path / "cache", tmp_path / "failcc"
    cc.write_text('#!/bin/sh\necho "error: no" >&2\nexit 1\n')
    cc.chmod(0o755)
    with pytest.raises(RuntimeError, match="error: no"):
        build_cache._compile([str(cc)], [], cache)
    assert list(cache.iterdir()) == []


def test_this_versions_temporary_files_go_once_an_hour_old(tmp_path: Path) -> None:
    now = time.time()
    current = _file(tmp_path, _build_name("a", "b", ".so"), 0, now)
    old = {
        _file(tmp_path, "rope_cpu-tmp-abcd_123.so", 2 / 24, now),  # two hours old: a killed build's
        _file(tmp_path, "rope_cpu-tmp-xyz00000.json", 2 / 24, now),
    }
    recent = _file(tmp_path, "rope_cpu-tmp-k9k9_k9k.so", 0.5 / 24, now)  # half an hour: a build in progress
    assert set(remove_stale_builds(tmp_path, current, now=now)) == old
    assert recent.exists() and current.exists()


def _aged(path: Path, hours: float, now: float) -> Path:
    os.utime(path, (now - hours * HOUR, now - hours * HOUR))
    return path


@needs_cc
def test_an_older_versions_temporary_files_go_only_where_they_are_ropekits(tmp_path: Path) -> None:
    """The oracle for "ropekit's": files made from a real build of this process (its library, its metadata) under
    ``tempfile``'s default name, as ropekit wrote them before the ``rope_cpu-tmp-`` prefix."""
    now = time.time()
    lib = Path(cpu_build.build_info().path or "")
    if not lib.with_suffix(".json").exists():  # best effort: a full disk may have lost it
        pytest.skip(f"no build metadata beside {lib}")
    meta = lib.with_suffix(".json").read_bytes()
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    cache.mkdir()
    outside.mkdir()
    current = _file(cache, _build_name("a", "b", ".so"), 0, now)

    def put(name: str, data: bytes | Path, hours: float) -> Path:
        path = cache / name
        if isinstance(data, Path):
            shutil.copyfile(data, path)
        else:
            path.write_bytes(data)
        return _aged(path, hours, now)

    stale = {
        put("tmpabcdefgh.so", lib, 2),  # a killed build's library
        put("tmpabcdefg1.json", meta, 2),  # its metadata, whole
        put("tmp0000000_.json", meta[: len(meta) // 2], 2),  # and as far as a killed write got
    }
    kept = [
        put("tmpzzzzzzzz.so", lib, 0.5),  # an older version's build in progress
        put("tmpzzzzzzz1.json", meta, 0.5),
        put("tmpforeign1.so", b"\x7fELF another program's library", 400 * 24),
        put("tmpfrgnjson.json", b'{"compiler": "not ropekit\'s layout"}', 400 * 24),
        put("tmpempty000.so", b"", 400 * 24),  # anyone's
        put("tmpabcdefghi.so", lib, 400 * 24),  # not tempfile's name (9 characters)
    ]
    shutil.copyfile(lib, outside / "lib.so")
    target = _aged(outside / "lib.so", 400 * 24, now)
    (cache / "tmpsymlink1.so").symlink_to(target)
    before = _snapshot(cache)

    with _held(cache, fcntl.LOCK_SH):  # a loader of this version at work: nothing goes
        assert remove_stale_builds(cache, current, now=now) == []
    assert _snapshot(cache) == before

    assert set(remove_stale_builds(cache, current, now=now)) == stale
    names = {p.name for p in stale}
    assert _snapshot(cache) == {k: v for k, v in before.items() if k not in names}
    assert all(p.exists() for p in kept) and target.exists()
