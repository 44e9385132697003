"""ropekit bench: the modes run, the JSON has the documented schema, the table names every implementation."""

from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from ropekit import bench
from ropekit.bench.busy import busy_machine
from ropekit.cli.main import main

ROW_KEYS = {"mode", "case", "impl", "median_ms", "q25_ms", "q75_ms", "ratio_to_floor", "is_floor"}


def _check_rows(rows: list[dict[str, object]]) -> None:
    by_case: dict[object, list[dict[str, object]]] = {}
    for r in rows:
        assert ROW_KEYS <= set(r) and float(r["median_ms"]) > 0  # type: ignore[arg-type]
        assert float(r["q25_ms"]) <= float(r["median_ms"]) <= float(r["q75_ms"])  # type: ignore[arg-type]
        by_case.setdefault((r["mode"], r["case"]), []).append(r)
    for rs in by_case.values():  # the fastest floor of every block is the unit of its ratios
        assert min(float(r["ratio_to_floor"]) for r in rs if r["is_floor"]) == 1.0  # type: ignore[arg-type]


def test_quick_matrix_json_schema() -> None:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert main(["bench", "--quick", "--json", "--rounds", "1"]) == 0
    rep = json.loads(out.getvalue())
    assert set(rep) == {"machine", "modes", "rounds", "results"} and rep["modes"] == ["matrix"]
    assert rep["rounds"] == 1
    assert {"torch", "cpu_count", "torch_threads", "cpu_kernel"} <= set(rep["machine"])
    cases = {r["case"] for r in rep["results"]}
    assert cases == {c.name for c in bench.cases(quick=True)}
    _check_rows(rep["results"])
    impls = {r["impl"] for r in rep["results"]}
    assert {"floor: copy_", "floor: mul_(1.0)", "ropekit (tables given)", "transformers eager"} <= impls


def test_cache_write_mode_writes_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ropekit.bench import cache_write

    monkeypatch.setattr(cache_write, "_SMAX", 256)  # small shapes: this checks the mode, not the machine
    monkeypatch.setattr(cache_write, "_QUICK_PREFILL", 64)
    out, err = io.StringIO(), io.StringIO()
    path = tmp_path / "bench.json"
    with redirect_stdout(out), redirect_stderr(err):
        assert main(["bench", "--quick", "--mode", "cache-write", "--rounds", "1", "--out", str(path)]) == 0
    rep = json.loads(path.read_text())
    assert rep["modes"] == ["cache-write"]
    _check_rows(rep["results"])
    cases = {r["case"] for r in rep["results"]}
    assert {
        f"cache write {lay} {kind} fp32" for lay in ("contiguous", "paged") for kind in ("prefill", "decode")
    } == cases
    fused = {r["case"] for r in rep["results"] if r["impl"] == "ropekit fused (tables given)"}
    assert fused == cases
    assert "[cache-write] cache write paged decode fp32" in out.getvalue()


@pytest.mark.parametrize("rounds", ["0", "-1", "x"])
def test_rounds_must_be_positive(rounds: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused while parsing, before any work (-1 failed after the warm-up with "no median for empty data", 0 ran
    the default rounds)."""

    def refuse(**_: object) -> None:
        raise AssertionError("bench ran")

    monkeypatch.setattr(bench, "run", refuse)
    err = io.StringIO()
    with redirect_stderr(err), pytest.raises(SystemExit) as e:
        main(["bench", "--quick", "--rounds", rounds])
    assert e.value.code == 2
    want = repr(rounds) if rounds == "x" else rounds
    assert f"error: argument --rounds: expected a positive int, got {want}" in err.getvalue()


@pytest.mark.parametrize(
    ("rounds", "error"), [(0, ValueError), (-2, ValueError), (1.5, TypeError), (True, TypeError)]
)
def test_run_refuses_bad_rounds(rounds: object, error: type, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("bench timed something")

    monkeypatch.setattr(bench, "run_cases", refuse)
    with pytest.raises(error, match=f"rounds must be a positive int or None, got .*{rounds!r}"):
        bench.run(quick=True, rounds=rounds, modes=["decode"])  # type: ignore[arg-type]


@pytest.mark.parametrize(("argv", "used"), [([], 5), (["--rounds", "3"], 3)])
def test_json_records_the_rounds_used(argv: list[str], used: int, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []

    def fake_cases(cases: object, *, rounds: int, **_: object) -> list[dict[str, object]]:
        seen.append(rounds)
        return []

    monkeypatch.setattr(bench, "run_cases", fake_cases)
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        assert main(["bench", "--quick", "--mode", "decode", "--json", *argv]) == 0
    assert seen == [used] and json.loads(out.getvalue())["rounds"] == used


def test_unknown_mode_refused() -> None:
    with pytest.raises(ValueError, match="bench mode must be one of"):
        bench.run(modes=["nope"])


@pytest.mark.skipif(not Path("/proc").exists(), reason="needs /proc to see the processes")
def _children() -> set[str]:
    return {p.name for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) == os.getpid()}


def test_busy_machine_starts_and_ends_its_processes() -> None:
    before = _children()  # other children (e.g. torch.compile's worker pool from earlier tests) are not ours
    with busy_machine(2) as n:
        assert n == 2
        spinners = _children() - before
        assert len(spinners) >= 2
    assert not (spinners & _children())  # every spinner it started is gone


def _parent(p: Path) -> int:
    try:
        stat = (p / "stat").read_text()
    except OSError:
        return -1
    return int(stat.rsplit(")", 1)[1].split()[1])


def test_table_format() -> None:
    rep = {
        "machine": {"cpu": "X", "cpu_count": 2, "torch_threads": 2, "torch": "2.13"},
        "results": [
            {"case": "prefill fp32 half", "impl": "floor: copy_", "median_ms": 2.0, "ratio_to_floor": 1.0},
            {
                "case": "prefill fp32 half",
                "impl": "transformers eager",
                "median_ms": 100.0,
                "ratio_to_floor": 50.0,
            },
            {
                "case": "prefill fp32 half",
                "impl": "ropekit (tables given)",
                "median_ms": 2.5,
                "q25_ms": 2.2,
                "q75_ms": 3.0,
                "ratio_to_floor": 1.25,
            },
        ],
    }
    text = bench.format_table(rep)
    assert "prefill fp32 half" in text and "40.0x" in text and "1.25" in text and "1.10-1.50" in text


def test_full_matrix_covers_layouts_dtypes_partial_and_decode() -> None:
    names = {c.name for c in bench.cases(quick=False)}
    assert {
        "prefill fp32 half",
        "prefill bf16 interleaved",
        "prefill fp32 half rot64",
        "decode bf16 half",
    } <= names
