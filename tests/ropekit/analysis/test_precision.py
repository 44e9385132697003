"""The measured error table: ropekit stays at float32 rounding, the common recipe grows with position."""

from __future__ import annotations

from ropekit import RopeSpec
from ropekit.analysis import phase_error_table


def test_error_table_shape_and_levels() -> None:
    rows = phase_error_table(RopeSpec(128, base=10_000.0), (1_000, 100_000, 10_000_000))
    assert [r.window for r in rows] == [1_001, 2048, 2048]  # positions 0..1000 inclusive
    assert all(r.ropekit < 6e-8 for r in rows)
    # papers' table (precision-and-distributed.md 1.2): ~1e-4 at 1e3, 6.8e-3 at 1e5, 0.76 at 1e7
    assert 1e-5 < rows[0].common_fp32 < 1e-3
    assert 1e-3 < rows[1].common_fp32 < 3e-2
    assert rows[2].common_fp32 > 0.3
