"""Band spectrum, critical dimension and rotations per band against the math (Python floats, published values)."""

from __future__ import annotations

import math

import pytest

from ropekit import RopeSpec
from ropekit.analysis.rotations import rotations
from ropekit.analysis.spectrum import spectrum
from ropekit.presets import preset_spec
from ropekit.scaling import Linear


def _theta(base: float, d: int) -> list[float]:
    return [base ** (-2 * i / d) for i in range(d // 2)]


def test_wavelengths_are_two_pi_over_theta() -> None:
    sp = spectrum(RopeSpec(64, base=5e5), 8192)
    for got, th in zip(sp.wavelength.tolist(), _theta(5e5, 64)):
        assert got == pytest.approx(2 * math.pi / th, rel=1e-12)
    assert sp.train_len == sp.context == 8192


def test_critical_dimension_of_llama2_is_92() -> None:
    """Liu et al. 2024 (arXiv 2310.05209): Llama 2 (d 128, base 1e4, trained at 4096) has d_extra = 92."""
    sp = spectrum(preset_spec("llama-2-7b"), 4096)
    assert sp.critical_dim == 92 and sp.critical_band == 46
    wl = _theta(1e4, 128)
    assert all(2 * math.pi / wl[i] <= 4096 for i in range(46))  # leading bands turn within L0
    assert all(2 * math.pi / wl[i] > 4096 for i in range(46, 64))


def test_p_rope_critical_dimension_counts_bands_and_zero_bands_are_infinite() -> None:
    sp = spectrum(RopeSpec(128, p=0.5), 4096)
    # p-RoPE zeroes the 32 lowest frequencies: the kept 32 all turn within 4096 (46 would), the rest never turn
    assert sp.critical_dim == 64
    assert math.isinf(sp.wavelength[40].item())


def test_llama3_scaled_wavelengths() -> None:
    """Llama 3 (factor 8, L0 8192): wavelengths < 8192/4 unchanged, > 8192/1 multiplied by 8."""
    sp = spectrum(preset_spec("llama-3.1-8b"), 131072)
    assert sp.train_len == 8192 and sp.context == 131072
    for before, after in zip(sp.wavelength_unscaled.tolist(), sp.wavelength.tolist()):
        if before < 2048:
            assert after == pytest.approx(before, rel=1e-12)
        elif before > 8192:
            assert after == pytest.approx(8 * before, rel=1e-12)


def test_rotations_are_context_theta_over_two_pi() -> None:
    """Linear(4) at 4096 tokens: pretrained at 4096 / 4 = 1024, the length whose angles the scaling keeps."""
    rot = rotations(RopeSpec(32, scaling=Linear(4.0)), 4096)
    assert rot.train_len == 1024
    for i, th in enumerate(_theta(1e4, 32)):
        assert rot.before[i].item() == pytest.approx(4096 * th / (2 * math.pi), rel=1e-12)
        assert rot.after[i].item() == pytest.approx(4096 * th / 4 / (2 * math.pi), rel=1e-12)
        assert rot.at_train[i].item() == pytest.approx(1024 * th / (2 * math.pi), rel=1e-12)
        assert rot.at_train[i].item() == pytest.approx(rot.after[i].item(), rel=1e-12)  # what PI preserves


def test_spectrum_training_length_of_a_linear_spec() -> None:
    """The trial: spectrum(RopeSpec(8, scaling=Linear(4)), 8192).train_len was 8192; the critical dimension is
    then Liu et al.'s at L0 = 2048: 2 ceil((d/2) log_base(L0 / 2 pi))."""
    sp = spectrum(RopeSpec(head_dim=8, scaling=Linear(4.0)), 8192)
    assert sp.train_len == 2048
    assert sp.critical_dim == 2 * math.ceil(4 * math.log(2048 / (2 * math.pi)) / math.log(1e4))


def test_rotations_at_training_length_for_yarn() -> None:
    rot = rotations(preset_spec("qwen2.5-7b-yarn"), 131072)
    assert rot.train_len == 32768
    for i, th in enumerate(_theta(1e6, 128)):
        assert rot.at_train[i].item() == pytest.approx(32768 * th / (2 * math.pi), rel=1e-12)


@pytest.mark.parametrize("bad", [0, -5, 1.5, True])
def test_bad_context_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="context"):
        spectrum(RopeSpec(8), bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="context"):
        rotations(RopeSpec(8), bad)  # type: ignore[arg-type]
