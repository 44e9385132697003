# SPDX-License-Identifier: MIT
"""The attention-logit scale a family applies outside the rotation: DeepSeek's MLA softmax scale.

transformers' multi-head latent attention (DeepSeek-V2/V3 and the families built on it) sets its softmax scale to
qk_head_dim^-0.5 * m(s, mscale_all_dim)^2 (``yarn_apply_mscale``, :func:`ropekit.scaling.mla_softmax_scale`), with
m(s, a) = 0.1 a ln s + 1, whenever its rope parameters have a scheme and a non-zero ``mscale_all_dim``. The
rotation's own attention factor is then the ratio m(s, mscale) / m(s, mscale_all_dim), 1 for DeepSeek-V3
(mscale = mscale_all_dim = 1), so the cos/sin tables alone understate how much the logits grow: in all they are
scaled by attention_factor^2 * m(s, mscale_all_dim)^2 (DeepSeek-V3: 1 * 1.874).

Shapes: none (configuration only).
"""

from __future__ import annotations

from ropekit.scaling import Yarn, mla_softmax_scale
from ropekit.spec import RopeSpec

__all__ = ["MLA_TYPES", "logit_scale"]

#: model types whose transformers attention applies ``yarn_apply_mscale`` to its softmax scale (transformers 5.23;
#: tests/ropekit/report/test_scaling_section.py reads them from transformers' modeling files)
MLA_TYPES = frozenset(
    {
        "axk1",
        "axk2",
        "bailing_hybrid",
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v32",
        "glm4_moe_lite",
        "glm_moe_dsa",
        "hy_v4",
        "longcat_flash",
        "minicpm3",
        "mistral4",
        "mistral_large4",
        "mistral_large4_text",
        "youtu",
    }
)


def logit_scale(model_type: str | None, spec: RopeSpec) -> float:
    """The factor on the attention logits beyond qk_head_dim^-0.5 that the attention (not the cos/sin tables)
    applies: m(s, mscale_all_dim)^2 for an MLA family (:data:`MLA_TYPES`) with a YaRN scheme that sets
    ``mscale_all_dim``, else 1."""
    sc = spec.scaling
    if model_type not in MLA_TYPES or not isinstance(sc, Yarn) or not sc.mscale_all_dim:
        return 1.0
    return mla_softmax_scale(1, sc.factor, sc.mscale_all_dim)
