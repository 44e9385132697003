"""``ropekit bench --mode axes`` runs at tiny sizes and emits its JSON keys (timings themselves are not asserted:
speed is shown by the benchmark, not by unit tests)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import torch

from ropekit.bench import axes
from ropekit.cli.main import main

TINY = {"prefill": 32, "decode_batch": 2, "grid": 4, "heads": 2}


def test_cli_axes_mode_prints_ratios_and_writes_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(axes, "QUICK_SIZES", TINY)
    out_file = tmp_path / "axes.json"
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert main(["bench", "--mode", "axes", "--quick", "--rounds", "1", "--out", str(out_file)]) == 0
    rep = json.loads(out_file.read_text())
    assert rep["modes"] == ["axes"]
    rows = rep["results"]
    cases = {r["case"] for r in rows}
    assert cases == {f"text {k} {d} b{b} s{s}" for k, b, s in (("prefill", 1, 32), ("decode", 2, 1))
                     for d in ("fp32", "bf16")} | {f"vision prefill {d} 4x4 patches" for d in ("fp32", "bf16")}  # fmt: skip
    for case in cases:
        impls = {r["impl"] for r in rows if r["case"] == case}
        kinds = ("2-d vision",) if case.startswith("vision") else ("qwen2-vl", "qwen3-vl")
        want = set(axes.FLOORS) | {f"{k} {e}" for k in ("1-d", *kinds) for e in axes.ENTRY_POINTS}
        assert impls == want
    for r in rows:
        assert {"mode", "case", "impl", "median_ms", "ratio_to_floor", "is_floor"} <= set(r)
        assert r["mode"] == "axes" and r["median_ms"] > 0
        multi = not (r["impl"].startswith("1-d") or r["is_floor"])
        assert ("ratio_to_1d" in r) == multi  # every multi-axis row is compared with its 1-D entry point
        if multi:
            one_d = next(
                x for x in rows if x["case"] == r["case"] and x["impl"] == "1-d " + r["impl"].split()[-1]
            )
            assert r["ratio_to_1d"] == pytest.approx(r["median_ms"] / one_d["median_ms"])
    worst = rep["axes_worst_ratio_to_1d"]
    assert set(worst) == {
        f"{k} {e}" for k in ("qwen2-vl", "qwen3-vl", "2-d vision") for e in axes.ENTRY_POINTS
    }
    text = out.getvalue()
    assert "[axes] text prefill fp32 b1 s32" in text and "x 1-D" in text and "target <= 1.3" in text
    assert "axes: text decode bf16 b2 s1" in err.getvalue()  # progress


def test_axes_mode_refuses_cuda_device() -> None:
    from ropekit import bench

    with pytest.raises(ValueError, match="axes run on the CPU only"):
        bench.run(modes=["axes"], device="cuda")


def test_cpu_time_variant_reports_every_multi_axis_entry_point() -> None:
    """``python -m ropekit.bench.axes_cpu`` at tiny sizes: one row per multi-axis entry point and case, each with
    its ratio to the 1-D row of the same rounds; torch's thread setting is restored."""
    from ropekit.bench.axes_cpu import run_cpu_time

    threads = torch.get_num_threads()
    rows = run_cpu_time(rounds=1, sizes=TINY)
    assert torch.get_num_threads() == threads
    impls = {(r["case"], r["impl"]) for r in rows}
    # dtypes x (text: 2 kinds x 2 specs x 2 entry points + vision: 1 spec x 2 entry points)
    assert len(impls) == len(rows) == 2 * (2 * 2 * 2 + 2)
    assert all(float(r["ratio_to_1d"]) > 0 and not str(r["impl"]).startswith("1-d") for r in rows)  # type: ignore[arg-type]
