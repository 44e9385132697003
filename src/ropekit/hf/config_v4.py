# SPDX-License-Identifier: MIT
"""The transformers v4 config schema: writing a 1-D spec as a v4 fragment (top-level ``rope_theta``,
``rope_scaling``, ``partial_rotary_factor``), as transformers 4.x configs carried it. Reading v4 is
:func:`ropekit.hf.config.spec_from_hf`'s (both schemas); multi-axis specs are :mod:`ropekit.hf.config_vl`'s.
"""

from __future__ import annotations

from typing import Any

from ropekit.hf.partial_factor import _hf_partial_factor
from ropekit.scaling import DynamicNTK, LongRope
from ropekit.spec import RopeSpec

__all__ = ["check_schema", "spec_to_hf_v4"]


def check_schema(schema: object) -> None:
    """Refuse a schema other than transformers' "v5" and "v4", naming it."""
    if schema not in ("v5", "v4"):
        raise ValueError(f"schema={schema!r} is not a transformers config schema; expected 'v5' or 'v4'")


def spec_to_hf_v4(spec: RopeSpec) -> dict[str, Any]:
    """The transformers v4 fragment (see :func:`ropekit.hf.config.spec_to_hf`); explicit freqs and axes are handled by the caller."""
    sc = spec.scaling
    if spec.p < 1.0:
        raise ValueError(
            f"RopeSpec.p={spec.p!r} (p-RoPE, HF 'proportional') has no transformers v4 form: v4 had no such "
            "rope type; use schema='v5'"
        )
    out: dict[str, Any] = {"head_dim": spec.head_dim, "rope_theta": spec.base, "rope_scaling": None}
    if spec.rotary_dim != spec.head_dim:
        # one transformers' int(head_dim * factor) maps back to rotary_dim (rotary_dim / head_dim may floor below)
        out["partial_rotary_factor"] = _hf_partial_factor(spec.head_dim, spec.rotary_dim)  # type: ignore[arg-type]
    if sc is None:
        return out
    rs = sc.to_hf()
    if rs["rope_type"] in ("ntk", "ntk_alpha"):
        raise ValueError(
            f"scaling={sc!r} (static NTK, HF {rs['rope_type']!r}) has no transformers v4 rope_scaling form; "
            "use schema='v5'"
        )
    if isinstance(sc, DynamicNTK):
        out["max_position_embeddings"] = sc.max_position_embeddings
    if isinstance(sc, LongRope):
        L0, M = sc.original_max_position_embeddings, sc.max_position_embeddings
        # v4 takes the original length from the top level and then s = max_position_embeddings / L0, ignoring
        # rope_scaling's factor; s only sets the default attention factor.
        if sc.factor is not None and sc.attention_factor_ is None and (M is None or M / L0 != sc.factor):
            raise ValueError(
                f"LongRope(factor={sc.factor!r}, max_position_embeddings={M!r}, original_max_position_embeddings="
                f"{L0}) has no transformers v4 form: v4 derives the factor as max_position_embeddings / "
                "original_max_position_embeddings; set max_position_embeddings to factor * L0 or an "
                "attention_factor_, or use schema='v5'"
            )
        del rs["original_max_position_embeddings"], rs["rope_type"]
        rs = {"type": "longrope", **rs}
        out["original_max_position_embeddings"] = L0
        if M is not None:
            out["max_position_embeddings"] = M
    out["rope_scaling"] = rs
    return out
