# SPDX-License-Identifier: MIT
"""The lab's checkpoints: safetensors files (never pickle) holding the model weights, the optimizer state and the
data generator's state as tensors, and the step, the caller's ``meta`` and the model's
:class:`~ropekit.lab.model.LMConfig` as metadata, so that a reader can rebuild the model that wrote them.
Checkpoints written before the model config was recorded read as the default model. Every reader refuses an
unreadable file or malformed metadata with a ValueError naming the file. :func:`check_resume` refuses to resume a
checkpoint that another run wrote (its ``meta``, e.g. the corpus identity, or its config differs).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ropekit.lab.model import LMConfig, TinyLM

__all__ = [
    "SCALING_CLASS_KEY",
    "CheckpointInfo",
    "check_resume",
    "checkpoint_info",
    "load_checkpoint",
    "save_checkpoint",
]

#: the key under which the lab's ``meta`` records a scaling scheme's class name beside its fields
#: (``ropekit.lab.experiments.common._json``; ``class`` is a Python keyword, so no dataclass field can be named
#: so). Checkpoints written before it was recorded lack it: their scheme is known by its fields' names alone.
SCALING_CLASS_KEY = "class"


def save_checkpoint(
    path: Path,
    model: TinyLM,
    opt: torch.optim.Optimizer,
    step: int,
    gen: torch.Generator,
    meta: dict[str, Any],
) -> None:
    """Write ``model``'s weights, ``opt``'s state and ``gen``'s state to ``path`` (safetensors, atomically), with
    the step, ``meta`` and ``model.cfg`` (so that :func:`checkpoint_info` can rebuild the model) as metadata."""
    from safetensors.torch import save_file

    tensors = {f"model.{k}": v.detach().contiguous() for k, v in model.state_dict().items()}
    names = {id(p): n for n, p in model.named_parameters()}
    for group in opt.param_groups:
        for p in group["params"]:
            for key, val in opt.state.get(p, {}).items():
                if torch.is_tensor(val):
                    tensors[f"opt.{names[id(p)]}.{key}"] = val.detach().reshape(val.shape).contiguous()
    tensors["gen_state"] = gen.get_state()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    metadata = {
        "step": str(step),
        "meta": json.dumps(meta, sort_keys=True),
        "config": json.dumps(model.cfg.as_dict(), sort_keys=True),  # the model to rebuild (checkpoint_info)
    }
    save_file(tensors, str(tmp), metadata=metadata)
    tmp.replace(path)


@dataclass(frozen=True)
class CheckpointInfo:
    """A checkpoint's metadata: the step, the caller's ``meta`` and the model's config (None when the checkpoint
    was written before :func:`save_checkpoint` recorded it: the default :class:`LMConfig`)."""

    step: int
    meta: dict[str, Any]
    config: LMConfig | None


def _where(path: Path) -> str:
    return f"lab checkpoint {str(path)!r}"


def _read_json_object(path: Path, md: dict[str, str], key: str) -> dict[str, Any]:
    try:
        val = json.loads(md[key])
    except json.JSONDecodeError as e:
        raise ValueError(f"{_where(path)}: metadata {key!r} is not valid JSON ({e})") from None
    if not isinstance(val, dict):
        raise ValueError(  # noqa: TRY004 - the CLI reports ValueErrors
            f"{_where(path)}: metadata {key!r} must be a JSON object, got {type(val).__name__}"
        )
    return val


def _config(path: Path, raw: dict[str, Any]) -> LMConfig:
    """An :class:`LMConfig` from recorded fields: unknown fields are refused here, ill-typed values and unbuildable
    models by :class:`LMConfig` itself (its message names the field)."""
    fields = {f.name: f for f in dataclasses.fields(LMConfig)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ValueError(
            f"{_where(path)}: metadata 'config' has unknown fields {unknown}; known: {list(fields)}"
        )
    try:
        cfg = LMConfig(**raw)  # LMConfig refuses unknown encodings and sizes that do not split into heads
    except ValueError as e:
        raise ValueError(f"{_where(path)}: metadata 'config' is not a buildable model ({e})") from None
    return cfg


def checkpoint_info(path: Path) -> CheckpointInfo:
    """Read and check the metadata of a checkpoint written by :func:`save_checkpoint` (no tensor is loaded).

    Raises ValueError naming ``path`` when it is not a readable safetensors file or its metadata is missing or
    malformed.
    """
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            md = f.metadata() or {}
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise ValueError(f"{_where(path)}: not a readable safetensors file ({e})") from None
    lacking = [k for k in ("step", "meta") if k not in md]
    if lacking:
        raise ValueError(
            f"{_where(path)}: a safetensors file without the lab's checkpoint metadata {lacking} "
            "(written by ropekit.lab.train.save_checkpoint?)"
        )
    try:
        step = int(md["step"])
    except ValueError:
        step = -1
    if step < 0:
        raise ValueError(
            f"{_where(path)}: metadata 'step' must be an int >= 0 (the training steps done), got {md['step']!r}"
        )
    meta = _read_json_object(path, md, "meta")
    config = _config(path, _read_json_object(path, md, "config")) if "config" in md else None
    return CheckpointInfo(step, meta, config)


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys ({"data": {"sha256": x}} -> {"data.sha256": x}), so a difference names its field."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def check_resume(path: Path, cfg: LMConfig, meta: dict[str, Any]) -> None:
    """ValueError naming ``path`` unless the checkpoint was written by the run about to resume it: the same model
    config ``cfg`` and, for every key of ``meta`` (what determines the trained model: data, encoding, seed, budget
    ...), the same value (compared as JSON). The message names each differing field with both values. A checkpoint
    that lacks some of these keys (written before they were recorded) is refused too: it cannot be checked; one that
    lacks only a scaling scheme's class name (:data:`SCALING_CLASS_KEY`, recorded since) is checked by the scheme's
    fields."""
    info = checkpoint_info(path)
    how = "delete it or choose another output folder (--out) to train this run's model"
    lacking = [k for k in meta if k not in info.meta] + (["config"] if info.config is None else [])
    if lacking:
        raise ValueError(
            f"{_where(path)} records no {', '.join(lacking)} (written before checkpoints recorded what trained "
            f"them), so it cannot be checked against this run; {how}"
        )
    want = _flat({**json.loads(json.dumps(meta)), "config": cfg.as_dict()})
    got = _flat({k: info.meta[k] for k in meta} | {"config": info.config.as_dict() if info.config else None})
    # written before the lab recorded a scaling scheme's class name: its fields (still compared) identified it
    want = {k: v for k, v in want.items() if k in got or not k.endswith(f".{SCALING_CLASS_KEY}")}
    differ = [f"{k} {got.get(k)!r} (this run: {v!r})" for k, v in want.items() if got.get(k) != v]
    differ += [f"{k} {v!r} (this run: none)" for k, v in got.items() if k not in want]
    if differ:
        raise ValueError(f"{_where(path)} was written by another run: {'; '.join(differ)}; {how}")


def _check_fits(
    path: Path, model: TinyLM, tensors: dict[str, torch.Tensor], recorded: LMConfig | None
) -> None:
    """ValueError naming ``path`` unless the checkpoint's ``model.*`` tensors are exactly ``model``'s; the message
    says which model wrote it (``recorded``; None for a checkpoint written before the config was recorded)."""
    want = model.state_dict()
    got = {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
    missing = [k for k in want if k not in got]
    unexpected = [k for k in got if k not in want]
    shapes = [
        f"{k} {list(got[k].shape)} (the model's: {list(want[k].shape)})"
        for k in want
        if k in got and got[k].shape != want[k].shape
    ]
    problems = [
        f"{what} {_few(keys)}"
        for what, keys in (("lacks", missing), ("has unexpected", unexpected), ("has other shapes:", shapes))
        if keys
    ]
    if problems:
        if recorded is None:
            origin = (
                "it records no model config (written before save_checkpoint recorded it), so it was read as "
                "this model"
            )
        else:
            origin = f"it was written by a model with LMConfig {recorded.as_dict()}"
        raise ValueError(
            f"{_where(path)} does not fit the model (LMConfig {model.cfg.as_dict()}): "
            + "; ".join(problems)
            + f"; {origin}"
        )


def _few(keys: list[str], n: int = 4) -> str:
    more = f" and {len(keys) - n} more" if len(keys) > n else ""
    return f"{len(keys)} model tensor(s): " + ", ".join(keys[:n]) + more


#: the state torch's Adam and AdamW keep per parameter (and "max_exp_avg_sq" with amsgrad): the optimizer
#: :func:`ropekit.lab.train.train` uses, and the one whose checkpointed state :func:`load_checkpoint` can check
_ADAM_STATE = ("step", "exp_avg", "exp_avg_sq")


def _opt_state(
    path: Path, model: TinyLM, opt: torch.optim.Optimizer, step: int, tensors: dict[str, torch.Tensor]
) -> dict[int, dict[str, torch.Tensor]]:
    """The checkpoint's ``opt.<parameter>.<key>`` tensors as ``opt``'s per-parameter state (keyed by the
    parameter's index in ``opt.state_dict()``), checked against ``opt`` first: ValueError naming ``path`` and the
    tensors for an unknown parameter or key, a missing key, another shape or dtype, parameters without state, or
    no state at all after ``step`` > 0 steps (a resume would restart AdamW's moments from zero)."""
    if not isinstance(opt, torch.optim.Adam):  # AdamW is an Adam
        raise TypeError(
            f"load_checkpoint({str(path)!r}): opt must be a torch.optim.Adam or AdamW (the optimizer "
            f"ropekit.lab.train.train uses, whose state it restores and checks), got {type(opt).__name__}; pass "
            "opt=None, gen=None to load the weights only"
        )
    names = {id(p): n for n, p in model.named_parameters()}
    index: dict[str, int] = {}  # parameter name -> its index in opt.state_dict()["state"]
    want: dict[str, dict[str, tuple[torch.Size, torch.dtype | None]]] = {}  # name -> key -> (shape, dtype)
    for group in opt.param_groups:
        keys = _ADAM_STATE + (("max_exp_avg_sq",) if group.get("amsgrad") else ())
        for p in group["params"]:
            if id(p) not in names:
                raise ValueError(
                    f"{_where(path)}: the optimizer holds a parameter of shape {list(p.shape)} that is not one of "
                    "the model's, so its state cannot be named in a checkpoint; build the optimizer from "
                    "model.parameters()"
                )
            n = names[id(p)]
            index[n] = len(index)
            # AdamW's step is a 0-d float tensor (float32, or the default float dtype); its moments are p's
            want[n] = {k: (torch.Size([]), None) if k == "step" else (p.shape, p.dtype) for k in keys}
    got: dict[str, dict[str, torch.Tensor]] = {}
    unknown: list[str] = []
    for k, v in tensors.items():
        if not k.startswith("opt."):
            continue
        name, _, key = k[4:].rpartition(".")
        if name in want and key in want[name]:
            got.setdefault(name, {})[key] = v
        else:
            unknown.append(k)
    problems = []
    if unknown:
        problems.append(
            f"has {len(unknown)} tensor(s) that are no state of this optimizer: {_list(unknown)} (expected "
            f"opt.<parameter>.<key>, a parameter of the model and a key in {list(_ADAM_STATE)}, plus "
            "'max_exp_avg_sq' with amsgrad)"
        )
    if got:
        lacking = [n for n in want if n not in got]
        if lacking:
            problems.append(f"no optimizer state for {len(lacking)} parameter(s): {_list(lacking)}")
        partial = [f"opt.{n}.{k}" for n in got for k in want[n] if k not in got[n]]
        if partial:
            problems.append(f"lacks {len(partial)} optimizer tensor(s): {_list(partial)}")
        bad = [
            f"opt.{n}.{k} {_kind(v.shape, v.dtype)} (expected {_kind(*want[n][k])})"
            for n, state in got.items()
            for k, v in state.items()
            if not _fits(v, *want[n][k])
        ]
        if bad:
            problems.append(f"has optimizer tensor(s) of another shape or dtype: {_list(bad)}")
    elif step > 0:
        problems.append(
            f"holds no optimizer state after {step} step(s), so a resume would restart AdamW's moments from zero "
            "and differ from an uninterrupted run; pass opt=None, gen=None to load the weights only"
        )
    if problems:
        raise ValueError(f"{_where(path)} cannot resume this optimizer: " + "; ".join(problems))
    return {index[n]: state for n, state in got.items()}


def _fits(t: torch.Tensor, shape: torch.Size, dtype: torch.dtype | None) -> bool:
    """``t`` has ``shape`` and ``dtype`` (None: any floating-point dtype)."""
    return t.shape == shape and (t.dtype == dtype if dtype is not None else t.is_floating_point())


def _kind(shape: torch.Size, dtype: torch.dtype | None) -> str:
    return f"{list(shape)} " + ("floating point" if dtype is None else str(dtype).removeprefix("torch."))


def _gen_state(path: Path, gen: torch.Generator, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """The checkpoint's ``gen_state``, checked by setting it on a fresh generator of ``gen``'s device (``gen``
    itself is not touched): ValueError naming ``path`` when it is missing or not such a generator's state."""
    state = tensors.get("gen_state")
    live = gen.get_state()
    expected = _kind(live.shape, live.dtype)
    if state is None:
        raise ValueError(
            f"{_where(path)} has no 'gen_state' (the data generator's state, {expected}), so a resume would draw "
            "another data order than an uninterrupted run; pass opt=None, gen=None to load the weights only"
        )
    try:
        torch.Generator(device=gen.device).set_state(state)
    except (RuntimeError, TypeError) as e:
        raise ValueError(
            f"{_where(path)}: tensor 'gen_state' ({_kind(state.shape, state.dtype)}) is not the state of a "
            f"{gen.device} torch.Generator (expected {expected}; {e})"
        ) from None
    return state


def _list(keys: list[str], n: int = 4) -> str:
    return ", ".join(keys[:n]) + (f" and {len(keys) - n} more" if len(keys) > n else "")


def load_checkpoint(
    path: Path, model: TinyLM, opt: torch.optim.Optimizer | None, gen: torch.Generator | None
) -> tuple[int, dict[str, Any]]:
    """Load a checkpoint of :func:`save_checkpoint` into ``model`` (and ``opt``, ``gen`` when given); returns the
    step and the caller's ``meta``.

    To resume training pass ``opt`` (a torch.optim.Adam / AdamW over ``model.parameters()``) and ``gen``: the
    checkpoint must then hold their state (``opt.<parameter>.<key>`` for every parameter, none only at step 0,
    and ``gen_state``). To load the weights only, pass ``opt=None, gen=None``: the optimizer and generator
    tensors are then not read.

    Everything is checked before anything is modified. Raises ValueError naming ``path`` when the file is
    unreadable, its metadata is malformed, its model tensors do not fit ``model`` (missing, unexpected or of
    another shape), it holds tensors that are neither the model's, the optimizer's nor ``gen_state``, or (when
    given) ``opt``'s or ``gen``'s state is missing, unknown or of another shape or dtype (naming the tensor)."""
    from safetensors import safe_open

    info = checkpoint_info(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open is not iterable
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise ValueError(f"{_where(path)}: cannot read its tensors ({e})") from None
    _check_fits(path, model, tensors, info.config)
    other = [k for k in tensors if not (k.startswith(("model.", "opt.")) or k == "gen_state")]
    if other:
        raise ValueError(
            f"{_where(path)} holds {len(other)} tensor(s) that are neither the model's (model.*), the optimizer's "
            f"(opt.*) nor the generator's (gen_state): {_list(other)}"
        )
    opt_state = _opt_state(path, model, opt, info.step, tensors) if opt is not None else None
    gen_state = _gen_state(path, gen, tensors) if gen is not None else None
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    if opt is not None and opt_state is not None:
        sd = opt.state_dict()  # the live hyperparameters (lr, betas ...), the checkpoint's state
        sd["state"] = opt_state
        opt.load_state_dict(sd)  # moves and casts the state as torch does (the parameters' device)
    if gen is not None and gen_state is not None:
        gen.set_state(gen_state)
    return info.step, info.meta
