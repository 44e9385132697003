"""Stale builds in the kernel cache directory (``ropekit.kernels.cache_clean``): what is removed (only ropekit's own
builds unused for 30 days and temporary files of dead builds), what is never touched (the build in use, builds other
processes use, foreign files), the directory lock that keeps a build from being removed while another process loads
it, and that cleaning never fails a load. The cache directory is ``$ROPEKIT_CACHE_DIR``, here a temporary one."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ropekit.kernels import build_cache, cache_clean, cpu_build
from ropekit.kernels.cache_clean import cache_lock, remove_stale_builds
from tests.ropekit.kernels.test_cpu_build import _FAKE_CC, _builds, _fake_env, _good_library, _probe

DAY = 86400.0


def _file(folder: Path, name: str, days: float, now: float) -> Path:
    """A file ``name`` in ``folder`` last modified ``days`` before ``now``."""
    path = folder / name
    path.write_bytes(name.encode())
    os.utime(path, (now - days * DAY, now - days * DAY))
    return path


def _build_name(a: str, b: str, suffix: str) -> str:
    return f"rope_cpu-{a * 16}-{b * 8}{suffix}"


def _snapshot(folder: Path) -> dict[str, tuple[float, bytes | None]]:
    """Every entry under ``folder`` (recursively, symlinks not followed): its mtime and a file's bytes."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(folder))] = (
            st.st_mtime,
            p.read_bytes() if p.is_file() and not p.is_symlink() else None,
        )
    return out


def test_stale_builds_go_and_everything_else_stays(tmp_path: Path) -> None:
    now = time.time()
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    cache.mkdir()
    outside.mkdir()
    current = _file(cache, _build_name("a", "b", ".so"), 90, now)  # this process's build: kept, however old
    _file(cache, _build_name("a", "b", ".json"), 90, now)
    _file(cache, _build_name("c", "d", ".so"), 1, now)  # another version's / thread mode's build, in use
    _file(
        cache, _build_name("c", "d", ".json"), 45, now
    )  # its metadata (not refreshed by loads): kept with it
    _file(cache, _build_name("0", "f", ".json"), 0.001, now)  # a concurrent build between its two renames
    _file(cache, "rope_cpu-tmp-k9k9_k9k.so", 0.01, now)  # a build in progress
    stale = {
        _file(cache, _build_name("e", "f", ".so"), 31, now),  # unused for 31 days, and its metadata
        _file(cache, _build_name("e", "f", ".json"), 31, now),
        _file(cache, _build_name("1", "2", ".json"), 40, now),  # metadata whose library is gone
        _file(cache, "rope_cpu-tmp-abcd_123.so", 2, now),  # left by a killed build
        _file(cache, "rope_cpu-tmp-xyz00000.json", 2, now),
    }
    # not ropekit's (by name or kind), however old: untouched
    for name in (
        "notes.txt",
        "tmpabcdefgh.so",  # an older ropekit's temporary name is anyone's
        "rope_cpu-123.so",
        _build_name("3", "4", ".so.bak"),
        _build_name("A", "B", ".so"),
        _build_name("g", "h", ".so"),
        "rope_cpu-tmp-abc.so",
    ):
        _file(cache, name, 400, now)
    target = _file(outside, "mine.so", 400, now)
    (cache / _build_name("7", "8", ".so")).symlink_to(target)
    os.utime(cache / _build_name("7", "8", ".so"), (now - 400 * DAY,) * 2, follow_symlinks=False)
    (cache / _build_name("9", "0", ".so")).mkdir()
    (cache / "ext-abc").mkdir()
    _file(cache / "ext-abc", _build_name("5", "6", ".so"), 400, now)
    before, outside_before = _snapshot(cache), _snapshot(outside)

    removed = remove_stale_builds(cache, current, now=now)

    assert set(removed) == stale
    names = {str(p.relative_to(cache)) for p in stale}
    assert _snapshot(cache) == {k: v for k, v in before.items() if k not in names}
    assert _snapshot(outside) == outside_before


def test_the_metadata_of_a_kept_build_is_kept_however_old(tmp_path: Path) -> None:
    """Loads refresh a library's time, not its metadata's: the .json goes with its library, not by its own age."""
    now = time.time()
    current = _file(tmp_path, _build_name("a", "b", ".so"), 0, now)
    _file(tmp_path, _build_name("c", "d", ".so"), 1, now)
    meta = _file(tmp_path, _build_name("c", "d", ".json"), 400, now)
    assert remove_stale_builds(tmp_path, current, now=now) == [] and meta.exists()


@contextmanager
def _held(folder: Path, op: int) -> Iterator[None]:
    """``folder``'s flock held as another process would hold it (another open file description)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, op)
        yield
    finally:
        os.close(fd)


@pytest.mark.parametrize(("op", "who"), [(fcntl.LOCK_SH, "a loader"), (fcntl.LOCK_EX, "a cleaner")])
def test_nothing_is_removed_while_another_process_holds_the_lock(tmp_path: Path, op: int, who: str) -> None:
    now = time.time()
    current = _file(tmp_path, _build_name("a", "b", ".so"), 0, now)
    stale = _file(tmp_path, _build_name("c", "d", ".so"), 60, now)
    with _held(tmp_path, op):
        assert remove_stale_builds(tmp_path, current, now=now) == [], who
        assert stale.exists()
    assert remove_stale_builds(tmp_path, current, now=now) == [stale] and not stale.exists()


def test_a_loader_waits_for_a_cleaner_but_not_forever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared lock waits LOCK_WAIT_S for an exclusive holder (a cleaner that hung, or whose fork kept the
    lock), then the loader goes on without it."""
    with cache_lock(tmp_path, exclusive=False) as held:
        assert held
        with cache_lock(tmp_path, exclusive=False) as also:  # loaders share it
            assert also
        with cache_lock(tmp_path, exclusive=True) as cleaner:  # a cleaner does not wait
            assert not cleaner
    monkeypatch.setattr(cache_clean, "LOCK_WAIT_S", 0.3)
    with _held(tmp_path, fcntl.LOCK_EX):
        t0 = time.monotonic()
        with cache_lock(tmp_path, exclusive=False) as held:
            waited = time.monotonic() - t0
            assert not held and 0.3 <= waited < 3.0
    with cache_lock(tmp_path / "missing", exclusive=False) as held:
        assert not held


