"""partial_rotary_factor exactly as transformers 5.23 computes it (int(head_dim * factor)), both ways: to_hf writes a
factor transformers maps back to the rotary dim, from_hf reads the dim transformers uses (user trial F3)."""

from __future__ import annotations

import math

import pytest
import torch

from ropekit import RopeSpec

transformers = pytest.importorskip("transformers")
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from tests.ropekit.hf.config_oracle import Bare


# ------------------------------------------------------------------ F3: partial_rotary_factor exactly as transformers
def test_f3_to_hf_factor_gives_back_rotary_dim_in_transformers() -> None:
    """Every even head_dim <= 512 and even rotary_dim < head_dim: transformers' own linear init function, fed the
    written factor, builds rotary_dim / 2 frequencies with exponent 2i / rotary_dim; from_hf reads the same."""
    fn = ROPE_INIT_FUNCTIONS["linear"]
    floored_before = 0
    for H in range(4, 513, 2):
        for rd in range(2, H, 2):
            floored_before += int(H * (rd / H)) != rd
            spec = RopeSpec(H, rotary_dim=rd)
            frag = spec.to_hf()
            f = frag["rope_parameters"]["partial_rotary_factor"]
            assert spec.to_hf(schema="v4")["partial_rotary_factor"] == f
            inv, _ = fn(
                Bare(
                    head_dim=H, rope_parameters={"rope_theta": 1e4, "factor": 1.0, "partial_rotary_factor": f}
                )
            )
            assert inv.numel() == rd // 2, (H, rd, f)
            last = 1e4 ** (
                -(rd - 2) / rd
            )  # exponent over rotary_dim: rotary_dim - 1 would differ by >= 1.8e-2
            assert math.isclose(float(inv[-1]), last, rel_tol=1e-5), (H, rd, f)
            assert RopeSpec.from_hf(frag) == spec
    assert floored_before == 1087  # pairs the plain rotary_dim / head_dim floored to rotary_dim - 1


def test_f3_to_hf_proportional_factor_keeps_the_bands_in_transformers() -> None:
    fn = ROPE_INIT_FUNCTIONS["proportional"]
    for H in range(4, 513, 2):
        n = H // 2
        for k in range(1, n):
            spec = RopeSpec(H, p=k / n)
            frag = spec.to_hf()
            f = frag["rope_parameters"]["partial_rotary_factor"]
            inv, _ = fn(Bare(head_dim=H, rope_parameters={"rope_theta": 1e4, "partial_rotary_factor": f}))
            assert int((inv != 0).sum()) == k == spec.n_positional_bands, (H, k, f)
            assert RopeSpec.from_hf(frag) == spec


def test_f3_from_hf_computes_the_rotary_dim_as_transformers() -> None:
    fn = ROPE_INIT_FUNCTIONS["linear"]
    checked = refused = 0
    for H in range(4, 257, 2):
        for k in range(1, H):
            prf = k / H
            if int(H * prf) == k:
                continue  # only the floating-point edge: H * (k / H) just below k
            inv, _ = fn(
                Bare(
                    head_dim=H,
                    rope_parameters={"rope_theta": 1e4, "factor": 1.0, "partial_rotary_factor": prf},
                )
            )
            cfg = {
                "head_dim": H,
                "rope_parameters": {"rope_type": "linear", "factor": 1.0, "partial_rotary_factor": prf},
            }
            # k odd: transformers rotates k - 1 (even) channels, so does ropekit (the old +1e-9 guard refused it)
            if k % 2 and k > 1:
                spec = RopeSpec.from_hf(cfg)
                assert spec.rotary_dim == k - 1 == 2 * inv.numel()
                torch.testing.assert_close(spec.inv_freq(), inv, rtol=5e-7, atol=0)
                checked += 1
            else:  # an odd k - 1 (exponent over k - 1), or 0: not a RopeSpec, refused by name
                with pytest.raises(ValueError, match=rf"partial_rotary_factor={prf!r} rotates int\({H} \*"):
                    RopeSpec.from_hf(cfg)
                refused += 1
    assert checked and refused


def test_f3_from_hf_proportional_keeps_transformers_bands() -> None:
    fn = ROPE_INIT_FUNCTIONS["proportional"]
    for H in (64, 128, 200, 256, 512):
        for i in range(1, 1000):
            prf = i / 1000
            inv, _ = fn(Bare(head_dim=H, rope_parameters={"rope_theta": 1e4, "partial_rotary_factor": prf}))
            cfg = {
                "head_dim": H,
                "rope_parameters": {
                    "rope_type": "proportional",
                    "rope_theta": 1e4,
                    "partial_rotary_factor": prf,
                },
            }
            kept = int((inv != 0).sum())
            if kept == 0:
                with pytest.raises(ValueError, match="0 bands"):
                    RopeSpec.from_hf(cfg)
                continue
            spec = RopeSpec.from_hf(cfg)
            assert spec.n_positional_bands == kept, (H, prf)
            torch.testing.assert_close(spec.inv_freq(), inv, rtol=5e-7, atol=0)
    # the case the trial's guard got wrong: 0.29 * 200 // 2 = 28 bands in transformers, 29 with the guard
    assert (
        RopeSpec.from_hf(
            {
                "head_dim": 200,
                "rope_parameters": {
                    "rope_type": "proportional",
                    "rope_theta": 1e4,
                    "partial_rotary_factor": 0.29,
                },
            }
        ).n_positional_bands
        == 28
    )
