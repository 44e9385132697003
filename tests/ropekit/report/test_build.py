"""Every preset (and layer type) goes through every analysis of the report; the decay distances grid."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ropekit.analysis import precision_curve, rotations, scheme_table, spectrum, su_bound
from ropekit.presets import PRESETS
from ropekit.report.build import _scheme_target, decay_distances
from ropekit.report.sources import resolve


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_goes_through_every_analysis(name: str) -> None:
    src = resolve(name)
    for spec in src.specs.values():
        sp = spectrum(spec, src.context)
        assert 0 <= sp.critical_dim <= int(spec.rotary_dim)  # type: ignore[arg-type]
        assert rotations(spec, src.context).after.shape == (spec.n_bands,)
        table = scheme_table(spec, context=src.context, target=_scheme_target(spec, src.context))
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
