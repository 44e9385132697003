"""The critical dimension is a *leading* count: the line it draws must separate the bands that turn within L0 from
those that do not (trial finding 3). Checked for every preset and layer type against Python-float wavelengths;
explicit (vision) tables, whose bands are not ordered by frequency, have none, as ``ropekit inspect`` reports."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from ropekit import RopeSpec
from ropekit.analysis.spectrum import spectrum
from ropekit.presets import PRESETS
from ropekit.scaling import Linear, Yarn

_VIEWS = [(n, v) for n in sorted(PRESETS) for v in PRESETS[n].views()]


@pytest.mark.parametrize(("name", "view"), _VIEWS, ids=[f"{n}-{v.layer_type}" for n, v in _VIEWS])
def test_the_critical_line_separates_turning_bands_or_is_absent(name: str, view: object) -> None:
    spec = view.spec  # type: ignore[attr-defined]
    sp = spectrum(spec, view.context)  # type: ignore[attr-defined]
    theta = [float(t) for t in dataclasses.replace(spec, scaling=None).frequencies().tolist()]
    turns = [t > 0 and 2 * math.pi / t <= sp.train_len for t in theta]  # band completes a turn within L0
    assert sp.turns_in_train.tolist() == turns
    ordered = all(a >= b for a, b in itertools.pairwise(theta))
    if spec.freqs is not None or not ordered:
        assert sp.critical_dim is None and sp.critical_band is None, name
        assert sp.as_dict()["critical_dim"] is None
    else:
        cb = sp.critical_band
        assert cb is not None and turns == [True] * cb + [False] * (len(theta) - cb), name


def test_vision_tables_are_not_ordered_so_a_count_would_mislead() -> None:
    """pixtral-12b-vision: the trial's line sat before band 9 while bands 16-19 turn and 5-8 do not."""
    spec = PRESETS["pixtral-12b-vision"].spec()
    sp = spectrum(spec, PRESETS["pixtral-12b-vision"].context)
    turning = [i for i, t in enumerate(sp.turns_in_train.tolist()) if t]
    assert sp.critical_dim is None and {16, 17, 18, 19} <= set(turning) and not {5, 6, 7, 8} & set(turning)


def test_train_len_override_judges_a_sliding_window() -> None:
    """gpt-oss's sliding layers (YaRN, L0 4,096) seen through a 128-token window: judged at the window, Liu et al.'s
    d_extra = 2 ceil((d/2) log_base(128 / 2 pi)) = 18 (inspect's at span 128)."""
    spec = RopeSpec(64, base=150000.0, scaling=Yarn(32.0, 4096, truncate=False))
    sp = spectrum(spec, 128, train_len=128)
    assert sp.train_len == 128 and sp.context == 128 and not sp.train_len_assumed
    assert sp.critical_dim == 2 * math.ceil(32 * math.log(128 / (2 * math.pi)) / math.log(150000.0)) == 18
    assert spectrum(spec, 128).train_len == 4096  # without it: the scheme's L0
    with pytest.raises(ValueError, match="train_len must be a positive int, got 0"):
        spectrum(spec, 128, train_len=0)


def test_a_training_length_derived_from_the_context_is_marked_assumed() -> None:
    """Linear / NTK-by-factor state no pretraining length: L0 = context / factor is an assumption (finding 9)."""
    assert spectrum(RopeSpec(32, scaling=Linear(8.0)), 131072).train_len_assumed
    assert spectrum(RopeSpec(32, scaling=Linear(8.0)), 131072).train_len == 16384
    for name in (
        "llama-3.1-8b",
        "qwen2.5-7b-yarn",
        "phi-3-mini-128k",
        "llama-2-7b",
    ):  # L0 stated, or unscaled
        assert not spectrum(PRESETS[name].spec(), PRESETS[name].context).train_len_assumed, name
