# SPDX-License-Identifier: MIT
"""``ropekit.hf.patch(model)`` / ``unpatch(model)`` / ``with patched(model):`` -- transformers models on ropekit.

What changes, per patched model (see :mod:`ropekit.hf.families` for the table of families):

- each rotary module whose class a row of :data:`~ropekit.hf.families.FAMILIES` recognises has its class swapped
  for ``Ropekit<Original>`` (:mod:`ropekit.hf.rotary`): same object, same attributes and constructor, a forward
  that returns the same tables computed from ropekit's exact phases;
- the family's apply functions are wrapped once per modeling file (:mod:`ropekit.hf.apply`): tables from ropekit
  are rotated by ropekit's dispatch (the fused CPU kernel, Triton on CUDA); any other call goes to the original.

Before anything is modified every recognised module is verified on a probe: its replacement's tables must equal
the original module's (shape, dtype, values to 1e-5) and each wrapped apply function must give the original's
result from them. A family that fails, a refused row (rope on trailing channels, M-RoPE rotaries of families
ropekit does not know) or a config ropekit cannot express raises ``ValueError`` saying why, with the model
untouched. Rotary modules no row recognises are left alone, with a warning naming them.

Vision-language rotaries (:mod:`ropekit.hf.patch_vl`: the text M-RoPE of Qwen2-VL, Qwen2.5-VL, Qwen3-VL(-MoE),
GLM-4V, ERNIE-4.5-VL, their vision towers, Pixtral's and Llama 4's vision rotaries) are recognised module by
module too and *replaced* by ropekit modules (the originals are kept and put back by ``unpatch``); a VL text
rotary's apply function is wrapped like a 1-D family's, and so is each vision tower's
(:mod:`ropekit.hf.vision_apply`). So one call patches a LLaVA (Mistral text + Pixtral
vision), a Llama 4 (text + vision) or a Qwen2-VL (M-RoPE text + vision).

A model cast to float16 / bfloat16 rotates, in transformers, with its rounded ``inv_freq`` buffer; its replacement
takes those frequencies (:mod:`ropekit.hf.cast`), with a warning, where the probe shows the original forward reads
them.

Configs are accepted as transformers accepts them: what ropekit's strict parser refuses but transformers runs
with is accepted with a warning (strict validation is ``RopeSpec.from_hf``'s, for users who ask for it).

``patch`` is idempotent (a second call is a no-op); ``unpatch`` restores the original classes (so the original
forward and state), removes the hooks and, once no patched model uses it, the original apply functions.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from ropekit.hf.apply import wrap_apply
from ropekit.hf.buffer_edit import buffer_states
from ropekit.hf.cast import buffer_spec, warn_cast
from ropekit.hf.config_families import LONGROPE_SHORT_ONLY_TYPES
from ropekit.hf.families import FAMILIES, Family, family_for_class
from ropekit.hf.probe import rounded_dtype, verify_rotary
from ropekit.hf.rotary import (
    RopekitRotary,
    module_layer_types,
    ropekit_class,
    specs_for_config,
)
from ropekit.scaling import LongRope

__all__ = ["SUPPORTED_CLASSES", "patch", "patched", "unpatch"]

#: rotary module class names ropekit patches (refused rows excluded)
SUPPORTED_CLASSES = frozenset(c for f in FAMILIES if f.refused is None for c in f.rotary_classes)
_RECORD = "_ropekit_patch"
#: (modeling module name, function name) -> [module, original function, the patched models using it (weakly)]
_FUNCTIONS: dict[tuple[str, str], list[Any]] = {}


@dataclass
class _Record:
    cache_correct: bool
    modules: list[tuple[nn.Module, type]] = field(default_factory=list)
    functions: list[tuple[str, str]] = field(default_factory=list)
    hooks: list[Any] = field(default_factory=list)
    swaps: list[tuple[nn.Module, str, nn.Module]] = field(default_factory=list)  # (parent, name, original)
    undo: list[Any] = field(default_factory=list)  # callables undoing instance-level wraps (VL vision towers)


def _is_rotary(m: nn.Module) -> bool:
    return type(m).__name__.endswith("RotaryEmbedding") or family_for_class(type(m).__name__) is not None


_Todo = list[tuple[str, nn.Module, type, dict[str | None, Any]]]
_Swaps = list[tuple[str, nn.Module, nn.Module]]


def _plan(model: nn.Module) -> tuple[_Todo, list[str], _Swaps]:
    """(name, module, replacement class) for each recognised 1-D module, the unrecognised rotaries' names and
    (name, original, replacement) for each VL rotary (:mod:`ropekit.hf.patch_vl`)."""
    from ropekit.hf.patch_vl import vl_kind, vl_replacement

    todo: _Todo = []
    swaps: _Swaps = []
    ignored, refused = [], []
    for name, m in model.named_modules():
        if vl_kind(m) is not None:
            new, why = vl_replacement(m)
            if new is None:
                refused.append(f"{name or type(model).__name__} ({type(m).__name__}): {why}")
            elif not name:
                refused.append(
                    f"{type(m).__name__}: a bare rotary module cannot replace itself; patch its parent"
                )
            else:
                swaps.append((name, m, new))
            continue
        if not _is_rotary(m) or isinstance(m, RopekitRotary):
            continue
        fam = family_for_class(type(m).__name__)
        where = f"{name or type(model).__name__} ({type(m).__name__})"
        if fam is None:
            ignored.append(where)
            continue
        if fam.refused is not None:
            refused.append(f"{where}: {fam.refused}")
            continue
        cfg = getattr(m, "config", None)
        rp = getattr(cfg, "rope_parameters", None)
        if isinstance(rp, dict) and (
            "mrope_section" in rp or any(isinstance(v, dict) and "mrope_section" in v for v in rp.values())
        ):
            refused.append(f"{where}: its config has mrope_section (multi-axis positions), not yet expressed")
            continue
        if cfg is None:
            refused.append(f"{where}: the module has no .config to build a RopeSpec from")
            continue
        try:
            specs = specs_for_config(cfg, fam.layout, where, module_layer_types(m))
        except ValueError as e:
            refused.append(f"{where}: ropekit cannot express its config: {e}")
            continue
        cls = ropekit_class(type(m), fam)  # type: ignore[arg-type]
        why = verify_rotary(m, cls, fam, specs)
        if why is not None:
            refused.append(f"{where}: {why}")
            continue
        todo.append((name, m, cls, specs))
    if refused:
        raise ValueError(
            "ropekit.hf.patch refuses this model (nothing was modified):\n  " + "\n  ".join(refused)
        )
    if not todo and not swaps:
        raise ValueError(
            f"ropekit.hf.patch found no rotary module it recognises in {type(model).__name__}"
            + (f" (unrecognised: {ignored})" if ignored else "")
            + " (families whose attention builds its own sinusoids, such as GPT-J and CodeGen, have no rotary "
            "module to replace)"
        )
    return todo, ignored, swaps


def _wrap_functions(model: nn.Module, record: _Record, modeling: Any, fam: Family) -> None:
    """Wrap ``fam``'s apply functions of one modeling file (once per file, shared by the models using it)."""
    for fn_name, kind in fam.applies:
        key = (modeling.__name__, fn_name)
        fn = getattr(modeling, fn_name, None)
        if not callable(fn) or key in record.functions:
            continue
        if key not in _FUNCTIONS:
            _FUNCTIONS[key] = [modeling, fn, weakref.WeakSet()]
            setattr(modeling, fn_name, wrap_apply(fn, kind, key))
        _FUNCTIONS[key][2].add(model)
        record.functions.append(key)


