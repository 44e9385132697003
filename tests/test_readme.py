"""The README's examples run, and the CLI output it shows is what the CLI prints."""

from __future__ import annotations

import io
import re
import shlex
from contextlib import redirect_stdout
from pathlib import Path

from ropekit.cli.main import main

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_python_examples_run_in_order() -> None:
    blocks = _blocks("python")
    assert len(blocks) >= 4
    namespace: dict[str, object] = {"__name__": "readme"}
    for i, code in enumerate(blocks):
        try:
            exec(compile(code, f"README.md python block {i}", "exec"), namespace)  # noqa: S102
        except Exception as e:  # pragma: no cover - the message names the block
            raise AssertionError(f"README python block {i} failed: {e!r}\n{code}") from e


def test_shown_cli_output_is_real() -> None:
    shown = [b for b in _blocks("text") if b.startswith("$ ropekit ")]
    assert shown
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
