"""Run test code in a fresh interpreter, for cases that could crash the process (a segfault must fail the test, not
end the test run)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_isolated(code: str) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter from the repository root (so ``tests.oracles`` imports); its last stdout
    line is JSON, returned parsed. A non-zero exit (a crash: rc -11) fails with the process's stderr."""
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        check=False,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert r.returncode == 0, f"the process died (rc {r.returncode}): {r.stderr[-2000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
