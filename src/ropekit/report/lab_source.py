# SPDX-License-Identifier: MIT
"""Lab checkpoints as a report SOURCE: the RoPE a lab model rotates with, and optionally its weight analysis.

Lab checkpoints of the rotary encodings whose rotation is a :class:`~ropekit.spec.RopeSpec` are read: ``rope``,
``p-rope`` and ``single-frequency``, each built as the lab built it, from the keyword arguments the checkpoint's
metadata records (``meta["encoding_kw"]``, written by ``ropekit.lab.experiments.common.model_plan``; a RoPE's
``spec`` there is the RopeSpec's fields, its scaling scheme's fields with its class name, ``"class"``; in a
checkpoint written before the lab recorded the name, the scheme is recognised by its fields' names). For ``rope``, a
``spec`` dict (transformers rope parameters, :meth:`RopeSpec.from_hf`) may give the spec instead. Checkpoints
written before the lab recorded ``encoding_kw`` are read from their ``tag`` where the lab's own tags say what was
trained: ``prope<p>`` (the frequencies experiment's p-RoPE with fraction p), or the encoding's name and
``passkey-copies-<encoding>`` (its default parameters). A checkpoint whose RoPE cannot be determined so is
refused, naming the file and what it lacks: no default is assumed. ``xpos`` (a per-band decay no RopeSpec
describes), ``dense-rotation`` (no bands) and the non-rotary encodings are refused. Nothing is unpickled
(safetensors only).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ropekit.scaling as scaling_module
from ropekit.analysis.weights import WeightAnalysis
from ropekit.scaling import Scaling
from ropekit.spec import RopeSpec

if TYPE_CHECKING:
    from ropekit.lab.model import LMConfig

__all__ = ["LAB_ENCODINGS", "lab_checkpoint"]

#: lab encodings a report can read: their rotation is a RopeSpec (see the module docstring)
LAB_ENCODINGS = ("rope", "p-rope", "single-frequency")
_LAB_REFUSED = {
    "xpos": "xPos scales q and k by a per-band decay that no RopeSpec describes, so the report's spectrum, decay "
    "and precision would describe plain RoPE",
    "dense-rotation": "a dense rotation of the whole head has no bands",
}


def lab_checkpoint(path: Path, weights: bool) -> tuple[RopeSpec, int, WeightAnalysis | None]:
    """(spec, training length, weight analysis or None) of the lab checkpoint at ``path``.

    Raises:
        ValueError: naming the file, for anything the report cannot read (see the module docstring).
    """
    from ropekit.lab.model import LMConfig
    from ropekit.lab.train import checkpoint_info

    info = checkpoint_info(path)  # ValueError naming the file when it is not a readable lab checkpoint
    meta = info.meta
    train_len = meta.get("train_len")
    if type(train_len) is not int or train_len < 1:
        raise ValueError(
            f"SOURCE {str(path)!r}: lab checkpoint metadata 'train_len' must be a positive int, got {train_len!r}"
        )
    encoding = info.config.encoding if info.config is not None else meta.get("encoding")
    if encoding not in LAB_ENCODINGS:
        why = _LAB_REFUSED.get(str(encoding), "only RoPE models have bands")
        raise ValueError(
            f"SOURCE {str(path)!r}: lab checkpoint with encoding {encoding!r}; {why} (the report reads "
            f"{', '.join(LAB_ENCODINGS)})"
        )
    # written before the model config was recorded: the default model at the training length
    cfg = info.config or LMConfig(encoding=str(encoding), max_positions=train_len)
    try:
        spec, encoding_kw = _lab_spec(meta, cfg)
    except ValueError as e:
        raise ValueError(
            f"SOURCE {str(path)!r}: lab checkpoint metadata gives no usable RoPE ({e})"
        ) from None
    w = _lab_weights(path, cfg, encoding_kw, train_len) if weights else None
    return spec, train_len, w


def _lab_weights(path: Path, cfg: LMConfig, encoding_kw: dict[str, Any], train_len: int) -> WeightAnalysis:
    from ropekit.lab.model import TinyLM
    from ropekit.lab.train import load_checkpoint
    from ropekit.report.models import analyse_lab_model

    if cfg.vocab < 256:
        raise ValueError(
            f"SOURCE {str(path)!r}: the weight analysis feeds bytes (vocab 256), the model's vocab is {cfg.vocab}"
        )
    model = TinyLM(cfg, **encoding_kw)  # the encoding as the lab built it (a RoPE's spec included)
    load_checkpoint(path, model, None, None)  # weights only; ValueError naming the file when they do not fit
    model.eval()
    text = Path(json.__file__).read_bytes()  # stdlib text: deterministic, no download
    length = min(train_len, len(text) // 2)
    tokens = _bytes_tokens(text, length)
    return analyse_lab_model(model, tokens, f"2 x {length} bytes of Python's json/__init__.py")


#: the scaling schemes a recorded spec's ``scaling`` can be (``ropekit.lab.experiments.common._json`` records the
#: scheme's fields and its class name; checkpoints written before it named the class record the fields alone)
_SCALINGS: tuple[type[Scaling], ...] = tuple(
    c
    for c in (getattr(scaling_module, n) for n in scaling_module.__all__)
    if isinstance(c, type) and issubclass(c, Scaling) and c is not Scaling
)


def _lab_spec(meta: dict[str, Any], cfg: LMConfig) -> tuple[RopeSpec, dict[str, Any]]:
    """(the RoPE, the encoding's keyword arguments) of a lab model, from what its checkpoint records.

    ``meta["encoding_kw"]``: the keyword arguments the lab built the encoding with (``model_plan`` records them
    through ``common._json``: a RoPE's ``spec`` as the RopeSpec's fields), decoded and built as the lab built them.
    For ``rope``, ``meta["spec"]`` (transformers rope parameters) may give the spec instead (and must agree when
    both are there). A checkpoint recording neither (written before the lab recorded encoding_kw) is read from its
    ``tag``, where the lab's own tags say: ``prope<p>`` (the frequencies experiment's p-RoPE), the encoding's name
    or ``passkey-copies-<encoding>`` (the encoding's defaults). Anything else is refused: the RoPE is unknown."""
    from ropekit.lab.encodings import build_encoding

    kw = _encoding_kw(meta, cfg)
    hf_spec = _hf_spec(meta) if cfg.encoding == "rope" else None
    if kw is None:
        if hf_spec is not None:
            kw = {"spec": hf_spec}
        else:
            kw = _kw_from_tag(meta, cfg)
    try:
        enc = build_encoding(cfg.encoding, cfg.d_model, cfg.n_heads, cfg.head_dim, **kw)
    except (TypeError, ValueError) as e:  # a keyword the encoding does not take, a value it refuses
        raise ValueError(
            f"the {cfg.encoding!r} encoding cannot be built with the recorded keyword arguments {kw!r} ({e})"
        ) from None
    spec = getattr(enc, "spec", None)
    assert isinstance(spec, RopeSpec), cfg.encoding  # LAB_ENCODINGS rotate with a RopeSpec
    if hf_spec is not None and hf_spec != spec:
        raise ValueError(
            f"metadata 'spec' gives {hf_spec!r} but 'encoding_kw' (what the model was built with) gives {spec!r}"
        )
    return spec, kw


def _encoding_kw(meta: dict[str, Any], cfg: LMConfig) -> dict[str, Any] | None:
    """``meta["encoding_kw"]`` as keyword arguments (a RoPE's recorded ``spec`` decoded); None when absent."""
    if "encoding_kw" not in meta:
        return None
    raw = meta["encoding_kw"]
    if not isinstance(raw, dict):
        raise ValueError(  # noqa: TRY004 - the CLI reports ValueErrors
            f"metadata 'encoding_kw' must be a JSON object (the encoding's keyword arguments), got {raw!r}"
        )
    kw = dict(raw)
    if cfg.encoding == "rope" and "spec" in kw:
        kw["spec"] = _decode_spec(kw["spec"])
    return kw


def _decode_spec(raw: object) -> RopeSpec:
    """A RopeSpec from its fields as ``common._json`` records them (the scaling scheme as its own fields and its
    class name: :func:`_decode_scaling`)."""
    where = "metadata 'encoding_kw.spec'"
    names = [f.name for f in dataclasses.fields(RopeSpec)]
    if not isinstance(raw, dict):
        raise ValueError(  # noqa: TRY004 - the CLI reports ValueErrors
            f"{where} must be a JSON object with a RopeSpec's fields {names} (as the lab records a spec), "
            f"got {raw!r}"
        )
    missing = [n for n in names if n not in raw]
    unknown = [k for k in raw if k not in names]
    if missing or unknown:
        raise ValueError(
            f"{where} must have exactly a RopeSpec's fields {names}; "
            + "; ".join(
                f"{what} {keys}" for what, keys in (("lacks", missing), ("has unknown", unknown)) if keys
            )
        )
    if raw["axes"] is not None:
        raise ValueError(
            f"{where} has a multi-axis map (axes {raw['axes']!r}); a lab language model has one axis"
        )
    fields = dict(raw)
    if fields["scaling"] is not None:
        fields["scaling"] = _decode_scaling(fields["scaling"])
    try:
        return RopeSpec(**fields)
    except ValueError as e:
        raise ValueError(f"{where} is not a valid RopeSpec ({e})") from None


def _decode_scaling(raw: object) -> Scaling:
    """The scaling scheme of a recorded spec: the class its ``SCALING_CLASS_KEY`` names (what the lab records
    since), else -- a checkpoint written before -- the one scheme whose fields have the recorded names."""
    from ropekit.lab.checkpoint import SCALING_CLASS_KEY

    where = "metadata 'encoding_kw.spec.scaling'"
    known = {c.__name__: [f.name for f in dataclasses.fields(c) if f.init] for c in _SCALINGS}  # type: ignore[arg-type]
    if not isinstance(raw, dict):
        raise ValueError(  # noqa: TRY004 - the CLI reports ValueErrors
            f"{where} must be a JSON object with a scaling scheme's fields, got {raw!r}"
        )
    fields = {k: v for k, v in raw.items() if k != SCALING_CLASS_KEY}
    if SCALING_CLASS_KEY in raw:
        name = raw[SCALING_CLASS_KEY]
        if not isinstance(name, str) or name not in known:
            raise ValueError(
                f"metadata 'encoding_kw.spec.scaling.{SCALING_CLASS_KEY}' is {name!r}; expected the name of a "
                f"ropekit scaling scheme, one of {sorted(known)}"
            )
        (cls,) = [c for c in _SCALINGS if c.__name__ == name]
        if sorted(known[name]) != sorted(fields):
            raise ValueError(
                f"{where} names the scheme {name} but has the fields {sorted(fields)}; {name}'s fields are "
                f"{sorted(known[name])}"
            )
    else:
        matches = [c for c in _SCALINGS if sorted(known[c.__name__]) == sorted(fields)]
        if len(matches) != 1:
            which = "no" if not matches else f"more than one ({', '.join(c.__name__ for c in matches)})"
            raise ValueError(
                f"{where} has the fields {sorted(fields)}, those of {which} ropekit scaling scheme, and no "
                f"{SCALING_CLASS_KEY!r} naming one, so the scheme is unknown (the schemes' fields: {known})"
            )
        (cls,) = matches
    try:
        return cls(**fields)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where} is not a valid {cls.__name__} ({e})") from None


