# SPDX-License-Identifier: MIT
"""transformers 5.23's rules for a few RoPE keys that are easy to get wrong, and the error wording of config reading.

- :func:`original_max`: where llama3 / yarn / longrope get ``original_max_position_embeddings`` (L0). transformers'
  ``standardize_rope_params`` (run again by every rope init function, so it is what the rotary module computes):
  flat rope parameters take a top-level L0 over the rope dict's (``hasattr(config, ...)``: a null too, and the
  field default of Phi-3's config class); without one, a missing L0 is ``max_position_embeddings``. Per-layer-type
  entries never read the top level: a missing L0 is ``max_position_embeddings``. Phi-MoE's config copies the rope
  dict's L0 over the top-level one, so there the top level is never read either.
- :func:`nested_truncate`: transformers' YaRN reads ``truncate`` from the outer ``rope_parameters`` dict
  (``config.rope_parameters.get("truncate", True)``), so a per-layer-type entry's own ``truncate`` is not used.
- :func:`refuse` / :func:`check_computable`: values no frequency table can come from (a zero factor: infinite
  frequencies), refused in both modes naming the key and value.
- :func:`config_errors`: a dataclass's error (``Yarn.beta_slow must be ...``) named by the config key and value.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ropekit.hf.config_families import NEOX_TYPES, ORIGINAL_MAX_DEFAULT, ORIGINAL_MAX_IGNORES_TOP
from ropekit.hf.config_values import StrictRefusal

if TYPE_CHECKING:
    from ropekit.hf.config_keys import _Reader
    from ropekit.spec import RopeSpec

__all__: list[str] = []

L0 = "original_max_position_embeddings"
#: rope types whose L0 transformers standardizes (modeling_rope_utils.standardize_rope_params)
L0_TYPES = ("llama3", "yarn", "longrope")


def original_max(
    rp: dict[str, Any],
    cfg: dict[str, Any],
    model_type: str,
    *,
    nested: bool,
    max_pos: int | None,
    r: _Reader,
) -> None:
    """Set ``rp``'s L0 as transformers' rotary module reads it (see the module docstring), in place.

    A top-level L0 that differs from the rope dict's warns in both modes, naming both (transformers takes one
    silently; the same convention as ``rope_parameters`` beside ``rope_scaling``); a missing L0 is filled from
    ``max_position_embeddings`` with ``strict=False`` (a warning) and left missing (refused) in strict mode.
    """
    t = rp["rope_type"]
    if t not in L0_TYPES:
        return
    reads_top = not nested and model_type not in ORIGINAL_MAX_IGNORES_TOP
    if reads_top and (L0 in cfg or model_type in ORIGINAL_MAX_DEFAULT):
        top = cfg.get(L0, ORIGINAL_MAX_DEFAULT.get(model_type))
        where = "config" if L0 in cfg else f"{model_type}'s config class default"
        if top is None:
            raise ValueError(
                f"config {L0} is null; transformers uses the top-level {L0} over the rope parameters' for "
                f"rope_type {t!r} and fails on a null; expected a positive integer (or leave the key out)"
            )
        if L0 in rp and rp[L0] != top:
            # what deleting the top-level key would do: the rope dict's value, or the class default (Phi-3)
            instead = ORIGINAL_MAX_DEFAULT.get(model_type, rp[L0])
            other = (
                f"deleting the top-level key makes it {instead!r}"
                if L0 in cfg
                else f"a top-level {L0}={rp[L0]!r} makes it that value"
            )
            warnings.warn(
                f"{where} {L0}={top!r} and rope parameter {L0}={rp[L0]!r} differ: transformers' "
                f"standardize_rope_params uses the top-level value for rope_type {t!r}, and so does ropekit. To "
                f"keep {top!r}, set the rope parameter to it; {other}",
                stacklevel=5,
            )
        rp[L0] = top
        return
    if L0 not in rp and max_pos is not None and not r.strict:
        r.problem(
            f"rope parameter {L0} is missing (rope_type {t!r}); transformers fills it with "
            f"max_position_embeddings={max_pos}, and so does ropekit"
        )
        rp[L0] = max_pos
    if L0 in rp and cfg.get(L0) is not None and cfg[L0] != rp[L0]:
        why = "per-layer-type rope parameters" if nested else f"model_type {model_type!r}"
        warnings.warn(
            f"config {L0}={cfg[L0]!r} is not read for {why} (transformers uses the rope parameters' "
            f"{L0}={rp.get(L0)!r}), and ropekit does not read it either",
            stacklevel=5,
        )


def _brief(v: Any) -> str:
    """A rope dict for a message: lists (LongRoPE's per-band factors) as their length, not their values; nested
    (per-layer-type) dicts likewise."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k!r}: {_brief(x)}" for k, x in v.items()) + "}"
    return f"<{len(v)} values>" if isinstance(v, (list, tuple)) else repr(v)


