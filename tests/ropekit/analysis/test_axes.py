"""Per-axis band table: bands, wavelengths 2*pi/theta against each axis's extent (values from the formula)."""

from __future__ import annotations

import io
import json
import math

import pytest

from ropekit import RopeSpec
from ropekit.analysis.axes import axis_band_table, axis_report, default_extents, format_axis_report
from ropekit.cli import inspect_cmd
from ropekit.presets import preset_spec
from ropekit.presets_vl import dinov3_spec, qwen2_vl_spec


def test_qwen2_vl_bands_per_axis() -> None:
    spec = qwen2_vl_spec()
    rows = axis_band_table(spec, {"t": 1000.0, "h": 64.0, "w": 64.0})
    assert [r.axis for r in rows] == ["t"] * 16 + ["h"] * 24 + ["w"] * 24
    for r in rows:
        theta = 1e6 ** (-2 * r.index / 128)
        assert math.isclose(r.wavelength, 2 * math.pi / theta, rel_tol=1e-12)
        assert r.wraps == (r.extent * theta / (2 * math.pi) >= 1)
    rep = axis_report(spec, {"t": 1000.0, "h": 64.0, "w": 64.0})
    h = next(a for a in rep["axes"] if a["axis"] == "h")
    # the h block starts at band 16: wavelength 2*pi * 1e6^(32/128) ~ 198.7 > 64: no h band wraps on a 64 grid
    assert h["n_bands"] == 24 and h["wrapping_bands"] == 0
    assert math.isclose(h["shortest_wavelength"], 2 * math.pi * 1e6 ** (32 / 128), rel_tol=1e-12)
    assert "TTTT" in format_axis_report(rep)


def test_dinov3_normalised_box_extent() -> None:
    spec = dinov3_spec(64)
    rep = axis_report(spec, {"row": 2.0, "col": 2.0})
    # period base^(4k/D) in [-1, 1] coordinates: k = 0 has period 1 -> 2 turns over the box
    assert rep["axes"][0]["shortest_wavelength"] == pytest.approx(1.0)
    assert rep["axes"][0]["wrapping_bands"] == sum(100 ** (4 * k / 64) <= 2.0 for k in range(16))


def test_errors_and_defaults() -> None:
    spec = qwen2_vl_spec()
    with pytest.raises(ValueError, match="missing \\['w'\\]"):
        axis_band_table(spec, {"t": 1.0, "h": 1.0})
    with pytest.raises(ValueError, match="multi-axis"):
        axis_band_table(RopeSpec(8), {"p": 1.0})
    assert default_extents(spec, 4096) == {"t": 4096.0, "h": 64.0, "w": 64.0}


def test_inspect_shows_axes_for_vl_preset() -> None:
    spec = preset_spec("qwen3-vl-8b")
    out = io.StringIO()
    inspect_cmd.run(spec, 2048, as_json=False, out=out)
    assert "Bands per axis (interleaved [24, 20, 20])" in out.getvalue()
    assert "THWTHW" in out.getvalue()
    js = io.StringIO()
    inspect_cmd.run(spec, 2048, as_json=True, out=js)
    (view,) = json.loads(js.getvalue())["views"]
    assert view["axes"]["map"].endswith("TTTT")
    plain = io.StringIO()
    inspect_cmd.run(RopeSpec(64), 4096, as_json=True, out=plain)
    assert all("axes" not in v for v in json.loads(plain.getvalue())["views"])  # 1-D output unchanged
