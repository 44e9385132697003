"""Phi-MoE's ``short_mscale`` / ``long_mscale``: its rotary module multiplies cos and sin by them instead of the
LongRoPE attention factor. ropekit refused them as unknown keys (strict) or ignored them with a warning, so a
Phi-3.5-MoE config (both 1.243163121016122) rotated with the formula's 1.1902: cos / sin 4.4 % off.

Oracle: transformers' own ``PhimoeRotaryEmbedding`` built from the config (lengths up to L0, where it and
Phi-3.5-MoE's reference code agree; past L0 transformers 5.23 keeps the short factors, docs/hf.md), and the
attention-factor formula written out here.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")
from transformers import PhimoeConfig
from transformers.models.phimoe.modeling_phimoe import PhimoeRotaryEmbedding

from ropekit import RopeSpec, rope_tables

HEAD, L0, MAX = 16, 4096, 131072
PHI35_MSCALE = 1.243163121016122  # Phi-3.5-MoE-instruct's config.json, both keys


def _config(l0: int = L0, size: dict[str, int] | None = None, **mscales: float) -> Any:
    rp = {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "short_factor": [1.0 + i / 16 for i in range(HEAD // 2)],
        "long_factor": [2.0 + 3 * i for i in range(HEAD // 2)],
        "original_max_position_embeddings": l0,
        **mscales,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' notes on the mscale keys and original_max
        return PhimoeConfig(
            hidden_size=HEAD * 4,
            num_attention_heads=4,
            num_key_value_heads=2,
            rope_parameters=rp,
            **(size or {"max_position_embeddings": MAX}),
        )


def _hf_tables(cfg: Any, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = PhimoeRotaryEmbedding(cfg)(torch.zeros(1, pos.numel(), HEAD), pos[None])
    return cos[0, :, : HEAD // 2].double(), sin[0, :, : HEAD // 2].double()


def _close_below_l0(spec: RopeSpec, cfg: Any) -> None:
    pos = torch.tensor([0, 1, 7, 1000, L0 - 1])
    want_cos, want_sin = _hf_tables(cfg, pos)
    cos, sin = rope_tables(pos, spec, seq_len=L0)
    # transformers forms angles up to 4095 rad in float32 (~1e-5 off here); a wrong factor is 0.05 off
    torch.testing.assert_close(cos.double(), want_cos, rtol=0, atol=5e-4)
    torch.testing.assert_close(sin.double(), want_sin, rtol=0, atol=5e-4)


@pytest.mark.parametrize("strict", [True, False])
def test_phi35_moe_mscales_are_the_attention_factor(strict: bool) -> None:
    cfg = _config(short_mscale=PHI35_MSCALE, long_mscale=PHI35_MSCALE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # read, not ignored with a warning
        spec = RopeSpec.from_hf(cfg, strict=strict)
    assert spec.attention_factor == PHI35_MSCALE
    assert spec.attention_factor != pytest.approx(math.sqrt(1 + math.log(MAX / L0) / math.log(L0)), rel=1e-3)
    _close_below_l0(spec, cfg)


def test_different_mscales_are_refused_strict_and_warned_otherwise() -> None:
    cfg = _config(short_mscale=1.3, long_mscale=1.1)
    with pytest.raises(ValueError, match=r"short_mscale=1\.3 and long_mscale=1\.1 differ"):
        RopeSpec.from_hf(cfg)
    with pytest.warns(
        UserWarning, match=r"short_mscale=1\.3 and long_mscale=1\.1 differ.*short_mscale is used"
    ):
        spec = RopeSpec.from_hf(cfg, strict=False)
    assert spec.attention_factor == 1.3
    _close_below_l0(spec, cfg)


def test_one_mscale_falls_back_to_the_formula_for_the_other() -> None:
    formula = math.sqrt(1 + math.log(MAX / L0) / math.log(L0))
    one = _config(
        short_mscale=formula, long_mscale=formula
    ).to_dict()  # a config.json dict: the class wants both
    del one["rope_parameters"]["long_mscale"]
    spec = RopeSpec.from_hf(one)  # the missing long one falls back to the formula: equal
    assert spec.attention_factor == formula
    with pytest.raises(ValueError, match=r"short_mscale=1\.3 and long_mscale=1\.19\d+ differ"):
        RopeSpec.from_hf({**one, "rope_parameters": {**one["rope_parameters"], "short_mscale": 1.3}})


def test_without_mscales_the_formula_applies() -> None:
    """No mscale keys (a config.json dict: transformers 5.23's PhimoeConfig requires both): the formula, as in
    Phi-3.5-MoE's reference code."""
    cfg = _config(short_mscale=1.0, long_mscale=1.0).to_dict()
    for key in ("short_mscale", "long_mscale"):
        del cfg["rope_parameters"][key]
    spec = RopeSpec.from_hf(cfg)
    assert spec.attention_factor == pytest.approx(math.sqrt(1 + math.log(MAX / L0) / math.log(L0)), rel=1e-15)


def test_the_keys_stay_unknown_outside_phi_moe() -> None:
    cfg = _config(short_mscale=PHI35_MSCALE, long_mscale=PHI35_MSCALE).to_dict()
    cfg["model_type"] = "phi3"
    with pytest.raises(
        ValueError, match=r"unknown keys \['long_mscale', 'short_mscale'\] for rope_type 'longrope'"
    ):
        RopeSpec.from_hf(cfg)


def test_patched_phi_moe_equals_the_model_up_to_l0_and_warns_about_past_it() -> None:
    """A Phi-3.5-MoE-like model (mscales 1.2432; L0 64 of 512): ropekit.hf.patch refused it before (its tables were
    4.4 % off). Now it patches; up to L0 the logits equal the unpatched model's (the oracle: transformers' own
    forward); past L0 they differ, as documented (transformers keeps the short factors), with a warning."""
    from transformers import AutoModelForCausalLM

    import ropekit.hf

    small_l0 = 64
    size = {
        "max_position_embeddings": 512,
        "intermediate_size": 64,
        "vocab_size": 100,
        "num_hidden_layers": 2,
    }
    cfg = _config(
        small_l0, {**size, "num_local_experts": 2}, short_mscale=PHI35_MSCALE, long_mscale=PHI35_MSCALE
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    short, long = torch.randint(0, 100, (1, small_l0 - 4)), torch.randint(0, 100, (1, 2 * small_l0))
    with torch.no_grad():
        want_short, want_long = model(short).logits, model(long).logits
        with (
            pytest.warns(UserWarning, match=r"short factors at every length.*differ .* longer than 64"),
            ropekit.hf.patched(model),
        ):
            got_short, got_long = model(short).logits, model(long).logits
    torch.testing.assert_close(got_short, want_short, rtol=0, atol=1e-5)
    assert (
        got_long - want_long
    ).abs().max() > 1e-3  # past L0: the long factors, not transformers' short ones
