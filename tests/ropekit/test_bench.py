"""ropekit bench: the matrix runs, the JSON has the documented schema, the table names every implementation."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout

from ropekit import bench
from ropekit.cli.main import main


def test_quick_matrix_json_schema() -> None:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert main(["bench", "--quick", "--json", "--rounds", "1"]) == 0
    rep = json.loads(out.getvalue())
    assert set(rep) == {"machine", "results"}
    assert {"torch", "cpu_count", "torch_threads", "cpu_kernel"} <= set(rep["machine"])
    cases = {r["case"] for r in rep["results"]}
    assert cases == {c.name for c in bench.cases(quick=True)}
    for r in rep["results"]:
        assert {"case", "impl", "median_ms", "ratio_to_floor"} <= set(r) and r["median_ms"] > 0
    impls = {r["impl"] for r in rep["results"]}
    assert {"floor: copy_", "floor: mul_(1.0)", "ropekit (tables given)", "transformers eager"} <= impls
    floors = [r for r in rep["results"] if r["impl"].startswith("floor")]
    assert min(r["ratio_to_floor"] for r in floors) == 1.0


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
                "ratio_to_floor": 1.25,
            },
        ],
    }
    text = bench.format_table(rep)
    assert "prefill fp32 half" in text and "40.0x" in text and "1.25" in text


def test_full_matrix_covers_layouts_dtypes_partial_and_decode() -> None:
    names = {c.name for c in bench.cases(quick=False)}
    assert {
        "prefill fp32 half",
        "prefill bf16 interleaved",
        "prefill fp32 half rot64",
        "decode bf16 half",
    } <= names
