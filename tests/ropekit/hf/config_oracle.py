"""transformers 5.23 as the oracle of config reading: a config dict written to a config.json and loaded with
``transformers.AutoConfig.from_pretrained`` (what a checkpoint goes through), for the tests of RopeSpec.from_hf."""

from __future__ import annotations

import json
import types
import warnings
from pathlib import Path
from typing import Any

import pytest

transformers = pytest.importorskip("transformers")

SIZES = {"hidden_size": 256, "num_attention_heads": 2, "num_hidden_layers": 2}


def hf_config(cfg: dict[str, Any], tmp_path: Path) -> Any:
    """transformers' config object for a config.json holding ``cfg``."""
    d = tmp_path / f"c{len(list(tmp_path.iterdir()))}"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.AutoConfig.from_pretrained(str(d))


def hf_fails(cfg: dict[str, Any], tmp_path: Path) -> bool:
    """Whether transformers refuses ``cfg`` or fails building a Llama rotary module from it."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    try:
        obj = hf_config(cfg, tmp_path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            LlamaRotaryEmbedding(obj)
    except Exception:  # noqa: BLE001 - huggingface_hub's StrictDataclass errors are plain Exceptions
        return True
    return False


def hf_refuses(cfg: dict[str, Any], tmp_path: Path) -> bool:
    try:
        hf_config(cfg, tmp_path)
    except Exception:  # noqa: BLE001 - huggingface_hub's StrictDataclass errors are plain Exceptions
        return True
    return False


class Bare(types.SimpleNamespace):
    """The attributes transformers' rope init functions read, without a config class around them."""

    def standardize_rope_params(self) -> None:
        pass
