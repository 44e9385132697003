"""``ropekit lab vision``: a tiny smoke run (outputs, resume from parts) and the verdicts on hand-made numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ropekit.cli.main import main
from ropekit.lab.experiments import EXPERIMENTS, vision
from ropekit.lab.vit import ENCODINGS


def test_tiny_run_writes_outputs_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = vision.run(tmp_path, tiny=True, seeds=1)
    printed = capsys.readouterr()
    assert (
        printed.out == "" and "[vision none seed 0]" in printed.err
    )  # progress on stderr: --json's stdout parses
    assert EXPERIMENTS["vision"] is vision.run
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"vision.{ext}").stat().st_size > 0
    rows = res["results"]
    assert {(r["encoding"], r["seed"], r["grid"]) for r in rows} == {
        (e, 0, g) for e in ENCODINGS for g in vision.GRIDS
    }
    for r in rows:  # accuracy of the 4 classes is at most each bit's accuracy, and >= their sum - 1
        assert r["absolute_bit"] + r["relative_bit"] - 1 <= r["accuracy"] + 1e-12
        assert r["accuracy"] <= min(r["absolute_bit"], r["relative_bit"]) + 1e-12
    saved = json.loads((tmp_path / "vision.json").read_text())
    assert saved["results"] == rows and len(saved["claims"]) == len(res["claims"]) > 0
    assert "only 1 seed(s)" in "".join(res["claims"])  # 1 seed: inconclusive, and it says why
    again = vision.run(tmp_path, tiny=True, seeds=1)  # every part is on disk: nothing is retrained
    assert again["results"] == rows and again["training_cpu_seconds"] == res["training_cpu_seconds"]


def _rows(acc: dict[str, list[float]], grid: int) -> list[dict[str, object]]:
    return [
        {"encoding": e, "seed": s, "grid": grid, "accuracy": v, "absolute_bit": 0.5, "relative_bit": 1.0}
        for e, vs in acc.items()
        for s, v in enumerate(vs)
    ]


def test_claims_judge_accuracy_at_the_larger_grid() -> None:
    acc = {
        "learned": [0.60, 0.62, 0.61],
        "rope-axial": [0.70, 0.72, 0.71],  # apart above learned: reproduced
        "rope-mixed": [0.55, 0.65, 0.71],  # overlaps learned: inconclusive
    }
    lines = [v.line() for v in vision.claims(_rows(acc, 16), tuple(acc), (16,))]
    assert any(ln.startswith("2-D axial RoPE beats learned") and "**reproduced**" in ln for ln in lines)
    assert any(ln.startswith("RoPE-Mixed beats learned") and "**inconclusive**" in ln for ln in lines)
    mixed_vs_axial = next(ln for ln in lines if ln.startswith("RoPE-Mixed beats 2-D axial"))
    assert "**inconclusive**" in mixed_vs_axial and "rope-mixed 0.637 [0.55..0.71]" in mixed_vs_axial


def test_retention_separates_the_resolution_effect_from_training() -> None:
    rows = _rows({"learned": [0.99, 0.98, 0.97], "rope-axial": [0.60, 0.62, 0.61]}, 8)
    rows += _rows({"learned": [0.80, 0.78, 0.79], "rope-axial": [0.57, 0.60, 0.58]}, 16)
    assert vision.retention(rows, "rope-axial", 16) == pytest.approx([0.57 / 0.60, 0.60 / 0.62, 0.58 / 0.61])
    lines = [v.line() for v in vision.claims(rows, ("learned", "rope-axial"), (8, 16))]
    at16 = next(
        ln for ln in lines if ln.startswith("2-D axial RoPE beats learned absolute (interpolated) at 16")
    )
    kept = next(ln for ln in lines if ln.startswith("2-D axial RoPE keeps more"))
    assert "**not reproduced**" in at16 and "**reproduced**" in kept


def test_cli_refuses_text_lab_options(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="corpus"):
        vision.run(tmp_path, tiny=True, corpus="x.txt")
    rc = main(["lab", "vision", "--out", str(tmp_path), "--train-len", "64"])
    assert rc != 0
    with pytest.raises(ValueError, match="encodings must be a non-empty subset"):
        vision.run(tmp_path, tiny=True, encodings=("rope",))
