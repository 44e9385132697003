# SPDX-License-Identifier: MIT
"""Wrappers of a modeling file's apply functions: ropekit rotates when the tables come from ropekit.

A wrapper looks for :data:`ropekit.hf.rotary.ROPEKIT_TABLES` on the cos (or ``freqs_cis``) it receives. Present:
it rotates with :func:`ropekit.apply_rope_tables` (``backend="auto"``: the fused CPU kernel on CPU tensors, Triton
on CUDA), from ropekit's float32 half tables, float32 math, result in the input's dtype. Absent (a model of the
family that is not patched, or tables a model modified on the way): it calls the original function unchanged; the
tables a patched module returns are in the family's own format, so that path is exact too, only not fused.

Calling conventions: see :data:`ropekit.hf.families.APPLY_KINDS`. Shapes: q, k [b, h, s, d] (unsqueeze_dim=1,
"bhsd") or [b, s, h, d] (unsqueeze_dim=2, "bshd"); tables [b | 1, s, n].
"""

from __future__ import annotations

import functools
import inspect
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from ropekit.hf.rotary import ROPEKIT_TABLES, RopekitTables
from ropekit.rotation import fastpath
from ropekit.rotation.apply import apply_rope_tables
from ropekit.spec import RopeSpec

__all__ = ["CALLS", "VISION_KINDS", "check_route", "wrap_apply"]

#: (modeling module, function name) -> number of rotations ropekit did there (tests read it; never reset by us)
CALLS: Counter[tuple[str, str]] = Counter()


@functools.lru_cache(maxsize=256)
def _geometry(head_dim: int, rotary_dim: int, layout: str) -> RopeSpec:
    """A spec carrying only what the rotation needs (the phases are already in the tables)."""
    return RopeSpec(head_dim=head_dim, rotary_dim=rotary_dim, layout=layout)  # type: ignore[arg-type]


def _tables(info: RopekitTables) -> tuple[torch.Tensor, torch.Tensor]:
    if info.family.sign < 0:
        if (
            torch.compiler.is_compiling()
        ):  # no cache in a traced graph: a dict write there is a guard per call
            return info.cos, -info.sin
        neg = info.extra.get("neg_sin")
        if neg is None:
            neg = info.extra["neg_sin"] = -info.sin
        return info.cos, neg
    return info.cos, info.sin


def _rotate(
    q: torch.Tensor, k: torch.Tensor | None, info: RopekitTables, fmt: str, layout: str
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    cos, sin = _tables(info)
    r = 2 * cos.shape[-1]
    d = q.shape[-1]
    if d < r or (k is not None and k.shape[-1] != d):
        return None
    if torch.compiler.is_compiling():
        # traced: the plan cache (storage pointers, a dict of prepared calls) would break the graph or add guards
        # that recompile; apply_rope_tables itself traces with neither
        spec = _geometry.__wrapped__(d, r, layout)
        return apply_rope_tables(q, k, cos, sin, spec, format=fmt)  # type: ignore[arg-type]
    spec = _geometry(d, r, layout)
    # every layer of one forward rotates with the same tables and (almost always) the same q/k geometry: the
    # prepared kernel call of the first layer is kept with the tables, so later layers skip the lookup
    key = fastpath.key(q, k, cos, sin, spec, fmt, False, "auto")
    plans = info.extra.setdefault("plans", {})
    plan = plans.get(key) if key is not None else None
    if plan is not None:
        return plan(q, k, cos, sin)  # type: ignore[no-any-return]
    out = apply_rope_tables(q, k, cos, sin, spec, format=fmt)  # type: ignore[arg-type]
    plan = fastpath.lookup(key, spec)
    if plan is not None:
        plans[key] = plan
    return out


def _rotate_q_defer_k(
    q: torch.Tensor, k: torch.Tensor, info: RopekitTables
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """q rotated now, k unrotated and marked: the fused cache write rotates k into the cache
    (:mod:`ropekit.hf.fused_cache`); a k of fewer than ``FUSED_MIN_K_ELEMENTS`` elements is rotated with q here
    instead (the cache then copies it as a ``StaticCache`` does). q is not deferred: a model may compute a new
    query from it before the cache write (Ministral 3 scales it), and that tensor must already be rotated. None
    (rotate as usual) when autograd needs the rotation recorded."""
    from ropekit.hf.fused_cache import FUSED_MIN_K_ELEMENTS, defer_k

    if (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad)) or q.dtype != k.dtype:
        return None
    if k.numel() < FUSED_MIN_K_ELEMENTS:  # decode-sized: one call for q and k, then the cache's plain copy
        both = _rotate(q, k, info, "bhsd", info.family.layout)
        return None if both is None or both[1] is None else (both[0], both[1])
    cos, sin = _tables(info)
    d, r = q.shape[-1], 2 * cos.shape[-1]
    if d < r or k.shape[-1] != d:
        return None
    rotated = _rotate(q, None, info, "bhsd", info.family.layout)
    if rotated is None:
        return None
    if not defer_k(k, info, _geometry(d, r, info.family.layout), cos, sin):
        return None
    return rotated[0], k


def _fmt(unsqueeze_dim: Any) -> str | None:
    return {1: "bhsd", 2: "bshd"}.get(int(unsqueeze_dim))


def _binder(sig: inspect.Signature) -> Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any] | None]:
    """A cheap ``sig.bind(...).apply_defaults()`` for the plain calls (positional-or-keyword parameters only).

    Returns the arguments by name, or None where the full ``inspect`` binding must decide (a parameter of another
    kind, an unknown or repeated name, a missing argument): the answer is the same as ``Signature.bind`` gives.
    """
    params = list(sig.parameters.values())
    plain = all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params)
    names = [p.name for p in params]
    defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    nset = set(names)

    def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
        if not plain or len(args) > len(names):
            return None
        a = dict(zip(names, args))
        for key, val in kwargs.items():
            if key not in nset or key in a:
                return None
            a[key] = val
        if len(a) < len(names):
            for name in names[len(args) :]:
                if name not in a:
                    if name not in defaults:
                        return None
                    a[name] = defaults[name]
        return a

    return bind


