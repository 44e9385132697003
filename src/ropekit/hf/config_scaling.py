# SPDX-License-Identifier: MIT
"""The scaling scheme of one merged rope dict (:func:`ropekit.hf.config.spec_from_hf`): a ropekit
:class:`~ropekit.scaling.Scaling` for each transformers ``rope_type`` (linear, proportional, ntk, ntk_alpha,
dynamic, yarn, longrope, llama3), with transformers' defaults, strict range checks (``strict=False``: warnings)
and the values no frequency table comes from refused in both modes, naming the key.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from ropekit.hf.config_families import LONGROPE_MSCALE_TYPES
from ropekit.hf.config_rules import refuse
from ropekit.hf.config_values import _factors, _int, _max_positions, _num, _Reader
from ropekit.integers import as_real
from ropekit.scaling import NTK, DynamicNTK, Linear, Llama3, LongRope, Scaling, Yarn
from ropekit.scaling.base import unchecked

__all__: list[str] = []

#: MLA families, whose YaRN ``mscale == mscale_all_dim`` is right (no warning)
_MLA_TYPES = {"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe_lite", "mistral4"}


def _computable(rp: dict[str, Any], key: str, bad: Callable[[float], bool], why: str) -> None:
    """Refuse (both modes) a number ``rp[key]`` for which ``bad`` holds: no frequency table comes from it."""
    v = rp.get(key)
    x = as_real(v)  # numpy scalars too; anything else is refused by name later
    refuse(not (x is not None and bad(x)), key, v, why)


_INF = "it divides the frequencies by zero (infinite frequencies); expected a number >= 1"


def _scaling(r: _Reader, t: str, rp: dict[str, Any], cfg: dict[str, Any], model_type: str) -> Scaling | None:
    def mk(cls: type[Scaling], **kw: Any) -> Scaling:
        return cls(**kw) if r.strict else unchecked(cls, **kw)

    max_pos = _max_positions(cfg)
    if t in ("linear", "proportional", "yarn", "llama3"):
        _computable(rp, "factor", lambda v: v == 0, _INF)
    if t in ("default", "proportional"):
        if t == "proportional" and "factor" in rp:  # Linear(1.0) too: from_hf(spec.to_hf()) == spec
            return mk(Linear, factor=_num(r, rp, "factor", lo=1.0))
        return None
    if t == "linear":
        return mk(Linear, factor=_num(r, rp, "factor", lo=1.0))
    if t in ("ntk", "ntk_alpha"):
        key = "factor" if t == "ntk" else "alpha"
        why = f"the base is multiplied by {key} ** (d / (d - 2)), 0 or not a real number; expected a number >= 1"
        _computable(rp, key, lambda v: v <= 0, why)
    if t == "ntk":
        return mk(NTK, factor=_num(r, rp, "factor", lo=1.0))
    if t == "ntk_alpha":
        if rp.get("factor", 1.0) != 1.0:
            r.problem(
                f"rope parameter factor={rp['factor']!r} beside alpha is ignored by transformers; expected 1.0"
            )
        return mk(NTK, alpha=_num(r, rp, "alpha", lo=1.0))
    if t == "dynamic":
        if max_pos is None:
            raise ValueError("rope_type 'dynamic' needs the config's max_position_embeddings")
        why = "the base is multiplied by (factor * L / max - factor + 1) ** (d / (d - 2)), not a real number past "
        _computable(
            rp, "factor", lambda v: v < 0, why + "a length where it is negative; expected a number >= 1"
        )
        return mk(DynamicNTK, factor=_num(r, rp, "factor", lo=1.0), max_position_embeddings=max_pos)
    if t == "yarn":
        L0 = _int(rp, "original_max_position_embeddings")
        if rp["factor"] is None:  # transformers: max_position_embeddings / original_max_position_embeddings
            if max_pos is None:
                raise ValueError(
                    "rope parameter factor is null (rope_type 'yarn') and the config has no "
                    "max_position_embeddings to derive it from; expected a number"
                )
            r.problem(
                f"rope parameter factor is null (rope_type 'yarn'); transformers then uses max_position_embeddings"
                f" / original_max_position_embeddings = {max_pos}/{L0}"
            )
            rp = {**rp, "factor": max_pos / L0}
        factor = _num(r, rp, "factor", lo=1.0)
        betas = {}
        for key, default in (("beta_fast", 32.0), ("beta_slow", 1.0)):
            why = "YaRN takes the log of L0 / (2 pi beta) (transformers fails too); expected a number > 0"
            _computable(rp, key, lambda v: v < 0, why)
            v = rp.get(key)
            if v is not None:
                v = _num(r, rp, key)
                if v == 0:
                    r.problem(f"rope parameter {key}=0 is invalid (transformers silently uses {default:g})")
                    v = default
            betas[key] = default if v is None else v
        if betas["beta_fast"] < betas["beta_slow"]:
            r.problem(
                f"rope parameter beta_fast={betas['beta_fast']!r} must be >= beta_slow={betas['beta_slow']!r}"
            )
        if max_pos is not None and max_pos / L0 not in (factor, 1.0):
            warnings.warn(
                f"yarn factor {factor:g} differs from max_position_embeddings / original_max_position_embeddings = "
                f"{max_pos}/{L0}; using the explicit factor",
                stacklevel=4,
            )
        kw: dict[str, Any] = dict(factor=factor, original_max_position_embeddings=L0, **betas)
        for key in ("mscale", "mscale_all_dim"):
            if rp.get(key) is not None:
                kw[key] = _num(r, rp, key, lo=0.0)
        if rp.get("attention_factor") is not None:
            kw["attention_factor_"] = _num(r, rp, "attention_factor", lo=0.0, lo_open=True)
        if "truncate" in rp:
            if not isinstance(rp["truncate"], bool):
                raise ValueError(f"rope parameter truncate must be true or false, got {rp['truncate']!r}")
            kw["truncate"] = rp["truncate"]
        with warnings.catch_warnings():
            if model_type in _MLA_TYPES:  # mscale == mscale_all_dim is right for MLA attention
                warnings.simplefilter("ignore")
            return mk(Yarn, **kw)
    if t == "longrope":
        for key in ("short_factor", "long_factor"):
            vals = _factors(rp, key)
            if 0 in vals:
                raise ValueError(
                    f"rope parameter {key} has a zero entry (index {vals.index(0)} of {len(vals)}), which divides "
                    "its band's frequency by zero (an infinite frequency); expected numbers > 0"
                )
            bad = [(i, x) for i, x in enumerate(vals) if x < 0]
            if bad:
                r.problem(
                    f"rope parameter {key} has {len(bad)} entries < 0 (index {bad[0][0]}: {bad[0][1]!r}) of "
                    f"{len(vals)}; expected numbers > 0"
                )
        kw = {
            "short_factor": _factors(rp, "short_factor"),
            "long_factor": _factors(rp, "long_factor"),
            "original_max_position_embeddings": _int(rp, "original_max_position_embeddings"),
            "max_position_embeddings": max_pos,
        }
        if rp.get("factor") is not None:
            kw["factor"] = _num(r, rp, "factor", lo=1.0)
        if rp.get("attention_factor") is not None:
            kw["attention_factor_"] = _num(r, rp, "attention_factor", lo=0.0, lo_open=True)
        if model_type in LONGROPE_MSCALE_TYPES:
            _longrope_mscales(r, rp, kw, model_type)
        return LongRope(**kw) if r.strict else unchecked(LongRope, **kw)
    if t == "llama3":
        L0 = _int(rp, "original_max_position_embeddings")
        if max_pos is not None and L0 >= max_pos:
            r.problem(
                f"llama3 original_max_position_embeddings={L0} must be < max_position_embeddings={max_pos} (the "
                "context the scaling extends to); transformers only warns, and its llama3 frequencies do not read "
                "max_position_embeddings, so strict=False reads the same RoPE. Set max_position_embeddings to the "
                "extended context"
            )
        for key in ("low_freq_factor", "high_freq_factor"):
            why = (
                "llama3 divides original_max_position_embeddings by it (transformers fails too); expected > 0"
            )
            _computable(rp, key, lambda v: v == 0, why)
        lo, hi = (
            _num(r, rp, "low_freq_factor", lo=0, lo_open=True),
            _num(r, rp, "high_freq_factor", lo=0, lo_open=True),
        )
        if hi <= lo:
            r.problem(f"llama3 high_freq_factor={hi!r} must be > low_freq_factor={lo!r}")
        return mk(
            Llama3,
            factor=_num(r, rp, "factor", lo=1.0),
            low_freq_factor=lo,
            high_freq_factor=hi,
            original_max_position_embeddings=L0,
        )
    raise AssertionError(t)  # pragma: no cover - unknown types are refused earlier


def _longrope_mscales(r: _Reader, rp: dict[str, Any], kw: dict[str, Any], model_type: str) -> None:
    """Phi-MoE's ``short_mscale`` / ``long_mscale`` as the LongRope attention factor (``kw["attention_factor_"]``).

    Its rotary module multiplies cos and sin by ``short_mscale`` for lengths up to L0 and by ``long_mscale`` past
    it, in place of the attention factor (an ``attention_factor`` key is then not read); Phi-3.5-MoE ships both
    equal (1.2432; the formula sqrt(1 + ln s / ln L0) gives 1.1902 there). One missing falls back to the
    attention factor, as Phi-3.5-MoE's reference code does. ropekit's LongRope has one attention factor, so two
    different values are a problem (strict: refused; ``strict=False``: a warning, and ``short_mscale``).
    """
    given = {
        k: _num(r, rp, k, lo=0.0, lo_open=True)
        for k in ("short_mscale", "long_mscale")
        if rp.get(k) is not None
    }
    if not given:
        return
    formula: float | None = None
    if len(given) < 2:  # the other one falls back to the attention factor
        try:
            formula = unchecked(LongRope, **kw).attention_factor
        except (
            TypeError,
            ValueError,
            ZeroDivisionError,
            OverflowError,
        ):  # LongRope's own check names the key
            return
    short, long = given.get("short_mscale", formula), given.get("long_mscale", formula)
    if short != long:
        r.problem(
            f"rope parameters short_mscale={short!r} and long_mscale={long!r} differ (a missing one is the attention "
            f"factor {formula!r}): model_type {model_type!r} multiplies cos and sin by short_mscale up to "
            "original_max_position_embeddings and by long_mscale past it, but a ropekit LongRope has one attention "
            "factor; short_mscale is used"
        )
    if (
        "attention_factor" in rp
        and rp["attention_factor"] is not None
        and kw.get("attention_factor_") != short
    ):
        r.problem(
            f"rope parameter attention_factor={rp['attention_factor']!r} is not read by model_type {model_type!r}, "
            f"whose cos and sin are multiplied by short_mscale={short!r} instead; expected no attention_factor"
        )
    kw["attention_factor_"] = short
