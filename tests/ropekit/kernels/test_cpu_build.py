"""Building, caching and loading the fused CPU kernel (``ropekit.kernels.cpu_build``): the cache key, builds without
a compiler, corrupt cache entries, an unusable cache directory, ``$CC``, clang, and where the warnings point.

Builds run in subprocesses with ``ROPEKIT_CACHE_DIR`` in a temporary directory. Most use a stand-in compiler (a
script that copies this process's library to its ``-o`` and logs each call), so the cache logic is tested in
seconds; the two real builds here are the ones the tests are about ($CC with flags, clang).
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from ropekit import RopeSpec, Rotary, apply_rope
from ropekit.kernels import build_key, cpu_build
from ropekit.rotation import cpu_backend

pytestmark = pytest.mark.skipif(
    cpu_build.load() is None, reason="no C compiler: the fused CPU kernel is unavailable"
)

# Run in a subprocess: how the kernel was obtained, the ropekit warnings, and every configuration where
# backend='cpu' differs in any bit from backend='torch' (the docs promise bit-identity): three storage dtypes, both
# layouts, partial rotary, bshd/bhsd prefill and a decode step, in and out of place, the first call and the prepared
# plan of a repeated one; and every finite float16 bit pattern (denormals, the largest values, which overflow when
# rotated) at positions from 0 (the identity: load and store alone) on.
_PROBE = r"""
import json, warnings, torch
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import ropekit
    from ropekit.kernels import build_key, cpu_build
    info = cpu_build.build_info()
    try:
        no_compiler = build_key._compiler() is None
    except Exception as e:
        no_compiler = f"{type(e).__name__}: {e}"
    bad = []
    if info.available and CHECK:
        g = torch.Generator().manual_seed(0)
        bits = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            for layout in ("half", "interleaved"):
                spec = ropekit.RopeSpec(64, base=500_000.0, rotary_dim=48, layout=layout)
                for fmt, shape in (("bshd", (2, 37, 6, 64)), ("bhsd", (2, 6, 37, 64)), ("bhsd", (4, 6, 1, 64))):
                    x = (torch.randn(shape, generator=g, dtype=torch.float64) * 3).to(dtype)
                    s = shape[1] if fmt == "bshd" else shape[2]
                    pos = torch.randint(0, 10**6, (shape[0], s), generator=g)
                    ref = ropekit.apply_rope(x, None, pos, spec, format=fmt, backend="torch")[0]
                    for inplace in (False, True):
                        for call in range(2):
                            got = ropekit.apply_rope(
                                x.clone(), None, pos, spec, format=fmt, inplace=inplace, backend="cpu"
                            )[0]
                            if not torch.equal(got.view(bits[dtype]), ref.view(bits[dtype])):
                                bad.append(f"{dtype} {layout} {fmt} {shape} inplace={inplace} call={call}")
        every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16)
        every = every[every.isfinite()]
        every = every[: every.numel() // 64 * 64].reshape(1, -1, 1, 64)
        pos = torch.arange(every.shape[1]) * 7919
        for layout in ("half", "interleaved"):
            spec = ropekit.RopeSpec(64, layout=layout)
            for p in (pos, torch.zeros_like(pos)):
                ref = ropekit.apply_rope(every, None, p, spec, backend="torch")[0]
                got = ropekit.apply_rope(every, None, p, spec, backend="cpu")[0]
                if not torch.equal(got.view(torch.int16), ref.view(torch.int16)):
                    bad.append(f"every float16 value, {layout}, positions {p[:3].tolist()}...")
print(json.dumps({
    "available": info.available, "built": info.built, "threads": info.threads, "reason": info.reason,
    "path": info.path, "compiler": info.compiler, "no_compiler": no_compiler, "mismatches": bad,
    "warnings": [str(m.message) for m in caught if "ropekit" in str(m.message)],
}))
"""

# A stand-in for a C compiler: says it is GCC, logs each build's arguments and copies $FAKE_CC_LIB to its -o.
_FAKE_CC = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "gcc (ropekit test stand-in) 12.0"; exit 0; fi
echo "$@" >> "$FAKE_CC_LOG"
out=""; prev=""
for a in "$@"; do if [ "$prev" = "-o" ]; then out="$a"; fi; prev="$a"; done
cp "$FAKE_CC_LIB" "$out"
"""


def _probe(env: dict[str, str], *, check: bool = False, drop: tuple[str, ...] = ("CC",)) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in (*drop, "ROPEKIT_DISABLE_CPU_KERNEL")}
    r = subprocess.run(
        [sys.executable, "-c", _PROBE.replace("CHECK", str(check))],
        capture_output=True,
        text=True,
        env={**base, **env},
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _good_library() -> Path:
    path = cpu_build.build_info().path
    assert path is not None
    return Path(path)


@pytest.fixture
def fake_cc(tmp_path: Path) -> tuple[Path, Path]:
    """(the stand-in compiler, its log of builds)."""
    cc = tmp_path / "fakecc"
    cc.write_text(_FAKE_CC)
    cc.chmod(0o755)
    return cc, tmp_path / "fakecc.log"


def _fake_env(fake: tuple[Path, Path], cache: Path, lib: Path) -> dict[str, str]:
    cc, log = fake
    return {
        "CC": str(cc),
        "FAKE_CC_LOG": str(log),
        "FAKE_CC_LIB": str(lib),
        "ROPEKIT_CACHE_DIR": str(cache),
        "ROPEKIT_CPU_THREADS": "pool",  # one build per process
    }


def _builds(fake: tuple[Path, Path]) -> int:
    log = fake[1]
    return len(log.read_text().splitlines()) if log.exists() else 0


# ------------------------------------------------------------------------------------------------ the build key
def test_build_key_follows_the_cpu_instruction_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 1: two hosts with the same model name but different instruction sets (one without AVX-512) must not
    share a -march=native build; what does not change the generated code (the clock, bogomips, other CPUs) must not
    change the key."""

    def key(text: str) -> str:
        path = tmp_path / "cpuinfo"
        path.write_text(text)
        monkeypatch.setattr(build_key, "_CPUINFO", path)
        return build_key._build_key("pool")

    head = (
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\n"
    )
    avx2 = "flags\t\t: fpu sse sse2 avx avx2 fma"
    avx512 = avx2 + " avx512f avx512bw avx512_bf16"
    tail = "\n\nprocessor\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: fpu\n"
    without = key(f"{head}cpu MHz\t\t: 2000.000\n{avx2}\nbogomips\t: 4000.00\n{tail}")
    assert key(f"{head}cpu MHz\t\t: 2000.000\n{avx512}\nbogomips\t: 4000.00\n{tail}") != without
    assert key(f"{head}cpu MHz\t\t: 3712.448\n{avx2}\nbogomips\t: 7424.89\nmicrocode\t: 0x1\n") == without
    arm = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd atomics\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n"
    assert key(arm) != key(arm.replace("atomics", "atomics sve sve2"))
    assert key(arm) != key(arm.replace("0xd0c", "0xd40"))


def test_this_hosts_key_holds_its_whole_flags_line() -> None:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    flags = next((line for line in text.splitlines() if line.startswith("flags")), None)
    if flags is None:
        pytest.skip("no flags line (not x86)")
    assert "flags: " + " ".join(flags.partition(":")[2].split()) in build_key._cpu_id().splitlines()


# ---------------------------------------------------------------------------------------- without a compiler
def test_prebuilt_kernel_loads_without_a_compiler(tmp_path: Path) -> None:
    """Finding 5: a cache warmed where a compiler was (this process's build and its metadata) serves a process with
    no compiler (PATH without cc/gcc/clang, CC unset): the kernel is loaded, not rebuilt, reports the compiler that
    built it, and computes what the PyTorch backend does, bit for bit."""
    lib, info = _good_library(), cpu_build.build_info()
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copy(lib, cache / lib.name)
    meta = lib.with_suffix(".json")  # written with every build (best effort: a full disk may have lost it)
    if meta.exists():
        shutil.copy(meta, cache / meta.name)
    empty = tmp_path / "bin"
    empty.mkdir()
    res = _probe({"ROPEKIT_CACHE_DIR": str(cache), "PATH": str(empty)}, check=True)
    assert res["no_compiler"] is True
    assert res["available"] and not res["built"] and res["threads"] == info.threads, res
    assert res["compiler"] == (info.compiler if meta.exists() else "unknown (no build metadata)")
    assert res["warnings"] == []
    assert res["mismatches"] == []


def test_without_a_compiler_a_build_for_another_cpu_is_not_loaded(tmp_path: Path) -> None:
    """The same library under another build key (another CPU, other sources or flags) is not loaded without a
    compiler: the fallback says why, once."""
    lib = _good_library()
    cache = tmp_path / "cache"
    cache.mkdir()
    other = "rope_cpu-" + "0" * 16 + "-" + lib.stem.rsplit("-", 1)[1]
    shutil.copy(lib, cache / f"{other}.so")
    empty = tmp_path / "bin"
    empty.mkdir()
    res = _probe({"ROPEKIT_CACHE_DIR": str(cache), "PATH": str(empty)})
    assert (
        not res["available"] and "no C compiler found" in res["reason"] and "no cached build" in res["reason"]
    )
    assert len(res["warnings"]) == 1 and "pure-PyTorch backend" in res["warnings"][0]


# ------------------------------------------------------------------------------------------- corrupt entries
def _stale_library(tmp_path: Path) -> Path:
    """A library that loads but has another ABI version (and none of the kernel's symbols)."""
    src, out = tmp_path / "stale.c", tmp_path / "stale.so"
    src.write_text("int ropekit_abi_version(void) { return 7; }\n")
    cc = build_key._compiler()
    assert cc is not None
    subprocess.run([*cc, "-shared", "-fPIC", "-o", str(out), str(src)], check=True, capture_output=True)
    return out


def test_corrupt_cached_library_is_rebuilt_once_with_a_warning(
    tmp_path: Path, fake_cc: tuple[Path, Path]
) -> None:
    """Finding 6: a cached library that cannot be loaded (a truncated file; a library of another ABI) is detected,
    rebuilt once with a warning naming it, and the rebuilt library is used; a rebuild that is no better is not
    installed, not retried, and the PyTorch fallback says why."""
    good, cache = _good_library(), tmp_path / "cache"
    truncated = tmp_path / "truncated.so"
    truncated.write_bytes(good.read_bytes()[:100])
    stale = _stale_library(tmp_path)
    first = _probe(_fake_env(fake_cc, cache, good))
    assert first["available"] and first["built"] and _builds(fake_cc) == 1
    entry = Path(first["path"])
    assert entry.parent == cache and entry.with_suffix(".json").exists()

    for n, bad in enumerate((truncated, stale)):
        shutil.copy(bad, entry)  # the cache entry goes bad
        res = _probe(_fake_env(fake_cc, cache, good), check=bad is truncated)
        assert _builds(fake_cc) == 2 + n and res["available"] and res["built"] and res["path"] == str(entry)
        assert (
            len(res["warnings"]) == 1
            and str(entry) in res["warnings"][0]
            and "rebuilding" in res["warnings"][0]
        )
        assert entry.read_bytes() == good.read_bytes() and res["mismatches"] == []

    shutil.copy(
        stale, entry
    )  # bad again, and the compiler now makes the same bad library: one rebuild, no loop
    res = _probe(_fake_env(fake_cc, cache, stale))
    assert _builds(fake_cc) == 4 and not res["available"] and "pool build" in res["reason"]
    assert "ABI 7, expected" in res["reason"]
    assert [("rebuilding" in w, "pure-PyTorch" in w) for w in res["warnings"]] == [
        (True, False),
        (False, True),
    ]
    assert entry.read_bytes() == stale.read_bytes()  # the failed rebuild was not installed
    assert sorted(p.name for p in cache.iterdir()) == sorted([entry.name, entry.with_suffix(".json").name])


# ------------------------------------------------------------------------------------- an unusable cache dir
def test_unusable_cache_directory_builds_in_a_temporary_directory(
    tmp_path: Path, fake_cc: tuple[Path, Path]
) -> None:
    """Finding 11: a cache directory that cannot be created (a path under a file) does not turn the kernel off: it
    is built in a temporary directory, with one warning naming the directory and the reason; the temporary
    directory is removed when the process exits."""
    blocker = tmp_path / "afile"
    blocker.write_text("")
    cache = blocker / "sub"
    res = _probe(_fake_env(fake_cc, cache, _good_library()), check=True)
    assert res["available"] and res["built"] and res["mismatches"] == []
    assert len(res["warnings"]) == 1
    warning = res["warnings"][0]
    assert str(cache) in warning and "NotADirectoryError" in warning
    folder = Path(res["path"]).parent
    assert str(folder) in warning and folder != cache and not folder.exists()  # removed at exit


# ------------------------------------------------------------------------------------------------------- $CC
def test_cc_naming_a_missing_program_is_reported_not_replaced(tmp_path: Path) -> None:
    """Finding 7: $CC naming a program that does not exist is not silently replaced by cc: the kernel is
    unavailable, and the reason and the one warning name CC and its value."""
    cc = "/opt/ropekit-missing-toolchain/bin/clang-18 -O2"
    res = _probe({"CC": cc, "ROPEKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert not res["available"] and not (tmp_path / "cache").exists()
    assert f"$CC={cc!r}" in res["reason"] and "not found" in res["reason"]
    assert len(res["warnings"]) == 1 and f"$CC={cc!r}" in res["warnings"][0]


def test_cc_with_flags_is_split_and_used(tmp_path: Path) -> None:
    """Finding 7 and the portable float16 conversions of finding 2: CC='<compiler> -DROPEKIT_F16_SOFT' runs that
    compiler with that flag (a wrapper logs its arguments), build_info() reports both, and the build with the
    integer float16 conversions (the code for compilers with neither _Float16 nor F16C) is bit-identical to the
    PyTorch backend on every float16 value."""
    real = build_key._compiler()
    assert real is not None
    wrapper, log = tmp_path / "mycc", tmp_path / "mycc.log"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec {real[0]} "$@"\n')
    wrapper.chmod(0o755)
    env = {
        "CC": f"{wrapper} -DROPEKIT_F16_SOFT",
        "ROPEKIT_CACHE_DIR": str(tmp_path / "cache"),
        "ROPEKIT_CPU_THREADS": "pool",
    }
    res = _probe(env, check=True)
    assert res["available"] and res["built"], res["reason"]
    assert res["compiler"].startswith(f"{wrapper} -DROPEKIT_F16_SOFT (")
    builds = [line for line in log.read_text().splitlines() if "rope_cpu.c" in line]
    assert len(builds) == 1 and builds[0].startswith("-DROPEKIT_F16_SOFT ")
    assert res["mismatches"] == []


def _clang() -> str | None:
    for name in ("clang", *(f"clang-{v}" for v in range(30, 13, -1))):
        if found := shutil.which(name):
            return found
    return None


@pytest.mark.skipif(_clang() is None, reason="no clang on PATH")
def test_clang_build_is_bit_identical_to_the_pytorch_backend(tmp_path: Path) -> None:
    """Finding 2: clang (14 has no _Float16 on x86-64; every version contracts a*c - b*s into FMAs unless told not
    to) builds the kernel, and its results are the PyTorch backend's bit for bit."""
    clang = _clang()
    assert clang is not None
    res = _probe({"CC": clang, "ROPEKIT_CACHE_DIR": str(tmp_path / "cache")}, check=True)
    assert res["available"] and res["built"] and "clang" in res["compiler"], res["reason"]
    assert res["threads"] == "pool"  # clang's -fopenmp links its own runtime, not torch's: the pool build
    assert res["mismatches"] == []


# ---------------------------------------------------------------------------------------------- the warnings
def test_unavailable_warning_points_at_the_callers_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 10: the "kernel unavailable" warning is attributed to the user's call, whatever the depth of
    ropekit's (and torch's nn.Module) frames below it."""
    cpu_backend.grain(torch.bfloat16)  # the real build's answers are cached before the kernel is switched off
    monkeypatch.setenv("ROPEKIT_DISABLE_CPU_KERNEL", "1")
    spec = RopeSpec(16)
    q, pos = torch.randn(1, 3, 2, 16), torch.arange(3)
    rotary = Rotary(spec)
    for call in (
        lambda: apply_rope(q, None, pos, spec),
        lambda: rotary(q, None, positions=pos),
    ):
        monkeypatch.setattr(cpu_build, "_state", {})  # as in a new process
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            line = inspect.getsourcelines(call)[1]
            call()
        got = [m for m in caught if "fused CPU kernel unavailable" in str(m.message)]
        assert len(got) == 1
        assert (got[0].filename, got[0].lineno) == (__file__, line)
