"""Proposed test for tests/ropekit/cli/ (with the cli/source.py patch): a non-UTF-8 SOURCE to inspect/precision
names the argument, the file and what was expected (trial finding 6: a bare "'utf-8' codec can't decode")."""

from __future__ import annotations

from pathlib import Path

import pytest

from ropekit.cli.main import main


@pytest.mark.parametrize("command", ["inspect", "precision"])
def test_a_binary_source_names_the_argument_the_file_and_what_was_expected(
    capsys: pytest.CaptureFixture[str], command: str, binary_source: tuple[Path, Path]
) -> None:
    source, bad = binary_source
    assert main([command, str(source)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ropekit {command}: error: SOURCE '{bad}' is not a UTF-8 text file, so not a config.json")
    assert "(invalid start byte at byte 0)" in err and "a config.json or a model folder holding one" in err
