"""The throughput harness runs its variants interleaved and refuses unknown ones (no speed is asserted here)."""

from __future__ import annotations

import pytest

from ropekit.lab.throughput import measure


def test_measure_reports_every_variant_and_round() -> None:
    res = measure(("fp32", "bf16"), batch=2, length=8, steps=1, rounds=2)
    assert set(res) == {"fp32", "bf16"}
    assert all(len(r["wall"]) == 2 and min(r["wall"] + r["cpu"]) > 0 for r in res.values())
    with pytest.raises(ValueError, match="variant"):
        measure(("fp16",), batch=2, length=8, steps=1, rounds=1)