def _wrap_vision(
    model: nn.Module, record: _Record, parent: nn.Module, orig: nn.Module, new: nn.Module
) -> None:
    """A VL vision rotary's apply function (:mod:`ropekit.hf.vision_apply`), wrapped once per modeling file like
    the text ones, and Qwen2.5-VL's window permutation of the tables (on the vision model instance)."""
    from ropekit.hf.vision_apply import attach_window_permute

    modeling = sys.modules[type(orig).__module__]
    for fn_name, kind in getattr(new, "vision_applies", ()):
        key = (modeling.__name__, fn_name)
        if key in record.functions:
            continue
        if key not in _FUNCTIONS:
            fn = getattr(modeling, fn_name)
            _FUNCTIONS[key] = [modeling, fn, weakref.WeakSet()]
            setattr(modeling, fn_name, wrap_apply(fn, kind, key))
        _FUNCTIONS[key][2].add(model)
        record.functions.append(key)
    undo = attach_window_permute(parent) if getattr(new, "vision_applies", ()) else None
    if undo is not None:
        record.undo.append(undo)


def patch(model: nn.Module, *, cache_correct: bool = False) -> nn.Module:
    """Make a transformers model compute its rotary tables and rotations with ropekit; returns the model.

    Args:
        model: a transformers model (any head; vision-language models get their M-RoPE text rotary and their
            vision rotaries patched too, :mod:`ropekit.hf.patch_vl`).
        cache_correct: with dynamic NTK or LongRoPE, bring the cache to the new frequencies when they switch
            (rebuild it by re-running the cached prefix; re-rotate the keys of a one-layer model), so token-by-token
            generation equals a full forward at every length (:mod:`ropekit.hf.cache_correct`).
            Default False: transformers' own behaviour (stale cached keys).

    Raises:
        ValueError: a model ropekit refuses (unsupported or unverifiable rotary, see the message), or a second call
            with a different ``cache_correct``. Nothing is modified then.
    """
    if not isinstance(model, nn.Module) or getattr(model, "config", None) is None:
        raise ValueError(f"patch expects a transformers model with a .config, got {type(model).__name__}")
    if not isinstance(cache_correct, bool):
        raise TypeError(f"cache_correct must be a bool, got {cache_correct!r}")
    record = model.__dict__.get(_RECORD)
    if record is not None:
        if record.cache_correct != cache_correct:
            raise ValueError(
                f"model is already patched with cache_correct={record.cache_correct}; unpatch it first to patch "
                f"with cache_correct={cache_correct}"
            )
        return model  # idempotent
    todo, ignored, swaps = _plan(model)
    if cache_correct:
        from ropekit.hf.cache_correct import cache_correct_refusal

        for name, m, cls, specs in todo:
            why = cache_correct_refusal(m, specs)
            if why is not None:
                raise ValueError(f"cache_correct=True refused for {name} ({type(m).__name__}): {why}")
    rounded = {name: rounded_dtype(m, cls, specs) for name, m, cls, specs in todo}
    for name, m, cls, specs in todo:
        if cache_correct and rounded[name] is not None and any(s.dynamic for s in specs.values()):
            raise ValueError(
                f"cache_correct=True refused for {name} ({type(m).__name__}): its rotary buffers are "
                f"{rounded[name]} (the model was cast) and the cache rebuild needs them in float32; load the "
                "model with dtype= instead of casting it"
            )
    if ignored:
        warnings.warn(f"ropekit.hf.patch left unrecognised rotary modules alone: {ignored}", stacklevel=2)
    _warn_short_only(model, todo)
    for name, m, _cls, specs in todo:
        dtype = rounded[name]
        if dtype is not None:
            warn_cast(m, dtype, f"{name or type(model).__name__} ({type(m).__name__})")
            for lt, spec in specs.items():  # read now: a compiled forward cannot read the buffer's values
                buffer_spec(m, spec, lt)
    record = _Record(cache_correct)
    for name, m, cls, specs in todo:  # all checks passed: modify
        original = type(m)
        m.__class__ = cls
        m._ropekit_specs = specs  # type: ignore[assignment]
        m._ropekit_patched = buffer_states(m)  # type: ignore[assignment]  # ropekit.hf.buffer_edit
        record.modules.append((m, original))
        fam: Family = cls._ropekit_family  # type: ignore[attr-defined]
        _wrap_functions(model, record, sys.modules[original.__module__], fam)
        if cache_correct:
            from ropekit.hf.cache_correct import CacheState, install_hooks

            state = CacheState()
            m._ropekit_cache_state = state  # type: ignore[assignment]
            parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
            record.hooks += install_hooks(parent, state)
    for name, orig, new in swaps:  # VL rotaries: replaced, the original object kept as it is
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, child, new)
        record.swaps.append((parent, child, orig))
        vl_family: Family | None = getattr(new, "family", None)
        if vl_family is not None:
            _wrap_functions(model, record, sys.modules[type(orig).__module__], vl_family)
        _wrap_vision(model, record, parent, orig, new)
    model.__dict__[_RECORD] = record
    return model


