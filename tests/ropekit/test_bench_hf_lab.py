"""``ropekit bench --mode hf`` and ``--mode lab`` run from the CLI, write the documented JSON, and are in ``all``
(small shapes here: this checks the modes, not the machine; no speed is asserted)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from ropekit import bench
from ropekit.cli.main import main
from tests.ropekit.test_bench import _check_rows


def _run(args: list[str], path: Path) -> dict[str, object]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert main([*args, "--out", str(path)]) == 0
    rep: dict[str, object] = json.loads(path.read_text())
    return rep


def test_modes_are_in_all() -> None:
    assert {"hf", "lab"} <= set(bench.ALL) and {"hf", "lab"} <= set(bench.MODES)
    with pytest.raises(ValueError, match="CPU only"):
        bench.run(modes=["lab"], device="cuda")


def test_lab_mode_writes_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ropekit.bench import lab

    monkeypatch.setattr(lab, "_QUICK_BATCH", 2)
    monkeypatch.setattr(lab, "_QUICK_LEN", 8)
    rep = _run(["bench", "--quick", "--mode", "lab", "--rounds", "1"], tmp_path / "lab.json")
    rows = rep["results"]
    assert isinstance(rows, list) and rep["modes"] == ["lab"]
    _check_rows(rows)
    assert {r["impl"] for r in rows} == {lab.BASELINE, "bf16 autocast"}
    assert all(r["tokens_per_s"] > 0 and r["warmup_s"] > 0 for r in rows)


def test_hf_mode_writes_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers")
    from ropekit.hf import bench as hf_bench

    monkeypatch.setattr(
        hf_bench, "_cases", lambda quick: [("prefill 1x16", 1, 16, 0), ("decode 2x1 after 8", 2, 1, 8)]
    )
    monkeypatch.setattr(hf_bench, "_LAYERS", 2)
    rep = _run(["bench", "--quick", "--mode", "hf", "--rounds", "1"], tmp_path / "hf.json")
    rows = rep["results"]
    assert isinstance(rows, list)
    _check_rows(rows)
    cases = {r["case"] for r in rows}
    assert "hf llama prefill 1x16 fp32: time in RoPE" in cases
    assert "hf qwen2-vl prefill 1x16 (image 2x2) fp32: time in RoPE" in cases
    assert "hf qwen2-vl decode 2x1 after 8 (image 2x2) fp32: forward" in cases
    assert "hf qwen2-vl vision tower 2 blocks, image 16x16 patches fp32: time in RoPE" in cases
    assert "hf llama decode 8x1 after 64, static cache fp32: time in RoPE + cache write" in cases
    impls = {r["impl"] for r in rows}
    assert {"transformers eager", "ropekit patched", "ropekit patched + FusedStaticCache"} <= impls
