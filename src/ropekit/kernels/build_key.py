# SPDX-License-Identifier: MIT
"""What identifies a build of the fused CPU kernel: the compiler, the flags, the CPU and the cache keys.

:mod:`ropekit.kernels.cpu_build` names a cached library ``rope_cpu-<build key>-<compiler key>.so``. The build key
(:func:`_build_key`) covers everything that changes the generated code apart from the compiler: the sources, the
flags, the CPU (the identity and instruction-set lines of ``/proc/cpuinfo``, i.e. what ``-march=native`` compiles
for) and the OS/libc. The compiler key (:func:`_compiler_key`) covers the compiler command, its ``--version`` and
its exact flags. The compiler is ``$CC`` split like a shell command line, else the first of ``cc``/``gcc``/``clang``
on ``PATH``; a ``$CC`` whose program is not found is reported, never replaced.

Shapes: none.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ABI_VERSION", "HEADERS", "SOURCE"]

SOURCE = Path(__file__).with_name("rope_cpu.c")
#: included by SOURCE
HEADERS = tuple(Path(__file__).with_name(h) for h in ("rope_cache_write.h", "rope_phase.h"))
ABI_VERSION = 9
#: every compiler: -ffp-contract=off keeps a*c - b*s two roundings (clang contracts into FMAs by default, which
#: would break the bit-identity with the PyTorch backend; GCC's ISO mode already does not)
_FLAGS = ["-O3", "-pthread", "-shared", "-fPIC", "-std=c11", "-ffp-contract=off"]
_GCC_FLAGS = ["-Wno-aggressive-loop-optimizations"]  # GCC only (clang warns about an unknown option)
_OMP_FLAGS = ["-fopenmp", "-DROPEKIT_OMP"]
#: the lines of /proc/cpuinfo's first CPU that say what -march=native compiles for (x86, Arm, RISC-V, POWER, s390)
_CPU_FIELDS = frozenset(
    {
        "vendor_id",
        "cpu family",
        "model",
        "model name",
        "flags",
        "features",
        "cpu implementer",
        "cpu architecture",
        "cpu variant",
        "cpu part",
        "isa",
        "uarch",
        "cpu",
    }
)
_ISA_FIELDS = ("flags", "features", "isa")
_CPUINFO = Path("/proc/cpuinfo")


class _CompilerError(RuntimeError):
    """$CC is set but cannot be used."""


@dataclass(frozen=True)
class _Compiler:
    argv: tuple[str, ...]  # program (resolved path) and the flags $CC gave
    version: str  # its --version output

    @property
    def family(self) -> str:
        v = self.version.lower()
        if "clang" in v:
            return "clang"
        return "gcc" if ("gcc" in v or "free software foundation" in v) else "other"

    def describe(self) -> str:
        first = self.version.strip().splitlines()[0] if self.version.strip() else "version unknown"
        return f"{shlex.join(self.argv)} ({first})"


def _compiler() -> list[str] | None:
    """The C compiler command: ``$CC`` split like a shell command line (a program and its flags), else the first of
    cc, gcc, clang on PATH; None when there is none. Raises _CompilerError when $CC is set and its program is not
    found: a compiler the user named is never silently replaced by another."""
    raw = os.environ.get("CC", "")
    if raw.strip():
        try:
            argv = shlex.split(raw)
        except ValueError as e:
            raise _CompilerError(f"$CC={raw!r} is not a valid command line ({e})") from None
        prog = shutil.which(argv[0]) if argv else None
        if prog is None:
            raise _CompilerError(
                f"$CC={raw!r}: program {argv[0]!r} not found; expected a C compiler command such as 'gcc' or "
                "'clang -m64' (unset CC to use cc, gcc or clang from PATH)"
            )
        return [prog, *argv[1:]]
    for cand in ("cc", "gcc", "clang"):
        if prog := shutil.which(cand):
            return [prog]
    return None


def _find_compiler() -> _Compiler | None:
    argv = _compiler()
    if argv is None:
        return None
    try:
        proc = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        raise _CompilerError(
            f"cannot run the C compiler {shlex.join(argv)} ({type(e).__name__}: {e})"
        ) from None
    return _Compiler(tuple(argv), proc.stdout)


def _cpu_id() -> str:
    """What ``-march=native`` compiles for, as the OS reports it: the identity and instruction-set lines of the first
    CPU in /proc/cpuinfo (x86: vendor, family, model, model name and the whole ``flags`` line; Arm: ``Features`` and
    the CPU part), whitespace normalised; volatile lines (MHz, bogomips, microcode, bugs) are left out. Without
    /proc/cpuinfo: platform.processor()."""
    try:
        text = _CPUINFO.read_text()
    except OSError:
        text = ""
    lines = []
    for line in text.strip().split("\n\n", 1)[0].splitlines() if text.strip() else []:
        name, sep, value = line.partition(":")
        if sep and name.strip().lower() in _CPU_FIELDS:
            lines.append(f"{name.strip().lower()}: {' '.join(value.split())}")
    if not any(line.startswith(_ISA_FIELDS) for line in lines):
        lines.append(f"processor: {platform.processor() or platform.machine()}")
    return "\n".join(lines)


def _cpu_isa_known() -> bool:
    return any(line.startswith(_ISA_FIELDS) for line in _cpu_id().splitlines())


def _platform_id() -> str:
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):
        libc = ""
    return f"{platform.system()} {platform.machine()} {libc}"


def _arch_flags() -> list[str]:
    # -march=native: the build key includes the CPU's instruction set, so a build never runs on a CPU it was not
    # made for
    return ["-march=native"] if platform.machine() in ("x86_64", "AMD64", "aarch64", "arm64") else []


def _base_flags(threads: str) -> list[str]:
    return _FLAGS + _arch_flags() + (_OMP_FLAGS if threads == "openmp" else [])


def _flags(cc: _Compiler, threads: str) -> list[str]:
    return _base_flags(threads) + (_GCC_FLAGS if cc.family == "gcc" else [])


def _build_key(threads: str) -> str:
    """Everything that changes the generated code except the compiler: sources, flags, CPU, OS and libc."""
    parts = [
        f"ropekit rope_cpu abi {ABI_VERSION}",
        SOURCE.read_text(),
        *(h.read_text() for h in HEADERS),
        " ".join(_base_flags(threads)),
        _cpu_id(),
        _platform_id(),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _native_target(cc: _Compiler) -> str:
    """The compiler's predefined macros under the arch flags (its view of -march=native): part of the compiler key
    where /proc/cpuinfo does not name the CPU's instruction set."""
    if _cpu_isa_known() or not _arch_flags():
        return ""
    proc = subprocess.run(
        [*cc.argv, *_arch_flags(), "-dM", "-E", "-x", "c", os.devnull],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.stdout


def _compiler_key(cc: _Compiler, flags: list[str]) -> str:
    text = "\n".join([*cc.argv, cc.version, " ".join(flags), _native_target(cc)])
    return hashlib.sha256(text.encode()).hexdigest()[:8]
