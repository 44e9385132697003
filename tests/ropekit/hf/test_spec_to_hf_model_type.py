"""``RopeSpec.to_hf(model_type=...)``: the method passes ``model_type`` on to :func:`ropekit.hf.spec_to_hf`, so a
Phi-MoE spec written with ``spec.to_hf(model_type="phimoe")`` goes back into a ``PhimoeConfig`` (with
``short_mscale`` / ``long_mscale``). Before: ``to_hf`` had no such keyword and wrote ``attention_factor``, which
``PhimoeConfig`` refuses.

Oracle: transformers' own ``PhimoeRotaryEmbedding``, built from the original config and from the written fragment,
below and past L0 (helpers of tests/ropekit/hf/test_config_phimoe_to_hf.py).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from ropekit import RopeSpec
from ropekit.scaling import Linear
from tests.ropekit.hf.test_config_phimoe_to_hf import HEAD, ORIGINAL, _config, _cos_sin, _phimoe


@pytest.mark.parametrize("schema", ["v5", "v4"])
def test_to_hf_model_type_gives_transformers_same_phimoe_rotary(schema: str) -> None:
    original = _phimoe(**ORIGINAL)
    fragment = RopeSpec.from_hf(original).to_hf(schema, model_type="phimoe")  # type: ignore[arg-type]
    written = _config(**fragment)  # PhimoeConfig refuses the fragment without model_type="phimoe"
    torch.testing.assert_close(_cos_sin(written), _cos_sin(original), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("spec", "model_type", "match"),
    [
        (RopeSpec(HEAD), 3, r"model_type=3 must be a transformers model_type string"),
        (
            RopeSpec(HEAD, scaling=Linear(2.0)),
            "phimoe",
            r"model_type='phimoe' with Linear\(.*expected a LongRope",
        ),
    ],
)
def test_to_hf_refuses_a_bad_model_type_naming_it(spec: RopeSpec, model_type: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        spec.to_hf(model_type=model_type)  # type: ignore[arg-type]
