"""The report's phase-precision curve is measured on the configuration's own (scaled) frequencies for every
scheme: the float64 oracle takes a scheme without an independent formula at its float64 frequencies."""

from __future__ import annotations

import cmath
import dataclasses
import json
import re
from pathlib import Path

import pytest

from ropekit.analysis.precision_curve import precision_curve
from ropekit.presets import PRESETS
from ropekit.report.build import build_report
from ropekit.report.sources import resolve

_SCALED = sorted(
    {
        type(s.scaling).__name__: n
        for n in PRESETS
        for s in resolve(n).specs.values()
        if s.scaling is not None
    }.items()
)


def test_the_registry_covers_the_schemes_without_an_independent_oracle() -> None:
    assert {"Llama3", "Yarn", "LongRope"} <= {scheme for scheme, _ in _SCALED}


@pytest.mark.parametrize(("scheme", "name"), _SCALED)
def test_every_scaled_preset_is_measured_as_configured(scheme: str, name: str) -> None:
    src = resolve(name)
    spec = next(s for s in src.specs.values() if s.scaling is not None)
    curve = precision_curve(spec, (1_000, 10_000_000), window=4)
    unscaled = precision_curve(dataclasses.replace(spec, scaling=None), (1_000, 10_000_000), window=4)
    assert curve.ropekit.max() < 2.0**-23 < curve.common_fp32[-1]  # ropekit exact, the fp32 recipe not
    assert curve.ropekit.tolist() != unscaled.ropekit.tolist()  # the scaled phases, not the plain ones


def test_the_report_data_is_the_configured_curve() -> None:
    src = resolve("phi-3-mini-128k")  # LongRoPE: no independent formula, float64 frequencies in the oracle
    rep = build_report(src)
    data = rep.data["specs"]["default"]["precision"]
    curve = precision_curve(src.specs[""])
    assert data["measured_on"] == "the configuration's frequencies"
    assert data["ropekit"] == curve.ropekit.tolist() and data["common_fp32"] == curve.common_fp32.tolist()
    # the same page's decay section (trial finding 4): Su's bound at the context with the long factors HF uses
    # beyond 4,096 (Python-float sum from the published factors), as the spectrum's "scaled at 131,072"
    decay = rep.data["specs"]["default"]["decay"]
    rp = src.specs[""].scaling
    theta = [1e4 ** (-2 * i / 96) / f for i, f in enumerate(rp.long_factor)]  # type: ignore[union-attr]
    m = decay["distance"][-1]
    want = sum(abs(sum(cmath.exp(1j * m * theta[k]) for k in range(j))) for j in range(1, 49)) / 48
    assert (m, decay["seq_len"]) == (131072, 131072)
    assert decay["su_bound"][-1] == pytest.approx(want, rel=1e-9)
    (fig,) = next(s for s in rep.sections if s.key == "decay").figures
    assert "LongRoPE's long factors" in fig.caption and "131,072 tokens" in fig.caption


def test_unresolved_points_are_bounds_not_the_quoted_maximum(preset_report: Path) -> None:
    """Trial finding 5: near 10^8 the float64 reference's own error (|p theta| 2^-53) exceeds RESOLVED; those points
    are kept with their bound, and the caption quotes the largest *resolved* error. gemma-3-4b's sliding layers
    (theta_0 = 1) are unresolved at 10^8, its full layers (theta_0 = 1/8) are not."""
    data = json.loads((preset_report / "report.json").read_text())["specs"]
    captions = re.findall(
        r"<figcaption>(The float32 recipe.*?)</figcaption>", (preset_report / "index.html").read_text()
    )
    for (label, d), caption in zip(data.items(), captions):
        pr = d["precision"]
        theta0 = 1.0 if label == "sliding_attention" else 1 / 8
        bound = [p * theta0 * 2.0**-53 for p in pr["position"]]  # Python floats: the oracle's own error bound
        assert pr["oracle_bound"] == pytest.approx(bound, rel=1e-12)
        assert pr["resolved"] == [b <= 1e-8 for b in bound]
        quoted = max(e for e, ok in zip(pr["ropekit"], pr["resolved"]) if ok)
        assert f"ropekit stays at float32 rounding ({quoted:.1e}," in caption
        assert ("upper bounds" in caption) == (not all(pr["resolved"]))
    assert data["sliding_attention"]["precision"]["resolved"][-1] is False
    assert all(data["full_attention"]["precision"]["resolved"])
