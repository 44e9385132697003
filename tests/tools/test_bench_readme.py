"""tools/bench_readme.py: the README's performance table is the render of the committed benchmark JSON.

Oracle for the render: the numbers are read back from the rendered text and compared with the JSON's own fields
(median, ratio to the floor, transformers eager / median), so a formatting slip that changes a value fails.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_readme", ROOT / "tools" / "bench_readme.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_readme_table_is_the_render_of_the_committed_json() -> None:
    tool = _tool()
    report = json.loads((ROOT / "docs" / "bench-cpu.json").read_text())
    readme = (ROOT / "README.md").read_text()
    assert tool.current_block(readme) == tool.render(report), (
        "README's performance table is stale: python tools/bench_readme.py docs/bench-cpu.json --write README.md"
    )


def test_rendered_numbers_are_the_json_numbers() -> None:
    tool = _tool()
    report = json.loads((ROOT / "docs" / "bench-cpu.json").read_text())
    text = tool.render(report)
    blocks = text.split("\n\n")[1:]
    assert [b.splitlines()[0] for b in blocks] == list(tool.CASES)
    for block in blocks:
        case = block.splitlines()[0]
        rows = {r["impl"]: r for r in report["results"] if r.get("mode") == "matrix" and r["case"] == case}
        hf = rows["transformers eager"]["median_ms"]
        for line in block.splitlines()[2:]:
            impl = next(name for name in rows if line.startswith(f"  {name} "))
            value, unit, ratio, speed = line[len(impl) + 2 :].split()
            ms = float(value) / (1e3 if unit == "us" else 1.0)
            assert ms == pytest.approx(rows[impl]["median_ms"], rel=5e-3, abs=1e-4)
            assert float(ratio) == pytest.approx(rows[impl]["ratio_to_floor"], abs=0.006)
            assert float(speed.rstrip("x")) == pytest.approx(hf / rows[impl]["median_ms"], abs=0.06)


def test_write_replaces_only_the_block(tmp_path: Path) -> None:
    tool = _tool()
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n## Performance\n\ntext\n\n```text\nold\n```\n\n## Next\n\n```text\nkeep\n```\n")
    tool.main([str(ROOT / "docs" / "bench-cpu.json"), "--write", str(readme)])
    new = readme.read_text()
    assert "old" not in new and new.count("keep") == 1 and new.startswith("# x\n\n## Performance\n\ntext\n")
    assert tool.current_block(new) == tool.render(json.loads((ROOT / "docs" / "bench-cpu.json").read_text()))
    with pytest.raises(ValueError, match="Performance"):
        tool.replace_block("# nothing here\n", "x\n")