def test_cleaning_errors_are_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = time.time()
    current = _file(tmp_path, _build_name("a", "b", ".so"), 0, now)
    stale = _file(tmp_path, _build_name("c", "d", ".so"), 60, now)
    assert remove_stale_builds(tmp_path / "missing", current, now=now) == []

    def refuse(*args: object, **kw: object) -> None:
        raise PermissionError(13, "Permission denied", str(args[0]))

    with monkeypatch.context() as m:
        m.setattr(cache_clean.os, "unlink", refuse)
        assert remove_stale_builds(tmp_path, current, now=now) == [] and stale.exists()
    with monkeypatch.context() as m:
        m.setattr(cache_clean.os, "scandir", lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))
        assert remove_stale_builds(tmp_path, current, now=now) == [] and stale.exists()


def test_the_loader_holds_the_shared_lock_while_it_finds_and_loads_its_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While ``_obtain`` looks for and loads a build, a cleaner (another process) removes nothing."""
    now = time.time()
    monkeypatch.setenv("ROPEKIT_CACHE_DIR", str(tmp_path))
    current = _file(tmp_path, _build_name("a", "b", ".so"), 0, now)
    stale = _file(tmp_path, _build_name("c", "d", ".so"), 60, now)
    during: list[list[Path]] = []

    def obtain_locked(cc: object, threads: str) -> tuple[object, Path, bool, float, str]:
        during.append(remove_stale_builds(tmp_path, current, now=now))
        return None, current, False, 0.0, "stand-in"

    monkeypatch.setattr(build_cache, "_obtain_locked", obtain_locked)
    build_cache._obtain(None, "pool")
    assert during == [[]] and stale.exists()
    assert remove_stale_builds(tmp_path, current, now=now) == [stale]


# -------------------------------------------------------------------------------- through load(), in processes
needs_cc = pytest.mark.skipif(
    cpu_build.load() is None, reason="no C compiler: the fused CPU kernel is unavailable"
)


@pytest.fixture
def stand_in_cc(tmp_path: Path) -> tuple[Path, Path]:
    """(a stand-in compiler that copies this process's library to its -o, its log of builds)."""
    cc = tmp_path / "fakecc"
    cc.write_text(_FAKE_CC)
    cc.chmod(0o755)
    return cc, tmp_path / "fakecc.log"


@needs_cc
def test_a_load_removes_stale_builds_and_keeps_the_rest(
    tmp_path: Path, stand_in_cc: tuple[Path, Path]
) -> None:
    """Finding "old kernel cache files not cleaned": a process that loads the kernel removes the builds of other
    keys unused for 30 days (and their metadata, and a dead build's temporary file), keeps a recent build of
    another key (another ropekit version's) and a foreign file; its own build, even unused for 60 days, is loaded
    from the cache (not rebuilt), kept, and marked as used now."""
    cache, now = tmp_path / "cache", time.time()
    cache.mkdir()
    stale = [
        _file(cache, _build_name("e", "f", ".so"), 40, now),
        _file(cache, _build_name("e", "f", ".json"), 40, now),
        _file(cache, "rope_cpu-tmp-abcd1234.so", 2, now),
    ]
    in_use = _file(cache, _build_name("c", "d", ".so"), 1, now)
    foreign = _file(cache, "notes.txt", 400, now)
    env = _fake_env(stand_in_cc, cache, _good_library())

    first = _probe(env)
    assert first["available"] and first["built"] and _builds(stand_in_cc) == 1 and first["warnings"] == []
    own = Path(first["path"])
    assert not any(p.exists() for p in stale)
    assert in_use.exists() and foreign.exists() and foreign.stat().st_mtime == pytest.approx(now - 400 * DAY)
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [own.name, own.with_suffix(".json").name, in_use.name, foreign.name]
    )

    for p in (own, own.with_suffix(".json")):
        os.utime(p, (now - 60 * DAY,) * 2)
    second = _probe(env)
    assert (
        second["available"]
        and not second["built"]
        and second["path"] == str(own)
        and _builds(stand_in_cc) == 1
    )
    assert own.exists() and own.with_suffix(".json").exists()
    assert own.stat().st_mtime > time.time() - DAY  # used now


@needs_cc
def test_a_failing_cleaner_never_fails_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kw: object) -> list[Path]:
        raise RuntimeError("cleaning failed")

    monkeypatch.setattr(cpu_build, "remove_stale_builds", boom)
    monkeypatch.setattr(cpu_build, "_state", {})  # as in a new process
    assert cpu_build.load() is not None and cpu_build.build_info().available
