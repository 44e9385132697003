"""Every preset (and layer type) goes through every analysis of the report; the decay distances grid."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ropekit.analysis import precision_curve, rotations, scheme_table, spectrum, su_bound
from ropekit.analysis.compare import default_target
from ropekit.presets import PRESETS
from ropekit.report.build import decay_distances
from ropekit.report.sources import resolve


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_goes_through_every_analysis(name: str) -> None:
    src = resolve(name)
    for label, spec in src.specs.items():
        span = src.span(label)
        sp = spectrum(spec, span)
        if spec.freqs is None:
            assert sp.critical_dim is not None and 0 <= sp.critical_dim <= int(spec.rotary_dim)  # type: ignore[arg-type]
        else:  # an explicit table has no critical dimension (inspect: critical_dim null)
            assert sp.critical_dim is None
        assert rotations(spec, span).after.shape == (spec.n_bands,)
        table = scheme_table(spec, context=src.context, target=default_target(spec, src.context))
        assert table.target >= table.original_length
        if spec.scaling is not None:
            assert any(k.startswith("model:") for k in table.ratio)
        assert torch.isfinite(su_bound(spec, decay_distances(src.context))).all()
        plain = dataclasses.replace(spec, scaling=None)
        assert precision_curve(plain, (10_000_000,), window=4).ropekit[0] < 2.0**-23


def test_decay_distances_are_sorted_unique_integers_up_to_the_context() -> None:
    m = decay_distances(4096)
    assert m[0] == 0 and m[-1] == 4096 and (m[1:] > m[:-1]).all()
    assert torch.equal(m, m.round()) and m[:64].tolist() == list(range(64))


_MULTI_AXIS = [n for n in sorted(PRESETS) if any(s.axes is not None for s in resolve(n).specs.values())]


@pytest.mark.parametrize("name", _MULTI_AXIS)
def test_multi_axis_presets_report_their_bands_per_axis(name: str) -> None:
    from ropekit.analysis.axes import axis_report, default_extents

    src = resolve(name)
    (spec,) = [s for s in src.specs.values() if s.axes is not None]
    data = axis_report(spec, default_extents(spec, src.context))
    # independent count: band j belongs to the axis named by the slot map, and the per-axis counts add up
    counts = {n: list(spec.axes.slots).count(i) for i, n in enumerate(spec.axes.names)}
    assert {a["axis"]: a["n_bands"] for a in data["axes"]} == counts
    for b in data["bands"]:
        assert b["axis"] == spec.axes.names[spec.axes.slots[b["index"]]]


def test_multi_axis_report_has_a_bands_per_axis_figure() -> None:
    from ropekit.report.build import build_report

    assert _MULTI_AXIS, "the VL presets should be registered"
    rep = build_report(resolve(_MULTI_AXIS[0]))
    (section,) = [s for s in rep.sections if s.key == "axes"]
    assert section.figures and all(f.png.startswith(b"\x89PNG") for f in section.figures)
    assert "axes" in next(iter(rep.data["specs"].values()))


def test_one_d_presets_have_no_axes_section() -> None:
    from ropekit.report.build import build_report

    rep = build_report(resolve("llama-2-7b"))
    assert all(s.key != "axes" for s in rep.sections)
