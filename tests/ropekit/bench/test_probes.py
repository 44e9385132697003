"""The C probes under src/ropekit/bench/probe (the measurements docs/kernels.md quotes) build with the command in
their own header and run: enumerated, so a new probe is covered. Their numbers are benchmarks, not tested here."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

PROBES = sorted((Path(__file__).resolve().parents[3] / "src" / "ropekit" / "bench" / "probe").glob("*.c"))
ROOT = Path(__file__).resolve().parents[3]


def _build_command(probe: Path) -> list[str]:
    """The header's `gcc ...` line and its continuation (comment lines up to "(one command line)")."""
    text = probe.read_text()
    m = re.search(r"^//\s+(gcc .*?)\(one command line\)", text, flags=re.MULTILINE | re.DOTALL)
    assert m, f"{probe.name}: no build line in its header"
    return shlex.split(re.sub(r"\n//\s*", " ", m.group(1)))


def test_probes_found() -> None:
    assert {"floor_probe.c", "bf16_probe.c"} <= {p.name for p in PROBES}


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.name)
def test_probe_builds_from_its_header_and_runs(probe: Path, tmp_path: Path) -> None:
    cmd = _build_command(probe)
    exe = tmp_path / probe.stem
    cmd[cmd.index("-o") + 1] = str(exe)
    build = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe), "1"], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0 and run.stdout.strip(), run.stderr
