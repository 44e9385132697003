"""Phi-MoE round trip: ``from_hf`` -> ``spec_to_hf(model_type="phimoe")`` -> transformers gives transformers' same
rotary. Phi-MoE's rotary multiplies cos / sin by ``short_mscale`` / ``long_mscale`` (its config class refuses a
LongRoPE without them), and reads ``original_max_position_embeddings`` from the rope dict only. The trial: the
fragment carried ``attention_factor`` instead, which ``PhimoeConfig`` refuses.

Oracle: transformers' own ``PhimoeRotaryEmbedding``, built from the original config and from the written fragment,
at positions below and past L0 (its forward switches to ``long_mscale`` there).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import warnings
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")
from transformers import PhimoeConfig
from transformers.models.phimoe.modeling_phimoe import PhimoeRotaryEmbedding

from ropekit import RopeSpec
from ropekit.hf import spec_to_hf
from ropekit.scaling import Linear, LongRope
from tests.ropekit.hf.test_phimoe import HEAD, L0, MAX, PHI35_MSCALE
from tests.ropekit.hf.test_phimoe import _config as _phimoe  # Phi-MoE's LongRoPE config object

SIZE = {
    "hidden_size": HEAD * 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": MAX,
}
ORIGINAL = {"short_mscale": PHI35_MSCALE, "long_mscale": PHI35_MSCALE}


def _config(**fragment: Any) -> Any:
    """transformers' PhimoeConfig of a fragment (merged into the model's size keys)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' notes on the mscale keys
        return PhimoeConfig(**{**SIZE, **copy.deepcopy(fragment)})


def _cos_sin(cfg: Any) -> torch.Tensor:
    """cos and sin at positions below and past L0 (sequence lengths on both sides of it)."""
    out = []
    for last in (L0 - 1, 3 * L0):
        pos = torch.tensor([[0, 1, 1000, last]])
        cos, sin = PhimoeRotaryEmbedding(cfg)(torch.zeros(1, 4, HEAD), pos)
        out += [cos, sin]
    return torch.cat(out).double()


@pytest.mark.parametrize("schema", ["v5", "v4"])
def test_round_trip_gives_transformers_same_rotary(schema: str) -> None:
    original = _phimoe(**ORIGINAL)
    spec = RopeSpec.from_hf(original)
    fragment = spec_to_hf(spec, schema=schema, model_type="phimoe")  # type: ignore[arg-type]
    rope = fragment["rope_parameters" if schema == "v5" else "rope_scaling"]
    assert rope["short_mscale"] == rope["long_mscale"] == PHI35_MSCALE and "attention_factor" not in rope
    assert rope["original_max_position_embeddings"] == L0  # Phi-MoE reads it from the rope dict only
    written = _config(**fragment)
    torch.testing.assert_close(_cos_sin(written), _cos_sin(original), rtol=0, atol=0)
    assert RopeSpec.from_hf({"model_type": "phimoe", **SIZE, **fragment}) == spec


def test_formula_attention_factor_is_written_as_the_mscales() -> None:
    """A LongRope without an explicit attention factor: transformers multiplies cos / sin by the formula's
    sqrt(1 + ln(max / L0) / ln L0) (written out here), below and past L0."""
    read = RopeSpec.from_hf(_phimoe(**ORIGINAL))
    assert isinstance(read.scaling, LongRope)
    spec = dataclasses.replace(read, scaling=dataclasses.replace(read.scaling, attention_factor_=None))
    formula = math.sqrt(1 + math.log(MAX / L0) / math.log(L0))
    fragment = spec_to_hf(spec, model_type="phimoe")
    assert fragment["rope_parameters"]["short_mscale"] == pytest.approx(formula, rel=1e-12)
    cos_sin = _cos_sin(_config(**fragment))  # position 0: cos = 1 * mscale, for both sequence lengths
    torch.testing.assert_close(cos_sin[[0, 2], 0, 0], torch.full((2,), formula, dtype=torch.float64))


def test_without_model_type_the_fragment_is_the_generic_one() -> None:
    spec = RopeSpec.from_hf(_phimoe(**ORIGINAL))
    fragment = spec_to_hf(spec)
    assert fragment == spec.to_hf() and "short_mscale" not in fragment["rope_parameters"]
    with pytest.raises(Exception, match="short_mscale field must be a number"):
        _config(**fragment)  # transformers refuses it for Phi-MoE: hence model_type=


@pytest.mark.parametrize(
    "spec",
    [
        RopeSpec(HEAD, scaling=Linear(2.0)),
        RopeSpec(HEAD, p=0.5),
    ],
)
def test_phimoe_schemes_without_mscales_are_refused(spec: RopeSpec) -> None:
    with pytest.raises(
        ValueError, match="model_type='phimoe' with .*short_mscale / long_mscale.*expected a LongRope"
    ):
        spec_to_hf(spec, model_type="phimoe")


def test_plain_rope_for_phimoe_needs_no_mscales() -> None:
    spec = RopeSpec(HEAD, base=1e4)
    fragment = spec_to_hf(spec, model_type="phimoe")
    assert fragment == spec.to_hf()
    assert RopeSpec.from_hf(_config(**fragment)) == spec  # transformers builds it: default RoPE needs none


def test_bad_model_type_is_named() -> None:
    with pytest.raises(ValueError, match=r"model_type=3 must be a transformers model_type string"):
        spec_to_hf(RopeSpec(HEAD), model_type=3)  # type: ignore[arg-type]
