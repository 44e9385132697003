"""Every CLI command that writes (`--out`) refuses an unusable path before it starts working: exit status 2, a
message naming the flag and the path, and the work (timing, training, building figures) never started. The
commands are enumerated from the parser, so a new command with `--out` must be added to OUT_KINDS."""

from __future__ import annotations

import argparse
import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

import ropekit.bench
import ropekit.report.build
from ropekit.cli.main import build_parser, main
from ropekit.lab.experiments import EXPERIMENTS

#: command -> (what its --out names, the argv before --out, the function that does the work)
OUT_KINDS: dict[str, tuple[str, list[str]]] = {
    "bench": ("file", ["bench", "--quick"]),
    "lab": ("folder", ["lab", "extrapolation", "--quick"]),
    "report": ("folder", ["report", "llama-3.1-8b"]),
}


def _commands_with_out() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name for name, p in sub.choices.items() if any("--out" in a.option_strings for a in p._actions)}


def test_every_command_with_out_is_covered() -> None:
    assert _commands_with_out() == set(OUT_KINDS)


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("the command started working before checking --out")

    monkeypatch.setattr(ropekit.bench, "run", refuse)
    monkeypatch.setattr(ropekit.report.build, "build_report", refuse)
    for name in EXPERIMENTS:
        monkeypatch.setitem(EXPERIMENTS, name, refuse)


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        rc = main(argv)
    return rc, err.getvalue()


def _bad_paths(kind: str, tmp: Path) -> list[tuple[str, str]]:
    a_file = tmp / "a_file"
    a_file.write_text("x")
    a_dir = tmp / "a_dir"
    a_dir.mkdir()
    # "" (``--out "$UNSET"``) was read as the current folder: bench wrote nothing, lab and report wrote there
    cases = [
        (str(a_file / "below"), "is not a folder, so the"),
        ("", f"expected a {kind} name, got an empty"),
    ]
    if kind == "folder":
        cases.append((str(a_file), "exists and is not a folder"))
    else:
        cases.append((str(a_dir), "is a folder (expected a file name)"))
    return cases


@pytest.mark.parametrize("command", sorted(OUT_KINDS))
def test_unusable_out_is_refused_before_any_work(command: str, tmp_path: Path, no_work: None) -> None:
    kind, argv = OUT_KINDS[command]
    for path, why in _bad_paths(kind, tmp_path):
        rc, err = _run([*argv, "--out", path])
        assert rc == 2, err
        assert err.startswith(f"ropekit {command}: error: --out {path!r}") and why in err, err
        assert "Traceback" not in err


def test_bench_out_creates_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = {"machine": "test", "cases": []}
    monkeypatch.setattr(ropekit.bench, "run", lambda **_: report)
    monkeypatch.setattr(ropekit.bench, "format_table", lambda r: "table")
    out = tmp_path / "new" / "deeper" / "bench.json"
    rc, err = _run(["bench", "--quick", "--out", str(out)])
    assert rc == 0, err
    assert json.loads(out.read_text()) == report
