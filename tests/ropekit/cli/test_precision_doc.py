"""docs/precision.md's cos/sin tables are what the command it names prints (`ropekit precision --markdown --base B`
at the table's positions): every cell, as printed. The figures themselves are checked against float64 and 50-digit
mpmath references in tests/ropekit/rotation/test_precision.py and tests/ropekit/cli/test_every_command.py."""

from __future__ import annotations

import io
import re
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from ropekit.cli.main import main

DOC = Path(__file__).resolve().parents[3] / "docs" / "precision.md"
_SECTION = DOC.read_text().split("## cos/sin tables")[1].split("\n## ")[0]
#: "base 10 000:" / "base 500 000 (Llama 3):" -> the table below it
TABLES = {
    int(m.group(1).replace(" ", "")): m.group(2)
    for m in re.finditer(r"^base ([\d ]+)[^\n]*:\n\n((?:\|[^\n]*\n)+)", _SECTION, flags=re.MULTILINE)
}


def _rows(table: str) -> list[list[str]]:
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.strip().splitlines()[2:]]
    return [[re.sub(r"\s*\(.*\)$", "", r[0]), *r[1:]] for r in rows]  # "16,777,216 (2^24)" -> "16,777,216"


def test_both_tables_found() -> None:
    assert sorted(TABLES) == [10_000, 500_000]


@pytest.mark.parametrize("base", sorted(TABLES))
def test_doc_table_is_the_command_output(base: int) -> None:
    doc = _rows(TABLES[base])
    positions = ",".join(r[0].replace(",", "") for r in doc)
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["precision", "--markdown", "--base", str(base), "--positions", positions]) == 0
    assert doc == _rows(out.getvalue())
