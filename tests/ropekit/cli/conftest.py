"""Fixtures shared by the CLI tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["file", "folder"])
def binary_source(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Path]:
    """A SOURCE argument that is not UTF-8 text (a pickle's first bytes): the file itself ("file"), or the folder
    that holds it as its config.json ("folder"). Returns (the SOURCE argument, the binary file it names)."""
    if request.param == "file":
        source = bad = tmp_path / "p.json"
    else:
        source, bad = tmp_path, tmp_path / "config.json"
    bad.write_bytes(b"\x80\x04\x95\x00\x00")
    return source, bad
