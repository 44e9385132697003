"""RopeSpec.to_hf -> RopeSpec.from_hf: a lossless round trip, and a refusal for what transformers cannot express.

The families: test_config.py; strict validation: test_config_from_hf_validation.py."""

from __future__ import annotations

import pytest
import torch

from ropekit import RopeSpec
from ropekit.scaling import NTK, DynamicNTK, Linear, Llama3, LongRope, Yarn

ROUND_TRIP = [
    RopeSpec(128, base=500_000.0),
    RopeSpec(128, base=10_000.0, rotary_dim=32),
    RopeSpec(96, rotary_dim=32),  # 32/96 is not exact in floating point
    RopeSpec(128, layout="interleaved", scaling=Linear(4.0)),
    RopeSpec(128, scaling=NTK(factor=4.0)),
    RopeSpec(128, scaling=NTK(alpha=1000.0)),
    RopeSpec(128, scaling=DynamicNTK(2.0, 4096)),
    RopeSpec(64, base=150_000.0, scaling=Yarn(32.0, 4096, truncate=False)),
    RopeSpec(64, scaling=Yarn(40.0, 4096, mscale=0.707, mscale_all_dim=1.0, attention_factor_=1.0)),
    RopeSpec(96, scaling=LongRope((1.0,) * 48, (2.0,) * 48, 4096, max_position_embeddings=131072)),
    RopeSpec(96, scaling=LongRope((1.0,) * 48, (2.0,) * 48, 4096, factor=16.0, attention_factor_=1.1)),
    RopeSpec(128, base=5e5, scaling=Llama3(8.0, 1.0, 4.0, 8192)),
    RopeSpec(256, base=1e6, p=0.25),
    RopeSpec(256, base=1e6, p=0.25, scaling=Linear(8.0)),
]


@pytest.mark.parametrize("spec", ROUND_TRIP, ids=lambda s: f"{type(s.scaling).__name__}-{s.rotary_dim}-{s.p}")
def test_round_trip_is_lossless(spec: RopeSpec) -> None:
    back = RopeSpec.from_hf(spec.to_hf(), layout=spec.layout)
    assert back == spec
    assert torch.equal(back.inv_freq(), spec.inv_freq())


def test_to_hf_refuses_what_hf_cannot_express() -> None:
    with pytest.raises(ValueError, match="freqs"):
        RopeSpec(4, freqs=(1.0, 0.5)).to_hf()
    with pytest.raises(ValueError, match="proportional"):
        RopeSpec(128, rotary_dim=64, p=0.5).to_hf()
