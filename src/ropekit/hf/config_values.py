# SPDX-License-Identifier: MIT
"""A transformers config as a dict, and its values read and checked one by one.

- :func:`_as_dict`: a config object's ``to_dict()`` plus the attributes it leaves out (or a config.json dict);
- :func:`_head_dim`: ``qk_rope_head_dim``, ``head_dim``, the family's class default, or hidden size over heads
  (also under GPT-J's ``n_embd`` / ``n_head``);
- the value checks (finite numbers, bounds, positive integers, LongRoPE factor lists), strict or warning
  (:class:`_Reader`; a strict refusal that ``strict=False`` would accept is a :class:`StrictRefusal`), and the
  did-you-mean suggestions for misspelt keys.

Used by :mod:`ropekit.hf.config_keys` (the rope dict of one layer type), :mod:`ropekit.hf.config_top_keys` and
:mod:`ropekit.hf.config` (the RopeSpec).
"""

from __future__ import annotations

import difflib
import numbers
import warnings
from typing import Any

from ropekit.hf.class_defaults import DEFAULT_HEAD_DIM
from ropekit.integers import INT64_SPAN, as_int, as_real, past_float64, shown

__all__ = ["StrictRefusal"]


class StrictRefusal(ValueError):
    """A strict-mode refusal of what transformers accepts with a warning: ``strict=False`` (the CLI's
    ``--lenient``) reads the config, with that message as a warning."""


class _Reader:
    def __init__(self, strict: bool) -> None:
        self.strict = strict

    def problem(self, msg: str) -> None:
        if self.strict:
            raise StrictRefusal(msg)
        warnings.warn(f"{msg} (accepted because strict=False)", stacklevel=4)


#: set by _as_dict on a config *object*: transformers has standardized it already (no legacy aliases to apply)
_FROM_OBJECT = "__ropekit_from_config_object__"


def _as_dict(config: Any) -> dict[str, Any]:
    if isinstance(config, dict):
        return dict(config)
    if hasattr(config, "to_dict"):
        d = dict(config.to_dict())
        d[_FROM_OBJECT] = True
        for key in ("head_dim", "rope_parameters", "max_position_embeddings", "model_type"):
            if key not in d and getattr(config, key, None) is not None:
                d[key] = getattr(config, key)
        return d
    raise TypeError(
        f"config must be a transformers config or a config.json dict, got {type(config).__name__}"
    )


def _pos_int(v: Any, name: str) -> int:
    """``v`` as a positive integer, or ValueError naming ``name`` and the value.

    Ints only (numpy integers too, bool refused): transformers 5.23's config classes are strict dataclasses whose
    ``head_dim`` / ``max_position_embeddings`` / ``qk_rope_head_dim`` fields refuse a float, even 4096.0, and a str.
    """
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        kind = "null" if v is None else f"a {type(v).__name__}"
        if isinstance(v, numbers.Integral) and not isinstance(v, bool):
            kind = f"{v} (< 1)"
        raise ValueError(
            f"config {name}={v!r} must be a positive integer, got {kind}"
            + (
                " (transformers' config classes refuse a float here too; write it as an int)"
                if isinstance(v, float)
                else ""
            )
        )
    return int(v)


def _max_positions(cfg: dict[str, Any]) -> int | None:
    """The config's ``max_position_embeddings`` (None when absent or null), checked as :func:`_pos_int` does."""
    v = cfg.get("max_position_embeddings")
    return None if v is None else _pos_int(v, "max_position_embeddings")


#: GPT-2-style names of the config keys the head dim is read from (GPT-J and CodeGen configs, their config.json
#: and their config objects' ``to_dict()``, spell them this way; transformers maps them with ``attribute_map``)
_LEGACY_NAMES = {"hidden_size": "n_embd", "num_attention_heads": "n_head"}


def _config_int(cfg: dict[str, Any], key: str) -> tuple[str, int] | None:
    """(the name the config uses, its value) for ``key`` or its GPT-2-style name; None when neither is set."""
    for name in (key, _LEGACY_NAMES.get(key)):
        if name is not None and cfg.get(name) is not None:
            return name, _pos_int(cfg[name], name)
    return None


def _head_dim(cfg: dict[str, Any]) -> int:
    for key in ("qk_rope_head_dim", "head_dim"):
        if cfg.get(key) is not None:
            return _pos_int(cfg[key], key)
    fixed = DEFAULT_HEAD_DIM.get(str(cfg.get("model_type")))
    if (
        fixed is not None and "head_dim" not in cfg
    ):  # transformers' class default (an explicit null computes it)
        return fixed
    hidden, heads = _config_int(cfg, "hidden_size"), _config_int(cfg, "num_attention_heads")
    if hidden is None or heads is None:
        raise ValueError(
            "config needs head_dim (or hidden_size and num_attention_heads, n_embd and n_head in GPT-J-style "
            "configs) to know the head dimension"
        )
    if hidden[1] % heads[1]:
        raise ValueError(
            f"config {hidden[0]}={hidden[1]} is not divisible by {heads[0]}={heads[1]}, so the head dimension is "
            "not their quotient; set head_dim"
        )
    return hidden[1] // heads[1]


def _did_you_mean(unknown: list[str], known: set[str]) -> str:
    close = {u: m[0] for u in unknown if (m := difflib.get_close_matches(u, sorted(known), n=1, cutoff=0.75))}
    return f" (did you mean {', '.join(f'{m!r} for {u!r}' for u, m in close.items())}?)" if close else ""


def _unknown_note(unknown: list[str], known: set[str]) -> str:
    return f"; unknown keys {unknown}{_did_you_mean(unknown, known)}" if unknown else ""


def _num(
    r: _Reader, rp: dict[str, Any], key: str, *, lo: float | None = None, lo_open: bool = False
) -> float:
    v = rp[key]
    if v is None:
        raise ValueError(f"rope parameter {key} is null; expected a finite number")
    x = as_real(v)  # numpy scalars too (a config built from arrays); a bool or an int past float64 is refused
    if x is None:
        raise ValueError(f"rope parameter {key} must be a finite number{past_float64(v)}, got {shown(v)}")
    if lo is not None and (x <= lo if lo_open else x < lo):
        r.problem(f"rope parameter {key}={shown(v)} must be {'>' if lo_open else '>='} {lo:g}")
    return x


def _int(rp: dict[str, Any], key: str) -> int:
    v = rp[key]
    if v is None:
        raise ValueError(f"rope parameter {key} is null; expected a positive integer")
    n = as_int(v)
    if n is None:  # an integral float (8192.0) is an integer here, as transformers reads it
        x = as_real(v)
        n = int(x) if x is not None and x.is_integer() else None
    if n is None or n < 1:
        raise ValueError(f"rope parameter {key} must be a positive integer, got {shown(v)}")
    if n > INT64_SPAN:
        raise ValueError(
            f"rope parameter {key} must be a positive integer of at most 2**63 (a context length: positions "
            f"are int64), got {shown(v)}"
        )
    return n


def _factors(rp: dict[str, Any], key: str) -> tuple[float, ...]:
    """LongRoPE's ``short_factor`` / ``long_factor``: a list of finite numbers (its length is checked later)."""
    v = rp[key]
    vals = [as_real(x) for x in v] if isinstance(v, (list, tuple)) else [None]
    if any(x is None for x in vals):
        raise ValueError(f"rope parameter {key} must be a list of finite numbers, got {shown(v, 400)}")
    return tuple(x for x in vals if x is not None)
