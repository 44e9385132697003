"""The warnings for two RoPE sources in one config say which one transformers computes with and which key to
delete to keep that RoPE (the trial: a v4 LongRoPE fragment merged into a Llama config warned "remove one of
them", and deleting rope_scaling, one of them, changes the model).

Oracle: transformers 5.23's own rotary module built from the config.json (``AutoConfig.from_pretrained``), before
and after the deletion each message advises or warns against.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from ropekit import RopeSpec
from ropekit.scaling import LongRope, Yarn
from tests.ropekit.hf.config_oracle import SIZES, hf_config

HEAD = SIZES["hidden_size"] // SIZES["num_attention_heads"]
LONG = RopeSpec(
    HEAD,
    base=1e4,
    scaling=LongRope(
        short_factor=[1.0 + i / HEAD for i in range(HEAD // 2)],
        long_factor=[2.0 + i / 8 for i in range(HEAD // 2)],
        original_max_position_embeddings=4096,
        max_position_embeddings=131072,
    ),
)
#: a v5 Llama config (its own rope_parameters, another base) with the v4 LongRoPE fragment merged in
MERGED = {
    "model_type": "llama",
    **SIZES,
    "max_position_embeddings": 4096,
    "rope_parameters": {"rope_type": "default", "rope_theta": 5e5},
    **LONG.to_hf(schema="v4"),
}


def _tables(cfg: dict[str, Any], tmp_path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' cos at positions past L0 (the long factors) and its inv_freq, from the config.json."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rot = LlamaRotaryEmbedding(hf_config(copy.deepcopy(cfg), tmp_path))
        pos = torch.tensor([[0, 100, 5000]])
        cos, _ = rot(torch.zeros(1, 3, HEAD), pos)
    return cos[0].double(), rot.inv_freq.double()


def test_both_sources_warning_says_which_is_used_and_what_to_delete(tmp_path: Path) -> None:
    with pytest.warns(UserWarning) as rec:
        spec = RopeSpec.from_hf(copy.deepcopy(MERGED))
    msg = next(str(w.message) for w in rec if "rope_scaling" in str(w.message))
    assert "transformers uses rope_scaling and ignores rope_parameters" in msg
    assert "its rope_theta=500000.0 included: the base is the top-level rope_theta=10000.0" in msg
    assert "delete rope_parameters" in msg and "deleting rope_scaling instead changes the RoPE" in msg
    assert "schema='v5'" in msg  # the cause the trial hit, and its fix
    assert (
        f"'short_factor': <{HEAD // 2} values>" in msg and "1.0625" not in msg
    )  # factors counted, not listed
    assert "emove one of them" not in msg
    assert spec == LONG

    # the advice checked against transformers: deleting rope_parameters keeps its rotary, deleting rope_scaling
    # does not; the fragment written with schema='v5' gives the same rotary
    merged, kept = _tables(MERGED, tmp_path)
    without_rp = {k: v for k, v in MERGED.items() if k != "rope_parameters"}
    without_rs = {k: v for k, v in MERGED.items() if k != "rope_scaling"}
    v5 = {**{k: v for k, v in MERGED.items() if k not in ("rope_scaling", "rope_theta")}, **LONG.to_hf()}
    for cfg in (without_rp, v5):
        torch.testing.assert_close(_tables(cfg, tmp_path)[0], merged, rtol=0, atol=0)
    assert not torch.allclose(_tables(without_rs, tmp_path)[1], kept)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the advised configs read without the warning
        assert RopeSpec.from_hf(copy.deepcopy(without_rp)) == RopeSpec.from_hf(copy.deepcopy(v5)) == LONG


def test_original_max_warning_says_how_to_keep_the_value_used(tmp_path: Path) -> None:
    yarn = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 4096}
    cfg = {
        "model_type": "llama",
        **SIZES,
        "max_position_embeddings": 16384,
        "original_max_position_embeddings": 1024,
        "rope_parameters": yarn,
    }
    with pytest.warns(UserWarning) as rec:
        spec = RopeSpec.from_hf(copy.deepcopy(cfg))
    msg = next(str(w.message) for w in rec if "differ" in str(w.message))
    assert "To keep 1024, set the rope parameter to it; deleting the top-level key makes it 4096" in msg
    assert isinstance(spec.scaling, Yarn) and spec.scaling.original_max_position_embeddings == 1024

    # transformers: the top-level 1024 is used; setting the rope parameter keeps it; deleting the top-level
    # key gives the rope parameter's 4096
    used = _tables(cfg, tmp_path)[1]
    set_rp = {**cfg, "rope_parameters": {**yarn, "original_max_position_embeddings": 1024}}
    torch.testing.assert_close(_tables(set_rp, tmp_path)[1], used, rtol=0, atol=0)
    deleted = {k: v for k, v in cfg.items() if k != "original_max_position_embeddings"}
    four_k = {**cfg, "original_max_position_embeddings": 4096}
    torch.testing.assert_close(_tables(deleted, tmp_path)[1], _tables(four_k, tmp_path)[1], rtol=0, atol=0)
    assert not torch.allclose(_tables(deleted, tmp_path)[1], used)


def test_phi3_class_default_warning_says_to_add_the_top_level_key() -> None:
    cfg = {
        "model_type": "phi3",
        **SIZES,
        "max_position_embeddings": 131072,
        "rope_parameters": {**LONG.to_hf()["rope_parameters"], "original_max_position_embeddings": 8192},
    }
    with pytest.warns(UserWarning, match="phi3's config class default") as rec:
        RopeSpec.from_hf(cfg)
    msg = next(str(w.message) for w in rec if "differ" in str(w.message))
    assert (
        "To keep 4096, set the rope parameter to it; a top-level original_max_position_embeddings=8192" in msg
    )
