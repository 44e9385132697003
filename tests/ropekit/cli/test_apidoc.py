"""docs/api.md is generated from the docstrings and up to date; it covers every public name."""

from __future__ import annotations

import importlib
import io
from pathlib import Path

from ropekit.cli.apidoc import MODULES, render

API_MD = Path(__file__).resolve().parents[3] / "docs" / "api.md"


def test_committed_reference_is_up_to_date() -> None:
    buf = io.StringIO()
    render(buf)
    assert API_MD.read_text() == buf.getvalue(), (
        "docs/api.md is stale: run `python -m ropekit.cli.apidoc > docs/api.md`"
    )


def test_every_public_name_has_a_section() -> None:
    text = API_MD.read_text()
    for module in MODULES:
        mod = importlib.import_module(module)
        for name in mod.__all__:
            if not name.startswith("__"):
                assert f"### `{module}.{name}`" in text, f"{module}.{name}"


def test_rotary_arguments_and_tables_api_documented() -> None:
    text = API_MD.read_text()
    rotary = text[text.index("### `ropekit.Rotary`") :]
    rotary = rotary[: rotary.index("\n### ")]
    for arg in ("spec", "max_seq_len", "format", "cache_limit", "device"):
        assert f"{arg}:" in rotary, arg
    for name in ("ropekit.rope_tables", "ropekit.apply_rope_tables"):
        section = text[text.index(f"### `{name}`") :]
        assert "```python\ndef " in section[:600], name
