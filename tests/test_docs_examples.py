"""Every example the docs show runs as written, found by enumeration (a new page, block or docstring example is
covered without editing this file):

- each ```python block of docs/*.md, a page's blocks in order in one namespace (a page reads top to bottom);
- each ```python torchrun block as a script under ``torchrun --standalone --nproc-per-node 2`` (gloo on the CPU, a free port);
- every docstring example (``>>>``) of every ropekit module, checked by doctest against the output it shows
  (docs/api.md prints those docstrings).

Elsewhere: README.md's blocks (tests/test_readme.py), ```python timm blocks (tests/ropekit/timm/test_docs.py).
docs/api.md's ```python blocks are generated signatures, kept in step by tests/ropekit/cli/test_apidoc.py.
"""

from __future__ import annotations

import doctest
import importlib
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ropekit

DOCS = Path(__file__).resolve().parents[1] / "docs"
_BLOCK = re.compile(r"```(python|python torchrun)\n(.*?)```", flags=re.DOTALL)
_GENERATED = {"api.md"}


def _pages() -> dict[str, list[tuple[str, str]]]:
    pages = {}
    for path in sorted(DOCS.glob("*.md")):
        if path.name not in _GENERATED:
            blocks = _BLOCK.findall(path.read_text())
            if blocks:
                pages[path.name] = blocks
    return pages


def _doctests() -> dict[str, doctest.DocTest]:
    found = {}
    for info in pkgutil.walk_packages(ropekit.__path__, "ropekit."):
        if info.name.endswith("__main__"):  # importing it runs the CLI
            continue
        module = importlib.import_module(info.name)
        for test in doctest.DocTestFinder().find(module):
            if test.examples:
                found[test.name] = test
    return found


PAGES = _pages()
DOCTESTS = _doctests()


def test_the_enumerations_find_the_examples() -> None:
    """Guards the two enumerations themselves (a broken regex or walk would make every case below vanish)."""
    assert {"hf.md", "distributed.md", "multimodal.md", "vision.md"} <= set(PAGES)
    assert any(kind == "python torchrun" for blocks in PAGES.values() for kind, _ in blocks)
    assert {
        "ropekit.spec.RopeSpec",
        "ropekit.module.Rotary",
        "ropekit.positions.multimodal.mrope_positions",
    } <= set(DOCTESTS)


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_examples_run(page: str, tmp_path: Path) -> None:
    namespace: dict[str, object] = {"__name__": f"docs_{page}"}
    for i, (kind, code) in enumerate(PAGES[page]):
        if kind == "python":
            exec(compile(code, f"docs/{page} python block {i}", "exec"), namespace)  # noqa: S102
            continue
        script = tmp_path / f"block_{i}.py"
        script.write_text(code)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node",
                "2",
                str(script),
            ],
            check=False,
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, f"docs/{page} torchrun block {i} failed:\n{run.stdout}\n{run.stderr}"


@pytest.mark.parametrize("name", sorted(DOCTESTS))
def test_docstring_example(name: str) -> None:
    test = DOCTESTS[name]
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append, clear_globs=True)
    assert runner.failures == 0, "".join(report)
