"""The README a newcomer reads: its examples run as written, its shown output is real, its links resolve,
and `make demo` runs without a warning."""

from __future__ import annotations

import io
import os
import re
import shlex
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from ropekit.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.DOTALL)


@pytest.mark.parametrize("i", range(len(_blocks("python"))))
def test_python_block_runs_standalone(i: int) -> None:
    """Each block in a fresh namespace: a reader can copy any one of them alone."""
    code = _blocks("python")[i]
    namespace: dict[str, object] = {"__name__": f"readme_block_{i}"}
    try:
        exec(compile(code, f"README.md python block {i}", "exec"), namespace)  # noqa: S102
    except Exception as e:  # pragma: no cover - the message names the block
        raise AssertionError(f"README python block {i} failed: {e!r}\n{code}") from e


def test_enough_examples() -> None:
    assert len(_blocks("python")) >= 6


def test_shown_cli_output_is_real() -> None:
    shown = [b for b in _blocks("text") if b.startswith("$ ropekit ")]
    assert len(shown) >= 3
    for block in shown:
        first, _, expected = block.partition("\n")
        argv = shlex.split(first[2:])[1:]
        buf = io.StringIO()
        with redirect_stdout(buf):
            assert main(argv) == 0
        assert buf.getvalue() == expected, f"README output of `{first}` is stale"


def test_two_command_setup_is_documented() -> None:
    bash = "\n".join(_blocks("bash"))
    assert "make demo" in bash and "make test" in bash
    assert 'pip install -e ".[hf]"' in README.read_text()  # the HF example needs the extra


def _links(md: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", md.read_text(), flags=re.DOTALL)  # links, not code
    return re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r"<img [^>]*src=\"([^\"]+)\"", text)


DOCS = [README, *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("md", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_relative_links_resolve_inside_the_repository(md: Path) -> None:
    for link in _links(md):
        if re.match(r"[a-z]+://|mailto:", link):
            continue
        target = link.split("#")[0]
        if not target:  # an anchor in the same file
            continue
        path = (md.parent / target).resolve()
        assert path.is_relative_to(ROOT), f"{md.name}: {link} points outside the repository"
        assert path.exists(), f"{md.name}: {link} does not exist"
    assert "../shared" not in md.read_text(), f"{md.name} refers to files outside the repository"


def test_make_demo_prints_no_warning() -> None:
    """Run the demo recipe's commands with this environment's console scripts, warnings as errors."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^demo:.*\n((?:\t.*\n)+)", makefile, flags=re.MULTILINE)
    assert recipe, "Makefile has no demo recipe"
    bindir = Path(sys.executable).parent
    ran = 0
    for line in recipe.group(1).splitlines():
        cmd = line.strip().lstrip("@")
        if cmd.startswith("echo"):
            continue
        assert cmd.startswith("$(BIN)/"), f"update this test for the demo line {line!r}"
        argv = shlex.split(cmd.replace("$(BIN)/", f"{bindir}/"))
        if not Path(argv[0]).exists():
            pytest.skip(f"{argv[0]} is not installed in this environment")
        env = {**os.environ, "PYTHONWARNINGS": "error"}
        r = subprocess.run(argv, check=False, capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stderr == "", f"`make demo` wrote to stderr: {r.stderr}"
        ran += 1
    assert ran


def test_numpy_is_a_core_dependency() -> None:
    """torch warns "Failed to initialize NumPy" on import without numpy: the core install must bring it."""
    text = (ROOT / "pyproject.toml").read_text()
    deps = re.search(r"^dependencies = \[(.*?)\]", text, flags=re.MULTILINE | re.DOTALL)
    assert deps and '"numpy' in deps.group(1)
    assert "Failed to initialize NumPy" not in text  # no filter hiding the warning in the tests
