"""Per-band ratios and attention factors of the scaling schemes against the schemes' published formulas."""

from __future__ import annotations

import math

import pytest

from ropekit import RopeSpec
from ropekit.analysis.schemes import SCHEME_NAMES, scheme_table
from ropekit.presets import preset_spec


def test_linear_and_ntk_ratios() -> None:
    """PI divides every theta by s; NTK's base * s^(r/(r-2)) gives theta/theta'_i = s^(2i/(r-2))."""
    r, s = 64, 4.0
    t = scheme_table(RopeSpec(r), context=2048, target=8192)
    assert t.original_length == 2048 and t.factor == s
    assert t.ratio["linear"].tolist() == pytest.approx([s] * (r // 2), rel=1e-12)
    assert t.ratio["ntk"].tolist() == pytest.approx([s ** (2 * i / (r - 2)) for i in range(r // 2)], rel=1e-9)
    assert set(t.ratio) == set(SCHEME_NAMES)  # no model column for an unscaled spec


def test_yarn_attention_factor_and_ramp_ends() -> None:
    """YaRN (Peng et al. 2023): attention factor 0.1 ln s + 1; fast bands untouched, slow bands interpolated."""
    t = scheme_table(RopeSpec(128), context=4096, target=32768)
    assert t.attention_factor["yarn"] == pytest.approx(0.1 * math.log(8) + 1, rel=1e-12)
    assert t.ratio["yarn"][0].item() == pytest.approx(1.0, rel=1e-12)
    assert t.ratio["yarn"][-1].item() == pytest.approx(8.0, rel=1e-12)
    assert t.attention_factor["linear"] == 1.0


def test_llama3_bands_and_model_column() -> None:
    """Llama 3: bands with wavelength < L0/4 keep theta (ratio 1); wavelength > L0 are divided by s."""
    t = scheme_table(preset_spec("llama-3.1-8b"), context=131072, target=131072)
    own = t.ratio["model:Llama3"]
    assert t.factor == 16.0  # 131072 / 8192
    for wl, r_own, r_l3 in zip(t.wavelength.tolist(), own.tolist(), t.ratio["llama3"].tolist()):
        if wl < 8192 / 4:
            assert r_own == pytest.approx(1.0) and r_l3 == pytest.approx(1.0)
        elif wl > 8192:
            assert r_own == pytest.approx(8.0) and r_l3 == pytest.approx(16.0)


def test_target_below_original_length_is_refused() -> None:
    with pytest.raises(ValueError, match="target must be an int >= the original length 8192, got 4096"):
        scheme_table(preset_spec("llama-3.1-8b"), context=131072, target=4096)


def test_unknown_scheme_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown scheme 'pi'"):
        scheme_table(RopeSpec(8), context=16, target=64, schemes=("pi",))


def test_dynamic_ntk_at_the_target_follows_hfs_formula() -> None:
    """HF dynamic NTK with factor s at length T = s L0: base * (s T / L0 - (s - 1))^(r/(r-2)), i.e. an NTK factor
    of s^2 - s + 1 -- it stretches more than static NTK at the same target."""
    r, s = 64, 4.0
    t = scheme_table(RopeSpec(r), context=2048, target=8192)
    alpha = s * s - s + 1
    assert t.ratio["dynamic"].tolist() == pytest.approx(
        [alpha ** (2 * i / (r - 2)) for i in range(r // 2)], rel=1e-9
    )
