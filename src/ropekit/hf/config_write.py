# SPDX-License-Identifier: MIT
"""A 1-D RopeSpec written back as a transformers config fragment (:func:`spec_to_hf`, ``RopeSpec.to_hf``): v5
``rope_parameters`` here, v4 ``rope_scaling`` in :mod:`ropekit.hf.config_v4`, multi-axis specs in
:mod:`ropekit.hf.config_vl`. Reading configs is :mod:`ropekit.hf.config`'s.
"""

from __future__ import annotations

from typing import Any, Literal

from ropekit.hf.config_families import LONGROPE_MSCALE_TYPES
from ropekit.hf.config_v4 import check_schema, spec_to_hf_v4
from ropekit.hf.partial_factor import _hf_partial_factor, _hf_proportional_factor
from ropekit.scaling import DynamicNTK, Linear, LongRope
from ropekit.spec import RopeSpec

__all__ = ["spec_to_hf"]

L0 = "original_max_position_embeddings"


def spec_to_hf(
    spec: RopeSpec, schema: Literal["v5", "v4"] = "v5", *, model_type: str | None = None
) -> dict[str, Any]:
    """The config fragment of a spec in transformers' v5 (default) or v4 schema.

    - ``schema="v5"``: ``{"head_dim", "rope_parameters", ["max_position_embeddings"],
      ["original_max_position_embeddings"]}``. The original length of ``llama3`` / ``yarn`` / ``longrope`` is
      written in ``rope_parameters`` and also at the top level: transformers' ``standardize_rope_params`` takes a
      top-level ``original_max_position_embeddings`` over the rope dict's, and Phi-3's / Phi-4-multimodal's config
      classes always have one (a field, default 4096), so without it a fragment merged into such a config
      (``Phi3Config(**other, **fragment)``, ``config.update(fragment)``) would compute with 4096.
    - ``schema="v4"``: ``{"head_dim", "rope_theta", "rope_scaling", ["partial_rotary_factor"],
      ["max_position_embeddings"], ["original_max_position_embeddings"]}`` as transformers 4.x configs carry
      it: ``rope_scaling`` is None for plain RoPE, else the scheme's keys with ``rope_type``; LongRoPE is written
      as Phi-3's v4 config (``{"type": "longrope", "short_factor", "long_factor"}``, the original length at the
      top level, where v4 read it).

    The layout is a property of the model family, not of the config: pass ``layout=`` back to ``from_hf``.

    ``model_type`` (the config the fragment goes into) matters for the families whose keys differ:

    - Phi-MoE (``"phimoe"``, :data:`~ropekit.hf.config_families.LONGROPE_MSCALE_TYPES`): its rotary module multiplies
      cos and sin by ``short_mscale`` / ``long_mscale`` in place of the attention factor, and its config class
      refuses a non-default RoPE without them. A LongRoPE is written with both set to ``spec.attention_factor``
      (no ``attention_factor`` key), and in v4 with ``original_max_position_embeddings`` inside ``rope_scaling``
      too (Phi-MoE never reads the top-level one). Another scheme (or p-RoPE) is refused: ropekit reads Phi-MoE's
      mscales for LongRoPE only.

    Every other ``model_type`` (and None) writes the same fragment.

    Raises:
        ValueError: for a bad ``schema`` or ``model_type``; for specs transformers cannot express (explicit freqs;
            p-RoPE with partial rotation or with a scheme other than Linear; in v4 also any p-RoPE, static NTK, and
            LongRoPE whose factor differs from ``max_position_embeddings / original_max_position_embeddings``
            without an explicit attention factor; for Phi-MoE a scheme other than LongRoPE).
    """
    check_schema(schema)
    if model_type is not None and not isinstance(model_type, str):
        raise ValueError(
            f"model_type={model_type!r} must be a transformers model_type string (e.g. 'phimoe') or None"
        )
    if model_type in LONGROPE_MSCALE_TYPES:
        return phimoe_fragment(spec, schema, str(model_type))
    if spec.axes is not None:  # multi-axis (M-RoPE): ropekit.hf.config_vl
        from ropekit.hf.config_vl import spec_to_hf_vl

        return spec_to_hf_vl(spec, schema=schema)
    if spec.freqs is not None:
        raise ValueError("a spec with an explicit freqs table has no transformers rope_parameters equivalent")
    if schema == "v4":
        return spec_to_hf_v4(spec)
    rp: dict[str, Any] = {"rope_theta": spec.base}
    out: dict[str, Any] = {"head_dim": spec.head_dim}
    sc = spec.scaling
    if spec.p < 1.0:
        if spec.rotary_dim != spec.head_dim or not (sc is None or isinstance(sc, Linear)):
            raise ValueError(
                "p-RoPE maps to HF 'proportional' only over the whole head and with at most a Linear factor"
            )
        kept = spec.n_positional_bands  # a factor transformers' int(factor * H // 2) maps to the same bands
        rp.update(
            rope_type="proportional",
            partial_rotary_factor=_hf_proportional_factor(spec.head_dim, kept, spec.p),
        )
        if sc is not None:
            rp["factor"] = sc.factor
    else:
        rp.update(sc.to_hf() if sc is not None else {"rope_type": "default"})
        if spec.rotary_dim != spec.head_dim:
            # one transformers' int(head_dim * factor) maps back to rotary_dim (rotary_dim / head_dim may floor below)
            rp["partial_rotary_factor"] = _hf_partial_factor(spec.head_dim, spec.rotary_dim)  # type: ignore[arg-type]
    if isinstance(sc, DynamicNTK):
        out["max_position_embeddings"] = sc.max_position_embeddings
    if isinstance(sc, LongRope) and sc.max_position_embeddings is not None:
        out["max_position_embeddings"] = sc.max_position_embeddings
    if L0 in rp:  # llama3 / yarn / longrope: where transformers reads it first (see the docstring)
        out[L0] = rp[L0]
    out["rope_parameters"] = rp
    return out


def phimoe_fragment(spec: RopeSpec, schema: Literal["v5", "v4"], model_type: str) -> dict[str, Any]:
    """:func:`spec_to_hf` for Phi-MoE: LongRoPE with ``short_mscale = long_mscale = spec.attention_factor``."""
    sc = spec.scaling
    if spec.axes is not None or spec.p < 1.0 or not (sc is None or isinstance(sc, LongRope)):
        what = "a multi-axis spec" if spec.axes is not None else f"p={spec.p!r}" if spec.p < 1.0 else repr(sc)
        raise ValueError(
            f"model_type={model_type!r} with {what}: its rotary module multiplies cos and sin by short_mscale / "
            "long_mscale for every rope_type but 'default' (its config class refuses the RoPE without them), and "
            "ropekit reads them for 'longrope' only; expected a LongRope scaling or none"
        )
    out = spec_to_hf(spec, schema=schema)
    if sc is None:
        return out
    rope = out["rope_parameters" if schema == "v5" else "rope_scaling"]
    rope.pop("attention_factor", None)  # not read by Phi-MoE: the mscales take its place
    rope["short_mscale"] = rope["long_mscale"] = spec.attention_factor
    rope[L0] = sc.original_max_position_embeddings  # v4 wrote it top-level only, which Phi-MoE does not read
    return out
