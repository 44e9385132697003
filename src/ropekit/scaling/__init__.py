# SPDX-License-Identifier: MIT
"""Phase maps (scaling schemes) for long context; see :mod:`ropekit.scaling.base` for the interface.

| class | rope_type in config.json | what it changes |
|---|---|---|
| :class:`Linear` | linear | every theta_i / factor (position interpolation) |
| :class:`NTK` | ntk (ropekit's own; not transformers', not vLLM's ntk), ntk_alpha (HunYuan; checkpoints: dynamic+alpha) | base * x^(d/(d-2)), static |
| :class:`DynamicNTK` | dynamic | base grows with the current length past max_position_embeddings |
| :class:`Yarn` | yarn | NTK-by-parts ramp + attention factor (DeepSeek mscale ratio, gpt-oss truncate) |
| :class:`LongRope` | longrope (Phi-3 su) | per-band short/long factors switched at L0 + attention factor |
| :class:`Llama3` | llama3 | wavelength bands with low/high_freq_factor |

HF's ``proportional`` (Gemma 4) is p-RoPE over the whole head: ``RopeSpec(p=partial_rotary_factor)``, plus
:class:`Linear` when it has a factor. Every other rope_type above is one transformers 5.23 loads
(``ROPE_INIT_FUNCTIONS``); :class:`NTK`'s are read back only by ``RopeSpec.from_hf`` (and ``ntk_alpha`` by
transformers' HunYuan models): see :mod:`ropekit.scaling.ntk`.
"""

from ropekit.scaling.base import Linear, Scaling
from ropekit.scaling.llama3 import Llama3
from ropekit.scaling.longrope import LongRope
from ropekit.scaling.ntk import NTK, DynamicNTK
from ropekit.scaling.yarn import Yarn, mla_softmax_scale, yarn_correction_range, yarn_mscale

__all__ = [
    "NTK",
    "DynamicNTK",
    "Linear",
    "Llama3",
    "LongRope",
    "Scaling",
    "Yarn",
    "mla_softmax_scale",
    "yarn_correction_range",
    "yarn_mscale",
]