#: vision-tower apply kinds (:mod:`ropekit.hf.vision_apply`), tables [tokens, n] shared by the batch:
#: "vision_thd" f(q, k, cos, sin) with q, k [tokens, heads, d] (Qwen2-VL ... ERNIE-4.5-VL vision blocks);
#: "qk_shared" f(q, k, cos, sin, unsqueeze_dim=0) with q, k [b, heads, s, d] (Pixtral);
#: "vision_complex" f(query, key, freqs_ci) with query, key [b, s, heads, d] (Llama 4 vision)
VISION_KINDS = ("vision_thd", "qk_shared", "vision_complex")


def _rotate_vision(
    a: dict[str, Any], info: RopekitTables, kind: str, layout: str
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    if info.cos.dim() != 2:
        return None
    if kind == "vision_thd":
        return _rotate(a["q"], a["k"], info, "thd", layout)
    if kind == "qk_shared":
        if int(a.get("unsqueeze_dim", 1)) != 0:
            return None
        return _rotate(a["q"], a["k"], info, "bhsd", layout)
    return _rotate(a["query"], a["key"], info, "bshd", layout)


def wrap_apply(original: Callable[..., Any], kind: str, where: tuple[str, str]) -> Callable[..., Any]:
    """The wrapper of one apply function (see the module docstring)."""
    sig = inspect.signature(original)
    table_arg = "freqs_cis" if kind.startswith("complex") else "cos"
    if kind == "vision_complex":  # Llama 4 vision: f(query, key, freqs_ci)
        table_arg = "freqs_ci"
    _bind = _binder(sig)

    def rotate(a: dict[str, Any], info: RopekitTables) -> Any:
        layout = info.family.layout
        if kind == "qk":
            fmt = _fmt(a.get("unsqueeze_dim", 1))
            if fmt == "bhsd" and a["k"] is not None and "defer_to" in info.extra:
                return _rotate_q_defer_k(a["q"], a["k"], info)
            out = None if fmt is None else _rotate(a["q"], a["k"], info, fmt, layout)
            if out is None:
                return None
            return out[0] if a["k"] is None else out
        if kind == "x":
            fmt = _fmt(a.get("unsqueeze_dim", 1))
            out = None if fmt is None else _rotate(a["x"], None, info, fmt, layout)
            return None if out is None else out[0]
        if kind == "mla_interleave":
            fmt = _fmt(a.get("unsqueeze_dim", 1))
            q, k = a["q"], a["k"]
            if fmt is None or q.shape[-1] != 2 * info.cos.shape[-1]:
                return None
            qh = torch.cat([q[..., 0::2], q[..., 1::2]], dim=-1)  # pairs (2i, 2i+1) -> (i, i + n)
            kh = torch.cat([k[..., 0::2], k[..., 1::2]], dim=-1)
            return _rotate(qh, kh, info, fmt, "half")
        if kind in VISION_KINDS:
            return _rotate_vision(a, info, kind, layout)
        fmt = "bshd" if kind == "complex_bshd" else "bhsd"
        return _rotate(a["xq"], a["xk"], info, fmt, layout)

    def apply(*args: Any, **kwargs: Any) -> Any:
        a = _bind(args, kwargs)
        if a is None:
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:
                return original(*args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
        info = getattr(a.get(table_arg), ROPEKIT_TABLES, None)
        if info is not None:
            out = rotate(a, info)
            if out is not None:
                if (
                    not torch.compiler.is_compiling()
                ):  # a counter read in a graph would be guarded on its value
                    CALLS[where] += 1
                return out
        return original(*args, **kwargs)

    functools.update_wrapper(apply, original)
    apply._ropekit_original = original  # type: ignore[attr-defined]
    return apply


def _max_err(a: Any, b: Any) -> float:
    pairs = zip(a, b) if isinstance(a, (tuple, list)) else [(a, b)]
    err = 0.0
    for u, v in pairs:
        if u.is_complex():
            u, v = torch.view_as_real(u), torch.view_as_real(v)
        err = max(err, float((u.double() - v.double()).abs().max()) if u.numel() else 0.0)
    return err


def check_route(
    original: Callable[..., Any], kind: str, tag: str, args: tuple[Any, ...], what: str
) -> str | None:
    """Call a modeling file's apply function and ropekit's wrapper of it on the same probe arguments (tables made
    by a ropekit rotary module). None when the wrapper rotated through ropekit (counted in :data:`CALLS` under
    ``(tag, name)``) and agrees within 1e-5; else why not, naming the function and ``what`` it was compared with."""
    name = getattr(original, "__name__", "apply")
    label = f"{getattr(original, '__module__', '?')}.{name}"
    wrapped = wrap_apply(original, kind, (tag, name))
    before = CALLS[(tag, name)]
    with torch.no_grad():
        a, b = original(*args), wrapped(*args)
    if CALLS[(tag, name)] == before:
        return f"{label} could not be routed through ropekit ({kind!r})"
    err = _max_err(a, b)
    if err > 1e-5:
        return f"{label} rotates differently from {what} ({kind!r}): max error {err:.2e}"
    return None
