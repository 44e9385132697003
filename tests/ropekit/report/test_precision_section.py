"""The report's phase-precision curve is measured on the configuration's own (scaled) frequencies for every
scheme: the float64 oracle takes a scheme without an independent formula at its float64 frequencies."""

from __future__ import annotations

import dataclasses

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
    data = build_report(src).data["specs"]["default"]["precision"]
    curve = precision_curve(src.specs[""])
    assert data["measured_on"] == "the configuration's frequencies"
    assert data["ropekit"] == curve.ropekit.tolist() and data["common_fp32"] == curve.common_fp32.tolist()
