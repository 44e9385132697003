"""One report built once per session through the CLI (gemma-3-4b: two layer types, scaled and unscaled)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ropekit.cli.main import main

REPORT_PRESET = "gemma-3-4b"


@pytest.fixture(scope="session")
def preset_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DIR of ``ropekit report gemma-3-4b --out DIR --json`` (index.html and report.json)."""
    out = tmp_path_factory.mktemp("report")
    assert main(["report", REPORT_PRESET, "--out", str(out), "--json"]) == 0
    return out