def _hf_spec(meta: dict[str, Any]) -> RopeSpec | None:
    """``meta["spec"]`` (transformers rope parameters with head_dim) as a RopeSpec; None when absent."""
    if "spec" not in meta:
        return None
    raw = meta["spec"]
    if not isinstance(raw, dict):
        raise ValueError(  # noqa: TRY004 - the CLI reports ValueErrors
            f"metadata 'spec' must be a JSON object (transformers rope parameters, read by RopeSpec.from_hf), "
            f"got {raw!r}"
        )
    try:
        return RopeSpec.from_hf(raw)
    except ValueError as e:
        raise ValueError(f"metadata 'spec' is not a RoPE RopeSpec.from_hf reads ({e})") from None


def _kw_from_tag(meta: dict[str, Any], cfg: LMConfig) -> dict[str, Any]:
    """The encoding's keyword arguments of a checkpoint written before the lab recorded them, from its tag."""
    tag = meta.get("tag")
    if tag in (cfg.encoding, f"passkey-copies-{cfg.encoding}"):
        return {}  # the encoding's defaults: what the lab trained under those tags
    if cfg.encoding != "rope" or not isinstance(tag, str) or not tag.startswith("prope"):
        rope = cfg.encoding == "rope"
        raise ValueError(
            "it records no 'encoding_kw' (the keyword arguments the lab built the encoding with, a RoPE's spec "
            "among them)"
            + (" and no 'spec' (transformers rope parameters)" if rope else "")
            + f", and its 'tag' {tag!r} is none of the lab's own tags from before it recorded encoding_kw "
            f"({cfg.encoding!r}, 'passkey-copies-{cfg.encoding}'"
            + (", 'prope<p>'" if rope else "")
            + f"), so the parameters of its {cfg.encoding} are unknown; record them in the checkpoint's meta as "
            "ropekit.lab.experiments.common.model_plan does (meta['encoding_kw'])"
        )
    text = tag[len("prope") :]  # the frequencies experiment's p-RoPE tags: prope0.25, prope0.5, ...
    try:
        p = float(text)
    except ValueError:
        raise ValueError(
            f"metadata 'tag' is {tag!r}: a tag starting with 'prope' must be 'prope<p>' with p the fraction of "
            "frequencies kept, a number in (0, 1] (e.g. 'prope0.5', as the frequencies experiment writes)"
        ) from None
    try:
        return {"spec": RopeSpec(cfg.head_dim, p=p)}
    except ValueError as e:
        raise ValueError(f"metadata 'tag' is {tag!r}: {e}") from None


def _bytes_tokens(text: bytes, length: int) -> Any:
    import torch

    t = torch.tensor(list(text), dtype=torch.int64)
    return t[: 2 * length].view(2, length)
