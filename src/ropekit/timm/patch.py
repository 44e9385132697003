# SPDX-License-Identifier: MIT
"""``ropekit.timm.patch(model)`` / ``unpatch(model)`` / ``with patched(model):`` -- timm's rotary ViTs on ropekit.

What changes, per patched model:

- each rotary module of a class in :data:`~ropekit.timm.rotary.KINDS` (timm's ``RotaryEmbedding``,
  ``RotaryEmbeddingCat``, ``RotaryEmbeddingMixed``, ``RotaryEmbeddingDinoV3``, ``RotaryEmbeddingMRope``) has its
  class swapped for ``Ropekit<Original>`` (:mod:`ropekit.timm.rotary`): same object, parameters and buffers, with
  embeddings from ropekit's exact tables (:mod:`ropekit.timm.tables`);
- ``apply_rot_embed_cat`` is wrapped once in every loaded ``timm`` module that holds it (:mod:`ropekit.timm.apply`):
  ropekit's tables are rotated by ropekit's dispatch, anything else goes to the original.

Before anything is modified every recognised module is verified on a probe (a 3 x 5 grid, the cached grid, the
batched path, training-mode augmentations under one seed): its embeddings must equal the original's (shape,
dtype, values within 1e-5 plus float32 rounding of timm's angle) and the wrapper's rotation must equal timm's.
A module that fails, a class ropekit refuses (:data:`REFUSED`) or a rotary-looking module ropekit does not know
raises ``ValueError`` naming each, with the model untouched.

``patch`` is idempotent; ``unpatch`` restores the original classes and, once no patched rotary module is
registered, the original ``apply_rot_embed_cat`` everywhere: the model is then bit-identical to one never patched.
A patched model pickles (``torch.save``; loaded in another process where ropekit is importable) and deep-copies as
a model patched on its own: its rotary modules register themselves when restored (:mod:`ropekit.timm.rotary`).

Under ``torch.compile`` axial and DINOv3 models rotate with ropekit; RoPE-Mixed models rotate with timm's own
``apply_rot_embed_cat`` arithmetic on ropekit's tables (dynamo does not carry ropekit's tag from the embedding to the
depth slices the model passes to its blocks), with outputs equal to eager within float32 rounding (docs/vision.md).
"""

from __future__ import annotations

import contextlib
import copy
import sys
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ropekit.spec import RopeSpec
from ropekit.timm.apply import make_rotate_cat
from ropekit.timm.rotary import KINDS, RopekitTimmRotary, ropekit_class
from ropekit.timm.tables import module_spec

__all__ = ["REFUSED", "SUPPORTED_CLASSES", "patch", "patched", "unpatch"]

_HOME = "timm.layers.pos_embed_sincos"
#: timm rotary classes ropekit patches ("module.Class")
SUPPORTED_CLASSES = frozenset(f"{_HOME}.{c}" for c in KINDS)
#: timm rotary classes ropekit refuses, and why
REFUSED: dict[str, str] = {
    "timm.models.gemma4_vit.Gemma4RotaryEmbedding2D": (
        "Gemma 4's vision rotary returns HF-style (cos, sin) applied by apply_multidimensional_rope, which pairs "
        "channels within each axis's quarter-split half of the head: a layout ropekit's rotation does not have"
    ),
}
_RECORD = "_ropekit_timm_patch"
_PROBE = (3, 5)
_FN = "apply_rot_embed_cat"
_LOW = (torch.float16, torch.bfloat16)
#: state of the wrapped function: [original, wrapper, the patched rotary modules (weakly)]
_STATE: list[Any] = []


@dataclass
class _Record:
    modules: list[tuple[nn.Module, type]] = field(default_factory=list)


def _looks_rotary(m: nn.Module) -> bool:
    """A rotary position module by its name: "Rotary" in it, or "Rope" with a ``get_embed`` (not AttentionRope)."""
    name = type(m).__name__.lower()
    return "rotary" in name or ("rope" in name and callable(getattr(m, "get_embed", None)))


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__name__}"


def _original_fn() -> Any:
    home = sys.modules[_HOME]
    fn = getattr(home, _FN)
    return getattr(fn, "__ropekit_original__", fn)


def _tol(kind: str, m: Any, spec: RopeSpec | None, pos_bound: float) -> float:
    """1e-5 plus the float32 rounding of timm's angle (|angle| <= pos_bound * sum of |freqs| per band)."""
    if kind == "mixed":
        fmax = float(m.freqs.detach().abs().sum(0).max()) if m.freqs.numel() else 0.0
    else:
        assert spec is not None and spec.freqs is not None
        fmax = max(spec.freqs)
    return 1e-5 + 8 * 2.0**-24 * pos_bound * fmax


