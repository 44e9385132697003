"""The python examples of docs/multimodal.md and docs/vision.md run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize("name", ["multimodal.md", "vision.md"])
def test_doc_examples_run(name: str) -> None:
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / name).read_text(), flags=re.DOTALL)
    assert blocks
    ns: dict[str, object] = {}
    for code in blocks:
        exec(compile(code, name, "exec"), ns)  # noqa: S102