def replaced_note(rp: dict[str, Any], rs: dict[str, Any], cfg: dict[str, Any], model_type: str) -> str:
    """The warning for a config with both a flat ``rope_parameters`` and a non-empty ``rope_scaling`` that
    transformers' ``convert_rope_params_to_dict`` replaces it with (``rope_scaling or rope_parameters``): which one
    it computes with, where the base comes from then, and which key to delete to keep that RoPE."""
    theta = ""
    if "rope_theta" in rp and "rope_theta" not in rs:  # the base: top-level kwarg, else the class default
        top = "rotary_emb_base" if model_type in NEOX_TYPES else "rope_theta"
        src = f"the top-level {top}={cfg[top]!r}" if top in cfg else "the config class's default base"
        theta = f" (its rope_theta={rp['rope_theta']!r} included: the base is {src})"
    return (
        f"config has both rope_parameters={_brief(rp)} and rope_scaling={_brief(rs)}: transformers uses "
        f"rope_scaling and ignores rope_parameters{theta}, and so does ropekit. To keep this RoPE, delete "
        "rope_parameters (or move rope_scaling's keys into it); deleting rope_scaling instead changes the RoPE to "
        "rope_parameters'. A v4 fragment (RopeSpec.to_hf(schema='v4')) merged into a config with rope_parameters "
        "does this: write it with schema='v5'"
    )


def nested_truncate(rp: dict[str, Any], outer: dict[str, Any], layer_type: str, r: _Reader) -> None:
    """A per-layer-type YaRN entry's ``truncate`` as transformers 5.23 computes it: the outer dict's (default True).

    An entry whose own value differs is a problem (strict: refused; ``strict=False``: a warning, and the value
    transformers uses), as other transformers quirks (a zero YaRN beta).
    """
    if rp["rope_type"] != "yarn":
        return
    used, own = outer.get("truncate", True), rp.get("truncate", True)
    if not isinstance(used, bool) or not isinstance(own, bool) or used == own:
        return  # a non-bool entry value is refused by name later
    given = f"truncate={own!r}" if "truncate" in rp else "no truncate (True)"
    outer_note = f"truncate={used!r} there" if "truncate" in outer else f"no truncate there, so {used!r}"
    r.problem(
        f"rope parameter {given} in the {layer_type!r} entry is not what transformers uses: transformers 5.23's "
        f"YaRN reads truncate from the outer rope_parameters dict ({outer_note}), so its model computes with "
        f"truncate={used!r}; strict=False does the same"
    )
    rp["truncate"] = used


def refuse(ok: bool, key: str, value: Any, why: str) -> None:
    """Raise ValueError naming the rope parameter ``key`` and ``value`` unless ``ok`` (in both modes)."""
    if not ok:
        raise ValueError(f"rope parameter {key}={value!r} cannot be computed: {why}")


def check_computable(spec: RopeSpec, rp: dict[str, Any]) -> None:
    """Refuse a spec whose frequencies or attention factor are not finite numbers (lenient mode's last check)."""
    for seq_len in (None, 1 << 24):  # the long side of LongRoPE and dynamic NTK too
        try:
            f = spec.frequencies(seq_len)
            ok = bool(f.isfinite().all()) and math.isfinite(spec.attention_factor)
        except (ValueError, TypeError, ArithmeticError):
            ok = False
        if not ok:
            shown = {k: v for k, v in rp.items() if not isinstance(v, (list, tuple))}
            raise ValueError(
                f"rope parameters {shown} (rope_type {rp['rope_type']!r}) give frequencies or an attention factor "
                f"that are not finite numbers at seq_len={seq_len}; expected values inside the ranges strict "
                "mode checks (factors >= 1)"
            )


#: a dataclass's field -> the config key it is read from
_KEY_OF = {"base": "rope_theta", "rotary_dim": "partial_rotary_factor", "p": "partial_rotary_factor"}
_FIELD = re.compile(r"^(?:RopeSpec|Linear|NTK|DynamicNTK|Yarn|LongRope|Llama3)\.(\w+)")


@contextmanager
def config_errors(rp: dict[str, Any], cfg: dict[str, Any], note: str = "") -> Iterator[None]:
    """Re-raise a ValueError that names a dataclass field (``RopeSpec.base must be ...``) naming the config key and
    its value first; ``note`` (a legacy alias read) is appended to every ValueError."""
    try:
        yield
    except ValueError as e:
        msg = str(e)
        m = _FIELD.match(msg)
        if m is not None:
            key = _KEY_OF.get(m.group(1), m.group(1).rstrip("_"))
            src = rp if key in rp else cfg
            if key in src:
                v = src[key]
                shown = f"{key} ({len(v)} values)" if isinstance(v, (list, tuple)) else f"{key}={v!r}"
                msg = f"{'rope parameter' if src is rp else 'config'} {shown}: {msg}"
        if note:
            msg = f"{msg} ({note})"
        if msg == str(e):
            raise
        # a strict refusal stays one (strict=False, the CLI's --lenient, would read the config)
        raise (StrictRefusal if isinstance(e, StrictRefusal) else ValueError)(msg) from e
