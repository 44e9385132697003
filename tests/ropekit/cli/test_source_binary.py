"""Proposed test for tests/ropekit/cli/ (with the cli/source.py patch): a non-UTF-8 SOURCE to inspect/precision
names the argument, the file and what was expected (trial finding 6: a bare "'utf-8' codec can't decode")."""

from __future__ import annotations

from pathlib import Path

import pytest

from ropekit.cli.main import main


@pytest.mark.parametrize("command", ["inspect", "precision"])
@pytest.mark.parametrize("where", ["file", "folder"])
def test_a_binary_source_names_the_argument_the_file_and_what_was_expected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, where: str
) -> None:
    if where == "file":
        source = bad = tmp_path / "p.json"
    else:
        source, bad = tmp_path, tmp_path / "config.json"
    bad.write_bytes(b"\x80\x04\x95\x00\x00")
    assert main([command, str(source)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ropekit {command}: error: SOURCE '{bad}' is not a UTF-8 text file, so not a config.json")
    assert "(invalid start byte at byte 0)" in err and "a config.json or a model folder holding one" in err
