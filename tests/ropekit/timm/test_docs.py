"""The timm example of docs/vision.md (its ```python timm blocks) runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.timm

DOC = Path(__file__).resolve().parents[3] / "docs" / "vision.md"


def test_vision_md_timm_example_runs() -> None:
    blocks = re.findall(r"```python timm\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert blocks
    ns: dict[str, object] = {}
    for code in blocks:
        exec(compile(code, "vision.md", "exec"), ns)  # noqa: S102