def unpatch(model: nn.Module) -> nn.Module:
    """Undo :func:`patch`: original classes, no hooks, original apply functions once unused; returns the model.

    A model that is not patched is returned unchanged.
    """
    record: _Record | None = model.__dict__.pop(_RECORD, None)
    if record is None:
        return model
    for handle in record.hooks:
        handle.remove()
    for undo in reversed(record.undo):
        undo()
    for parent, child, orig in reversed(record.swaps):
        new = getattr(parent, child, None)
        # the original's buffers the replacement held, moved or cast while patched (model.to(...)): given back
        for name in getattr(new, "ropekit_original_buffers", ()):
            moved = new._buffers.get(name) if isinstance(new, nn.Module) else None
            if moved is not None and name in orig._buffers:
                orig._buffers[name] = moved
        setattr(parent, child, orig)
    for m, original in record.modules:
        m.__class__ = original
        for attr in [a for a in m.__dict__ if a.startswith("_ropekit_")]:  # specs, cache state, memos
            del m.__dict__[attr]
    for m in model.modules():  # built while patched (type(model.model.rotary_emb)(config=...)): not recorded
        if isinstance(m, RopekitRotary):
            m.__class__ = next(c for c in type(m).__bases__ if c is not RopekitRotary)  # Ropekit<Original>
            for attr in [a for a in m.__dict__ if a.startswith("_ropekit_")]:
                del m.__dict__[attr]
    for key in record.functions:
        entry = _FUNCTIONS.get(key)
        if entry is None:
            continue
        entry[2].discard(model)
        if not entry[2]:  # no live patched model uses it
            modeling, fn, _ = _FUNCTIONS.pop(key)
            setattr(modeling, key[1], fn)
    return model


