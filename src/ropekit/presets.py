# SPDX-License-Identifier: MIT
"""The rope-related facts of well-known checkpoints, as config.json fragments (parsed by ``RopeSpec.from_hf``).

Each preset keeps the keys of the model's published ``config.json`` that decide RoPE (head geometry, base,
scaling, lengths), so that it goes through the same parser as a real file. Use :func:`preset_spec`, or
``ropekit inspect NAME`` / ``ropekit presets`` on the command line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ropekit.analysis.layers import LayerView, layer_views, rope_per_layer_type
from ropekit.spec import RopeSpec

__all__ = ["PRESETS", "Preset", "get_preset", "preset_spec"]

# Phi-3-mini-128k-instruct's LongRoPE factors (config.json, 48 = head_dim 96 / 2 each).
_PHI3_LONG = (
    1.0700000524520874,
    1.1200000047683716,
    1.149999976158142,
    1.4199999570846558,
    1.5699999332427979,
    1.7999999523162842,
    2.129999876022339,
    2.129999876022339,
    3.009999990463257,
    5.910000324249268,
    6.950000286102295,
    9.070000648498535,
    9.930000305175781,
    10.710000038146973,
    11.130000114440918,
    14.609999656677246,
    15.409998893737793,
    19.809999465942383,
    37.279998779296875,
    38.279998779296875,
    38.599998474121094,
    40.12000274658203,
    46.20000457763672,
    50.940006256103516,
    53.66000747680664,
    54.9373893737793,
    56.89738845825195,
    57.28738784790039,
    59.98738479614258,
    60.86738586425781,
    60.887386322021484,
    61.71739196777344,
    62.91739273071289,
    62.957393646240234,
    63.41739273071289,
    63.8173942565918,
    63.83739471435547,
    63.897396087646484,
    63.93739700317383,
    64.06739807128906,
    64.11434936523438,
    64.12435150146484,
    64.15435028076172,
    64.19435119628906,
    64.24435424804688,
    64.57435607910156,
    64.69000244140625,
    64.76000213623047,
)
_PHI3_SHORT = (
    1.1,
    1.1,
    1.1,
    1.3000000000000003,
    1.3500000000000003,
    1.3500000000000003,
    1.4000000000000004,
    1.5500000000000005,
    *([2.000000000000001] * 17),
    *([2.0500000000000007] * 6),
    2.1000000000000005,
    2.1000000000000005,
    2.1500000000000004,
    2.25,
    2.25,
    2.25,
    2.25,
    2.25,
    2.3999999999999995,
    2.4499999999999993,
    2.499999999999999,
    2.6999999999999984,
    2.6999999999999984,
    2.7499999999999982,
    2.799999999999998,
    2.8999999999999977,
    3.049999999999997,
)


@dataclass(frozen=True)
class Preset:
    """A checkpoint's RoPE facts.

    Attributes:
        name: the preset's command-line name.
        description: one line for ``ropekit presets``.
        config: the rope-related keys of the checkpoint's config.json.
        layer_types: the distinct attention layer types of per-layer-type models (empty for one kind of layer).
    """

    name: str
    description: str
    config: dict[str, Any]
    layer_types: tuple[str, ...] = field(default=())

    def spec(self, layer_type: str | None = None) -> RopeSpec:
        """The RoPE of ``layer_type`` (default: the last layer type, the full-attention layers)."""
        if self.layer_types and layer_type is None:
            layer_type = self.layer_types[-1]
        if layer_type is not None and layer_type not in self.layer_types:
            raise ValueError(
                f"layer_type={layer_type!r} is not a layer type of {self.name}; known: {list(self.layer_types)}"
            )
        if layer_type is not None and not rope_per_layer_type(self.config):
            return RopeSpec.from_hf(self.config)  # one RoPE shared by every layer type (gpt-oss, Gemma 2)
        return RopeSpec.from_hf(self.config, layer_type=layer_type)

    def views(self, context: int | None = None, layer_type: str | None = None) -> list[LayerView]:
        """One :class:`~ropekit.analysis.layers.LayerView` per layer type, at ``context`` (default: the model's)."""
        return layer_views(
            self.config, context=self.context if context is None else context, layer_type=layer_type
        )

    @property
    def context(self) -> int:
        """The model's context length (``max_position_embeddings``)."""
        return int(self.config["max_position_embeddings"])


def _p(name: str, description: str, types: tuple[str, ...] = (), **config: Any) -> Preset:
    return Preset(name, description, config, types)


_LLAMA3 = {
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3",
}
PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        _p(
            "llama-2-7b",
            "Llama 2 7B: plain RoPE, base 1e4, 4k context",
            model_type="llama",
            hidden_size=4096,
            num_attention_heads=32,
            max_position_embeddings=4096,
            rope_theta=10000.0,
            rope_scaling=None,
        ),
        _p(
            "llama-3.1-8b",
            "Llama 3.1 8B: base 5e5, llama3 scaling x8 from 8k to 128k",
            model_type="llama",
            hidden_size=4096,
            num_attention_heads=32,
            max_position_embeddings=131072,
            rope_theta=500000.0,
            rope_scaling={"factor": 8.0, **_LLAMA3},
        ),
        _p(
            "llama-3.2-1b",
            "Llama 3.2 1B: head_dim 64, llama3 scaling x32",
            model_type="llama",
            hidden_size=2048,
            num_attention_heads=32,
            head_dim=64,
            max_position_embeddings=131072,
            rope_theta=500000.0,
            rope_scaling={"factor": 32.0, **_LLAMA3},
        ),
        _p(
            "mistral-7b",
            "Mistral 7B v0.1: base 1e4, 32k positions, 4k sliding window on every layer",
            ("sliding_attention",),
            model_type="mistral",
            num_hidden_layers=32,
            sliding_window=4096,
            hidden_size=4096,
            num_attention_heads=32,
            max_position_embeddings=32768,
            rope_theta=10000.0,
        ),
        _p(
            "qwen2.5-7b",
            "Qwen2.5 7B: base 1e6, 32k context",
            model_type="qwen2",
            hidden_size=3584,
            num_attention_heads=28,
            max_position_embeddings=32768,
            rope_theta=1000000.0,
        ),
        _p(
            "qwen2.5-7b-yarn",
            "Qwen2.5 7B with its documented YaRN x4 setting: 32k pretraining extended to a 128k context",
            model_type="qwen2",
            hidden_size=3584,
            num_attention_heads=28,
            # Qwen's config.json keeps 32768 and documents adding rope_scaling for 128k: the preset is that setting,
            # used at the context it is for (factor 4 x original 32,768 = 131,072, also transformers' YaRN ratio)
            max_position_embeddings=131072,
            rope_theta=1000000.0,
            rope_scaling={"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"},
        ),
        _p(
            "phi-3-mini-128k",
            "Phi-3 mini 128k: LongRoPE from 4k, head_dim 96",
            model_type="phi3",
            hidden_size=3072,
            num_attention_heads=32,
            max_position_embeddings=131072,
            original_max_position_embeddings=4096,
            rope_theta=10000.0,
            rope_scaling={
                "long_factor": list(_PHI3_LONG),
                "short_factor": list(_PHI3_SHORT),
                "type": "longrope",
            },
        ),
        _p(
            "gemma-3-4b",
            "Gemma 3 4B: sliding layers base 1e4; full layers base 1e6 with linear x8",
            ("sliding_attention", "full_attention"),
            model_type="gemma3_text",
            hidden_size=2560,
            num_hidden_layers=34,
            sliding_window=1024,
            sliding_window_pattern=6,
            num_attention_heads=8,
            head_dim=256,
            max_position_embeddings=131072,
            rope_theta=1000000.0,
            rope_local_base_freq=10000.0,
            rope_scaling={"factor": 8.0, "rope_type": "linear"},
        ),
        _p(
            "gemma-2-9b",
            "Gemma 2 9B: base 1e4, 8k context; alternating sliding (4096) and full layers",
            ("sliding_attention", "full_attention"),
            model_type="gemma2",
            hidden_size=3584,
            num_attention_heads=16,
            head_dim=256,
            num_hidden_layers=42,
            max_position_embeddings=8192,
            rope_theta=10000.0,
            sliding_window=4096,
        ),
        _p(
            "deepseek-v3",
            "DeepSeek-V3: 64-dim decoupled rope head, YaRN x40, mscale 1/1 (MLA)",
            model_type="deepseek_v3",
            hidden_size=7168,
            num_attention_heads=128,
            qk_rope_head_dim=64,
            qk_nope_head_dim=128,
            max_position_embeddings=163840,
            rope_theta=10000,
            rope_scaling={
                "beta_fast": 32,
                "beta_slow": 1,
                "factor": 40,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "original_max_position_embeddings": 4096,
                "type": "yarn",
            },
        ),
        _p(
            "gpt-oss-20b",
            "gpt-oss 20B: head_dim 64, base 1.5e5, YaRN x32 without truncation; sliding (128) and full layers",
            ("sliding_attention", "full_attention"),
            model_type="gpt_oss",
            num_hidden_layers=24,
            layer_types=["sliding_attention", "full_attention"] * 12,
            sliding_window=128,
            hidden_size=2880,
            num_attention_heads=64,
            head_dim=64,
            max_position_embeddings=131072,
            rope_theta=150000.0,
            rope_scaling={
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "factor": 32.0,
                "original_max_position_embeddings": 4096,
                "rope_type": "yarn",
                "truncate": False,
            },
        ),
        _p(
            "gpt-neox-20b",
            "GPT-NeoX 20B: partial rotary (25% of head_dim 96)",
            model_type="gpt_neox",
            hidden_size=6144,
            num_attention_heads=64,
            max_position_embeddings=2048,
            rotary_pct=0.25,
            rotary_emb_base=10000,
        ),
    ]
}

# Vision-language presets (M-RoPE text decoders) live in presets_vl.py.
from ropekit.presets_vl import VL_PRESETS as _VL

PRESETS.update({n: _p(n, v["description"], **v["config"]) for n, v in _VL.items()})


def get_preset(name: str) -> Preset:
    """The preset called ``name``; ValueError listing the known names otherwise."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]


def preset_spec(name: str, layer_type: str | None = None) -> RopeSpec:
    """The RopeSpec of a preset (for per-layer-type models, the last layer type unless ``layer_type`` is given)."""
    return get_preset(name).spec(layer_type)


# Vision-tower presets (2-D / 3-D RoPE at their patch grids) live in presets_vision.py; importing it registers them.
import ropekit.presets_vision  # noqa: F401
