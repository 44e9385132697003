"""The multi-axis benchmark runs and reports a ratio per pair (timings themselves are not asserted)."""

from __future__ import annotations

from ropekit import axis_bench


def test_quick_run_reports_ratios() -> None:
    r = axis_bench.run(quick=True, seq=64, q_heads=2, kv_heads=1)
    assert set(r["ratio_multi_over_1d_median"]) == {"apply", "rotary", "tables"}
    assert all(v > 0 for v in r["min_seconds"].values())