def _compare(ref: Any, got: Any, tol: float, what: str) -> str | None:
    refs = list(ref) if isinstance(ref, (list, tuple)) else [ref]
    gots = list(got) if isinstance(got, (list, tuple)) else [got]
    if [(tuple(t.shape), t.dtype) for t in refs] != [(tuple(t.shape), t.dtype) for t in gots]:
        return (
            f"{what}: timm gives {[(tuple(t.shape), t.dtype) for t in refs]}, "
            f"ropekit {[(tuple(t.shape), t.dtype) for t in gots]}"
        )
    for a, b in zip(refs, gots):
        err = float((a.double() - b.double()).abs().max()) if a.numel() else 0.0
        if not err <= tol:
            return f"{what}: ropekit's values differ from timm's by {err:.3g} (> {tol:.3g})"
    return None


def _verify(m: nn.Module, kind: str, spec: RopeSpec | None) -> str | None:
    """None when ``Ropekit<class>`` reproduces the module on a probe, else why not."""
    dev = next((t.device for t in (*m.parameters(), *m.buffers())), torch.device("cpu"))
    if dev.type == "meta":
        return "the module is on the meta device (materialise it first)"
    ref: Any = copy.deepcopy(m)
    ours: Any = copy.deepcopy(m)
    ours.__class__ = ropekit_class(type(m), kind)
    ours._ropekit_spec = spec
    feat = getattr(m, "feat_shape", None)
    shapes: list[Any] = [_PROBE] + ([None] if feat is not None and kind != "mrope" else [])
    bound = 2.0 + max(_PROBE + tuple(int(s) for s in (feat or ())))
    ref_shape = getattr(m, "ref_feat_shape", None)
    if ref_shape is not None:
        bound = bound * max(1.0, *(float(r) for r in ref_shape))
    tol = _tol(kind, m, spec, bound)
    original = _original_fn()
    gen = torch.Generator(device="cpu").manual_seed(0)
    modes = [False] + ([True] if kind == "dinov3" and getattr(m, "aug_active", False) else [])
    with torch.no_grad():
        for training in modes:
            ref.train(training)
            ours.train(training)
            for shape in shapes:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(0)
                    try:
                        r = ref.get_embed(shape) if shape is not None else ref.get_embed()
                    except Exception as e:  # noqa: BLE001 - a module that does not run as called is reported
                        return f"timm's get_embed({shape}) fails on the probe: {e}"
                    torch.manual_seed(0)
                    g = ours.get_embed(shape) if shape is not None else ours.get_embed()
                why = _compare(r, g, tol, f"get_embed({shape}){' in training mode' if training else ''}")
                if why is not None:
                    return why
                if kind == "axial_tuple":
                    continue
                emb_r, emb_g = (r[0], g[0]) if kind == "mixed" else (r, g)  # one depth for Mixed
                heads = emb_r.shape[0] if emb_r.dim() == 3 else 2
                x = torch.randn(2, heads, emb_r.shape[-2], emb_r.shape[-1] // 2, generator=gen)
                x = x.to(dev, emb_r.dtype)  # q and k in the embedding's dtype, as in the model's own forward
                half = kind == "mrope" or (kind == "dinov3" and bool(m.rotate_half))
                why = _compare(
                    original(x, emb_r, half=half),
                    make_rotate_cat(original)(x, emb_g, half),
                    4 * tol,
                    "rotation",
                )
                if why is not None:
                    return why
        if hasattr(type(m), "get_batch_embeds") and getattr(m, "bands", 0) is not None:
            for seq_len in (None, 20):
                why = _compare(
                    ref.get_batch_embeds([(3, 5), (2, 4)], seq_len=seq_len),
                    ours.get_batch_embeds([(3, 5), (2, 4)], seq_len=seq_len),
                    tol,
                    f"get_batch_embeds(seq_len={seq_len})",
                )
                if why is not None:
                    return why
    return None


def _plan(model: nn.Module) -> list[tuple[nn.Module, str, RopeSpec | None]]:
    todo: list[tuple[nn.Module, str, RopeSpec | None]] = []
    refused: list[str] = []
    already = 0
    for name, m in model.named_modules():
        cls = type(m)
        if isinstance(m, RopekitTimmRotary):
            already += 1  # patched through patch() of a module holding it: left as it is
            continue
        where = f"{name or type(model).__name__} ({cls.__name__})"
        qn = _qualname(cls)
        if qn in REFUSED:
            refused.append(f"{where}: {REFUSED[qn]}")
            continue
        if qn not in SUPPORTED_CLASSES:
            if _looks_rotary(m) and (
                cls.__module__.startswith("timm.")
                or any(_qualname(b) in SUPPORTED_CLASSES for b in cls.__mro__)
            ):
                refused.append(
                    f"{where}: a rotary module ropekit does not recognise (not one of timm's classes)"
                )
            continue
        kind = KINDS[cls.__name__]
        try:
            spec = module_spec(kind, m)
        except ValueError as e:
            refused.append(f"{where}: ropekit cannot express its settings: {e}")
            continue
        why = _verify(m, kind, spec)
        if why is not None:
            low = sorted({str(t.dtype) for t in (*m.parameters(), *m.buffers()) if t.dtype in _LOW})
            if low:
                why += (
                    f" (the module holds {', '.join(low)} tensors: timm then forms its tables in low precision, "
                    "which ropekit does not imitate; patch the float32 model and use autocast)"
                )
            refused.append(f"{where}: {why}")
            continue
        todo.append((m, kind, spec))
    if refused:
        raise ValueError(
            "ropekit.timm.patch refuses this model (nothing was modified):\n  " + "\n  ".join(refused)
        )
    if not todo and not already:
        raise ValueError(
            f"ropekit.timm.patch found no timm rotary module in {type(model).__name__} "
            f"(ropekit patches {sorted(c.rsplit('.', 1)[1] for c in SUPPORTED_CLASSES)})"
        )
    return todo


def _adopt(modules: Iterable[object]) -> None:
    """Register patched rotary modules and wrap apply_rot_embed_cat in every loaded timm module that holds the
    original (also a module unpickled or deep-copied: ``RopekitTimmRotary.__setstate__``)."""
    if not _STATE:
        original = _original_fn()
        _STATE.extend([original, make_rotate_cat(original), weakref.WeakSet()])
    original, wrapper, live = _STATE
    for mod_name, mod in list(sys.modules.items()):
        if (mod_name == "timm" or mod_name.startswith("timm.")) and getattr(mod, _FN, None) is original:
            setattr(mod, _FN, wrapper)
    live.update(modules)


def _release(modules: Iterable[object]) -> None:
    """Unregister rotary modules; the original apply_rot_embed_cat once no patched module is left."""
    if not _STATE:
        return
    original, wrapper, live = _STATE
    for m in modules:
        live.discard(m)
    if len(live):
        return
    for mod_name, mod in list(sys.modules.items()):
        if (mod_name == "timm" or mod_name.startswith("timm.")) and getattr(mod, _FN, None) is wrapper:
            setattr(mod, _FN, original)
    _STATE.clear()


def _check_model(model: object) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")


def patch(model: nn.Module) -> nn.Module:
    """Make a timm model compute its rotary embeddings and rotations with ropekit; returns the model.

    Rotary modules patched already (by ``patch`` of a module inside ``model``) are left as they are: when every one
    is, there is nothing to do and ``model`` is returned unchanged, as for a model patched before.

    Where timm's own arithmetic still rotates ropekit's tables (float64 q and k, tables that are not float32, an
    embedding rebuilt by the model, and RoPE-Mixed models under ``torch.compile``, whose results equal eager
    within float32 rounding): see the module docstring and docs/vision.md.

    Args:
        model: a timm model (``timm.create_model(...)``) or any module holding timm rotary modules.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
        ValueError: a rotary module ropekit refuses or cannot verify, or none at all (the message names each
            module and why). Nothing is modified then.
    """
    _check_model(model)
    record: _Record | None = model.__dict__.get(_RECORD)
    if record is not None:  # idempotent (a deep copy or an unpickled model is registered already)
        _adopt([m for m, _ in record.modules])
        return model
    if _HOME not in sys.modules:
        raise ValueError("ropekit.timm.patch: timm is not imported; build the model with timm first")
    todo = _plan(model)
    if not todo:  # every rotary module in it is patched already, through patch() of a module that holds it
        return model
    record = _Record()
    for m, kind, spec in todo:  # every check passed: modify
        original = type(m)
        m.__class__ = ropekit_class(original, kind)
        m._ropekit_spec = spec  # type: ignore[assignment]
        record.modules.append((m, original))
    _adopt([m for m, _ in record.modules])
    model.__dict__[_RECORD] = record
    return model


def unpatch(model: nn.Module) -> nn.Module:
    """Undo :func:`patch` (original classes; the original ``apply_rot_embed_cat`` once no patched module is left).

    A model that is not patched is returned unchanged; so is one whose rotary modules were patched through
    :func:`patch` of a module inside it (unpatch that module).

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
    """
    _check_model(model)
    record: _Record | None = model.__dict__.pop(_RECORD, None)
    if record is None:
        return model
    for m, original in record.modules:
        m.__class__ = original
        m.__dict__.pop("_ropekit_spec", None)
    _release([m for m, _ in record.modules])
    return model


@contextlib.contextmanager
def patched(model: nn.Module) -> Iterator[nn.Module]:
    """``with patched(model): ...`` -- patch on entry, unpatch on exit (also on error).

    A model that was already patched on entry stays patched on exit.

    Raises:
        TypeError, ValueError: as :func:`patch`.
    """
    _check_model(model)
    already = _RECORD in model.__dict__
    patch(model)
    try:
        yield model
    finally:
        if not already:
            unpatch(model)
