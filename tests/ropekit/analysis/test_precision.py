"""The measured error table: ropekit stays at float32 rounding, the common recipe grows with position."""

from __future__ import annotations

import pytest

from ropekit import RopeSpec
from ropekit.analysis import common_fp32_inv_freq, phase_error, phase_error_table
from ropekit.presets import preset_spec
from ropekit.scaling import NTK, DynamicNTK, Linear


def test_error_table_shape_and_levels() -> None:
    rows = phase_error_table(RopeSpec(128, base=10_000.0), (1_000, 100_000, 10_000_000))
    assert [r.window for r in rows] == [1_001, 2048, 2048]  # positions 0..1000 inclusive
    assert all(r.ropekit < 6e-8 for r in rows)
    # papers' table (precision-and-distributed.md 1.2): ~1e-4 at 1e3, 6.8e-3 at 1e5, 0.76 at 1e7
    assert 1e-5 < rows[0].common_fp32 < 1e-3
    assert 1e-3 < rows[1].common_fp32 < 3e-2
    assert rows[2].common_fp32 > 0.3


SCHEMES = {
    "linear": RopeSpec(128, base=1e4, scaling=Linear(8.0)),
    "ntk": RopeSpec(128, base=1e4, scaling=NTK(factor=4.0)),
    "dynamic": RopeSpec(128, base=1e4, scaling=DynamicNTK(4.0, 4096)),
    "yarn": preset_spec("qwen2.5-7b-yarn"),
    "longrope": preset_spec("phi-3-mini-128k"),
    "llama3": preset_spec("llama-3.1-8b"),
    "p-rope": RopeSpec(128, base=1e4, p=0.5),
    "proportional": RopeSpec(256, base=1e6, p=0.25, scaling=Linear(8.0)),
    "partial": RopeSpec(96, base=1e4, rotary_dim=24),
}


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_every_scheme_is_measured(name: str) -> None:
    """ropekit stays at float32 rounding; the common recipe's error is what its float32 frequencies predict."""
    spec = SCHEMES[name]
    a = spec.attention_factor
    pos = 1_000_000
    err = phase_error(spec, pos, window=64)
    assert err.ropekit < 1e-7 * a
    assert err.oracle_bound < 1e-9
    seq_len = pos + 1 if spec.dynamic else None
    theta = spec.frequencies(seq_len)
    inv32 = common_fp32_inv_freq(spec, seq_len).double()
    # float32 frequencies alone shift the angle by p * |inv32 - theta|; the float32 product adds ~half an ulp.
    shift = (pos * (inv32 - theta).abs()).max().item()
    ulp = pos * theta.max().item() * 2.0**-24
    assert 0.5 * shift * a <= err.common_fp32 <= (shift + ulp) * a + 1e-6


def test_phase_error_refuses_bad_arguments() -> None:
    spec = RopeSpec(8)
    with pytest.raises(ValueError, match="position must be an int >= 0, got -1"):
        phase_error(spec, -1)
    with pytest.raises(ValueError, match="window must be an int >= 1, got 0"):
        phase_error(spec, 10, window=0)
