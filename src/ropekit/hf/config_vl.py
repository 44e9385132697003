# SPDX-License-Identifier: MIT
"""Vision-language configs -> multi-axis RopeSpec and back (Qwen2-VL, Qwen2.5-VL, Qwen3-VL(-MoE), GLM-4V(-MoE),
ERNIE-4.5-VL; v4 and v5 schemas; the text part nested under ``text_config`` or at the top level).

The text decoder's RoPE keys are those of a 1-D config plus ``mrope_section`` (and ``mrope_interleaved``): they
are read by the 1-D parser (:func:`ropekit.hf.config.spec_from_hf`) after removing the M-RoPE keys (and the v4
``"type": "mrope"``, which transformers maps to ``default``), and the band-to-axis map is attached from the family
(``shared/reference/multiaxis.md`` sections 2, 4, 6, 7):

| family (model_type) | map | layout | default sections (as transformers' code) |
|---|---|---|---|
| qwen2_vl, qwen2_5_vl | contiguous | half | [16, 24, 24] |
| qwen3_vl, qwen3_vl_moe | interleaved (THW cycle) | half | [24, 20, 20] |
| glm4v | contiguous over the rotary part | interleaved | [8, 12, 12] |
| glm4v_moe | contiguous over the rotary part | half | [8, 12, 12] |
| ernie4_5_vl_moe | h/w alternate, t on the lowest freqs ("lta"), config order (h, w, t) | interleaved | [22, 22, 20] |

``mrope_interleaved``: no family's transformers 5.23 code reads it (:data:`MROPE_MAPS`): each builds its own map
whatever the key says. A value that contradicts the family's map (``true`` for Qwen2-VL / GLM-4V, ``false`` for
Qwen3-VL, either for ERNIE) is ignored as there, with a warning naming the key, its value and the model_type;
a config of no known family (``mrope_section`` without a VL ``model_type``) follows the key.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Literal

from ropekit.axes import AxisMap
from ropekit.hf.config_vl_ernie import _freq_allocation, ernie_sections
from ropekit.spec import RopeSpec

__all__ = [
    "DEFAULT_THETA",
    "MROPE_MAPS",
    "VL_FAMILIES",
    "ernie_sections",
    "is_vl_config",
    "spec_from_hf_vl",
    "spec_to_hf_vl",
]

#: model_type (outer or text) -> (family, layout, default mrope_section)
VL_FAMILIES: dict[str, tuple[str, str, tuple[int, int, int]]] = {
    "qwen2_vl": ("qwen2_vl", "half", (16, 24, 24)),
    "qwen2_5_vl": ("qwen2_vl", "half", (16, 24, 24)),
    "qwen3_vl": ("qwen3_vl", "half", (24, 20, 20)),
    "qwen3_vl_moe": ("qwen3_vl", "half", (24, 20, 20)),
    "glm4v": ("glm4v", "interleaved", (8, 12, 12)),
    "glm4v_moe": ("glm4v", "half", (8, 12, 12)),  # GLM-4.5V: half split (rotate_half), unlike GLM-4V's pairs
    "ernie4_5_vl_moe": ("ernie", "interleaved", (22, 22, 20)),
    "ernie4_5_moe_vl": ("ernie", "interleaved", (22, 22, 20)),  # Baidu's remote-code config.json (flat)
}
#: family -> (the band-to-axis map its transformers 5.23 rotary code builds, whether that code reads the config's
#: ``mrope_interleaved``). None reads it: Qwen2-VL / Qwen2.5-VL / GLM-4V(-MoE) always split contiguously
#: (``freq.split(mrope_section)``), Qwen3-VL(-MoE) always interleaves (``recomposition_frequencies``), ERNIE-4.5-VL
#: always alternates h / w with t last; the key is only exempted from their rope validation
#: (``ignore_keys_at_rope_validation``). A family whose code reads it follows the key, as configs of no family do.
MROPE_MAPS: dict[str, tuple[str, bool]] = {
    "qwen2_vl": ("contiguous", False),
    "qwen3_vl": ("interleaved", False),
    "glm4v": ("contiguous", False),
    "ernie": ("lta", False),
}
#: the ``mrope_interleaved`` value that means each map (none means ERNIE's)
_INTERLEAVED_VALUE = {"contiguous": False, "interleaved": True}
_MROPE_KEYS = ("mrope_section", "mrope_interleaved", "freq_allocation")
#: family -> transformers' default rope_theta when a config omits it: (v4 class default, v5 class default).
#: The schema tells the version: ``rope_scaling`` (v4) or ``rope_parameters`` (v5). Qwen3-VL's default changed
#: (v4.57 ``Qwen3VLTextConfig(rope_theta=5000000.0)``, v5 500000); ERNIE-4.5-VL has no v4 class.
DEFAULT_THETA: dict[str, tuple[float, float]] = {
    "qwen2_vl": (1_000_000.0, 1_000_000.0),
    "qwen3_vl": (5_000_000.0, 500_000.0),
    "glm4v": (10_000.0, 10_000.0),
    "ernie": (500_000.0, 500_000.0),
}


def _family(model_type: str) -> str | None:
    mt = model_type.removesuffix("_text")
    return mt if mt in VL_FAMILIES else None


def _rope_key(cfg: dict[str, Any], *, warn: bool = False) -> str:
    """Which of ``rope_parameters`` / ``rope_scaling`` holds the config's RoPE, by the rule 1-D configs are read
    with (:func:`ropekit.hf.config_keys._rope_parameters`: transformers' ``rope_scaling or rope_parameters``; a
    config object's ``rope_parameters`` is already merged). ``warn``: say so when both are given and differ."""
    from ropekit.hf.config_keys import _rope_parameters

    with warnings.catch_warnings():
        if not warn:
            warnings.simplefilter("ignore")
        chosen = _rope_parameters(cfg, str(cfg.get("model_type") or ""))
    rp = cfg.get("rope_parameters")
    return "rope_parameters" if chosen is not None and chosen is rp else "rope_scaling"


def _rope_of(cfg: dict[str, Any]) -> dict[str, Any]:
    rp = cfg.get(_rope_key(cfg))
    return rp if isinstance(rp, dict) else {}


def is_vl_config(cfg: dict[str, Any]) -> bool:
    """True for a VL family's config (outer or text part) or any config whose rope dict has ``mrope_section``."""
    if _family(str(cfg.get("model_type") or "")) is not None:
        return True
    tc = cfg.get("text_config")
    if isinstance(tc, dict) and (
        _family(str(tc.get("model_type") or "")) or any(k in _rope_of(tc) for k in _MROPE_KEYS)
    ):
        return True
    rp = _rope_of(cfg)
    if "freq_allocation" in cfg or (isinstance(tc, dict) and "freq_allocation" in tc):
        return True  # ERNIE-4.5-VL's band split (:func:`ernie_sections`)
    return any(k in rp for k in _MROPE_KEYS) or rp.get("type") == "mrope" or rp.get("rope_type") == "mrope"


def _text_part(cfg: dict[str, Any]) -> tuple[dict[str, Any], str]:
    outer = str(cfg.get("model_type") or "")
    tc = cfg.get("text_config")
    if isinstance(tc, dict):
        text = dict(tc)
        if hasattr(tc, "to_dict"):  # pragma: no cover - config objects are converted by the caller
            text = dict(tc.to_dict())
        model_type = str(text.get("model_type") or outer)
        if _family(model_type) is None and _family(outer) is not None:
            model_type = outer
        return text, model_type
    return dict(cfg), outer


def spec_from_hf_vl(
    cfg: dict[str, Any], *, strict: bool = True, layout: str | None = None, problem: Any = None
) -> RopeSpec:
    """Build the text decoder's multi-axis spec from a VL config dict (see the module docstring).

    Raises:
        ValueError: naming the key: ``mrope_section`` with a wrong length or a sum other than rotary_dim / 2,
            ``mrope_interleaved`` that is not a bool, ``freq_allocation`` outside ERNIE (strict), ``layer_type``
            (VL decoders have one RoPE).

    Warns:
        UserWarning: ``mrope_interleaved`` contradicting the family's map, which transformers' code for the family
            does not read (ignored, as there: :data:`MROPE_MAPS`).
    """
    from ropekit.hf.config import spec_from_hf

    text, model_type = _text_part(cfg)
    fam_key = _family(model_type)
    family, fam_layout, default_sec = VL_FAMILIES[fam_key] if fam_key else ("generic", "half", None)
    key = _rope_key(text, warn=True)
    rp = dict(_rope_of(text))
    sec_raw = rp.pop("mrope_section", None)
    interleaved = rp.pop("mrope_interleaved", None)
    fa = _freq_allocation(text, rp, key)
    if fa is not None and family == "generic":  # only ERNIE-4.5-VL has this key
        family, fam_layout, default_sec = VL_FAMILIES["ernie4_5_vl_moe"]
    elif fa is not None and family != "ernie":
        msg = (
            f"freq_allocation={fa!r} is ERNIE-4.5-VL's band split, but model_type={model_type!r} does not read it "
            "(transformers ignores it for this family)"
        )
        if strict:
            raise ValueError(msg)
        if problem is not None:
            problem(msg)
        fa = None
    for k in ("type", "rope_type"):
        if (
            rp.get(k) == "mrope"
        ):  # v4 Qwen2-VL: {"type": "mrope", ...} means default RoPE with M-RoPE sections
            rp[k] = "default"
    if sec_raw is None and fa is None:
        if default_sec is None:
            raise ValueError(
                f"config {key} has no mrope_section and model_type={model_type!r} has no default"
            )
        sec_raw = default_sec
    clean = {
        k: v
        for k, v in text.items()
        if k not in ("rope_parameters", "rope_scaling", "text_config", "vision_config", "freq_allocation")
    }
    clean["model_type"] = ""  # the family's layout is set below, not by the 1-D table
    clean[key] = rp
    if rp.get("rope_theta") is None and text.get("rope_theta") is None and family in DEFAULT_THETA:
        clean["rope_theta"] = DEFAULT_THETA[family][
            0 if key == "rope_scaling" else 1
        ]  # transformers' default
    base_spec = spec_from_hf(clean, strict=strict, layout=layout or fam_layout)
    if fa is not None:
        from_fa = ernie_sections(fa, base_spec.n_bands)
        if sec_raw is not None and not (
            isinstance(sec_raw, (list, tuple)) and list(sec_raw) == list(from_fa)
        ):
            raise ValueError(
                f"{key}.mrope_section={sec_raw!r} contradicts freq_allocation={fa} (ERNIE-4.5-VL: "
                f"mrope_section = [h, w, t] = {list(from_fa)} for {base_spec.n_bands} bands); give one of them, or "
                "make them agree"
            )
        sec_raw = from_fa
    try:
        sec = tuple(int(s) for s in sec_raw)
        ok = len(sec) == 3 and all(s >= 0 and s == v for s, v in zip(sec, sec_raw))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{key}.mrope_section must be three non-negative ints, got {sec_raw!r}")
    if interleaved is not None and not isinstance(interleaved, bool):
        raise ValueError(f"{key}.mrope_interleaved must be a bool, got {interleaved!r}")
    scheme = _mrope_scheme(family, model_type, key, interleaved)
    if scheme == "lta":
        h, w, t = sec
        axes = AxisMap.lta((t, h, w))
    elif scheme == "interleaved":
        axes = AxisMap.interleaved(sec)
    else:
        axes = AxisMap.contiguous(sec)
    if sum(sec) != base_spec.n_bands:
        raise ValueError(
            f"{key}.mrope_section={list(sec_raw)} sums to {sum(sec)} but the rotary dim {base_spec.rotary_dim} has "
            f"{base_spec.n_bands} bands (head_dim={base_spec.head_dim}); the sections must sum to rotary_dim / 2"
        )
    return dataclasses.replace(base_spec, axes=axes)


def _mrope_scheme(family: str, model_type: str, key: str, interleaved: bool | None) -> str:
    """The map the family's transformers code builds (:data:`MROPE_MAPS`), with a warning when the config's
    ``mrope_interleaved`` says otherwise; the key's own map for a family whose code reads it (or no family)."""
    scheme, reads = MROPE_MAPS.get(family, (None, True))
    if scheme is None or reads:
        if interleaved is None:
            return scheme or "contiguous"
        return "interleaved" if interleaved else "contiguous"
    if interleaved is not None and _INTERLEAVED_VALUE.get(scheme) is not interleaved:
        warnings.warn(
            f"{key}.mrope_interleaved={interleaved!r} is ignored for model_type={model_type!r}: transformers' code "
            f"for this family does not read it and always builds its {scheme} M-RoPE map; ropekit does the same",
            UserWarning,
            stacklevel=5,
        )
    return scheme


def spec_to_hf_vl(spec: RopeSpec, schema: Literal["v5", "v4"] = "v5") -> dict[str, Any]:
    """The text-config fragment of a multi-axis spec: 1-D keys plus ``mrope_section`` (``mrope_interleaved``).

    ``schema="v5"`` puts them in ``rope_parameters``; ``schema="v4"`` in ``rope_scaling`` beside the top-level
    ``rope_theta`` (:func:`ropekit.hf.config.spec_to_hf`), in the form transformers 4.x re-saved each family:
    contiguous maps (Qwen2-VL, Qwen2.5-VL, GLM-4V) as ``{"type": "default", "rope_type": "default",
    "mrope_section": [...]}`` (v4 turned the hub's ``"type": "mrope"`` into ``default`` and copied it to
    ``rope_type``); interleaved maps (Qwen3-VL) as ``{"rope_type": "default", "mrope_section": [...],
    "mrope_interleaved": true}``.

    The family (layout, ERNIE's section order) is not part of the fragment: pass ``model_type`` (or ``layout=``)
    back to ``from_hf``. ERNIE-style ("lta") maps are written in ERNIE's (h, w, t) order and also as ERNIE's own
    top-level ``freq_allocation`` (the time bands; what ERNIE's remote code, vLLM and SGLang read -- they ignore
    ``mrope_section``). transformers 4 had no ERNIE-4.5-VL class: the v4 fragment is the remote-code era form
    (top-level ``rope_theta`` and ``freq_allocation``) with the sections in ``rope_scaling`` too, which transformers
    5 reads when it loads such a file.

    Raises:
        ValueError: for maps transformers cannot express (explicit maps, axes other than (t, h, w)).
    """
    from ropekit.hf.config import spec_to_hf

    axes = spec.axes
    assert axes is not None
    if axes.names != ("t", "h", "w") or axes.scheme == "explicit":
        raise ValueError(
            f"RopeSpec.axes={axes!r} has no transformers mrope_section equivalent (needs a t, h, w contiguous, "
            "interleaved or ERNIE-style map)"
        )
    out = spec_to_hf(dataclasses.replace(spec, axes=None), schema=schema)
    if schema == "v4":
        rp = dict(out["rope_scaling"] or {"rope_type": "default"})
        if axes.scheme == "contiguous":  # the re-saved Qwen2-VL / GLM-4V form: type copied to rope_type
            t = rp.pop("type", None) or rp.pop("rope_type")
            rp = {"type": t, "rope_type": t, **{k: v for k, v in rp.items() if k != "rope_type"}}
        out["rope_scaling"] = rp
    else:
        rp = out["rope_parameters"]
    if axes.scheme == "lta":
        t, h, w = axes.sections
        rp["mrope_section"] = [h, w, t]
        out["freq_allocation"] = t
    else:
        rp["mrope_section"] = list(axes.sections)
        if axes.scheme == "interleaved":
            rp["mrope_interleaved"] = True
    return out