@contextlib.contextmanager
def patched(model: nn.Module, *, cache_correct: bool = False) -> Iterator[nn.Module]:
    """``with patched(model): ...`` -- patch on entry, unpatch on exit (also on error).

    A model that was already patched on entry stays patched on exit.
    """
    already = _RECORD in model.__dict__
    patch(model, cache_correct=cache_correct)
    try:
        yield model
    finally:
        if not already:
            unpatch(model)


def _warn_short_only(model: nn.Module, todo: list[Any]) -> None:
    """A family whose transformers rotary keeps LongRoPE's short factors past L0 (:data:`LONGROPE_SHORT_ONLY_TYPES`):
    the patched model switches to the long ones there, so its outputs differ from the unpatched model's past L0."""
    model_type = getattr(model.config, "model_type", None)
    if model_type not in LONGROPE_SHORT_ONLY_TYPES:
        return
    for _name, _m, _cls, specs in todo:
        for spec in specs.values():
            if isinstance(spec.scaling, LongRope):
                L0 = spec.scaling.original_max_position_embeddings
                warnings.warn(
                    f"model_type {model_type!r}: transformers' rotary keeps LongRoPE's short factors at every length; "
                    f"the patched model switches to the long factors past original_max_position_embeddings={L0}, "
                    "as the model's reference code and vLLM do, so its outputs differ from the unpatched model's "
                    f"for sequences longer than {L0} (docs/hf.md)",
                    UserWarning,
                    stacklevel=3,
                )
                return
