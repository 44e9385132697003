# SPDX-License-Identifier: MIT
"""Generate ``docs/api.md``, the API reference, from the public names' signatures and docstrings.

``python -m ropekit.cli.apidoc > docs/api.md`` rewrites it; ``tests/ropekit/cli/test_apidoc.py`` fails when the
committed file differs from what this prints, so the reference cannot go stale. Every name in the ``__all__`` of
each module in :data:`MODULES` gets a section: its signature (constructor arguments for classes), its docstring
verbatim, and for classes the public methods and properties they define; a type alias shows its value.

Shapes: none (documentation only).
"""

from __future__ import annotations

import importlib
import inspect
import sys
import typing
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["MODULES", "main", "render"]

#: The documented modules, in order: the package, then its public submodules.
MODULES: tuple[str, ...] = (
    "ropekit",
    "ropekit.scaling",
    "ropekit.positions",
    "ropekit.positions.grid",
    "ropekit.positions.multimodal",
    "ropekit.positions.videorope",
    "ropekit.positions.time",
    "ropekit.cache",
    "ropekit.rotation",
    "ropekit.presets",
    "ropekit.presets_vl",
    "ropekit.presets_vision",
    "ropekit.analysis",
    "ropekit.distributed",
    "ropekit.hf",
    "ropekit.timm",
)
_HEADER = """# API reference

Generated from the docstrings by `python -m ropekit.cli.apidoc > docs/api.md`; a test checks that this file is
up to date. Shapes in the docstrings: b batch, s sequence, h heads, d head_dim, r rotary_dim, n = r / 2 bands,
t packed tokens, P any position shape.
"""


def _annotation(a: Any) -> str:
    if isinstance(a, str):
        return a
    return inspect.formatannotation(a)


def _signature(obj: Callable[..., Any]) -> str:
    try:
        sig = obj.__signature__ if isinstance(obj, _Undocumented) else inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    parts: list[str] = []
    star_done = False
    params = list(sig.parameters.values())
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    for p in params:
        if p.kind is p.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        if p.kind is p.VAR_POSITIONAL:
            star_done = True
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")  # type: ignore[call-overload]
        text = prefix + p.name
        if p.annotation is not p.empty:
            text += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            text += f" = {p.default!r}"
        parts.append(text)
    out = "(" + ", ".join(parts) + ")"
    if sig.return_annotation is not sig.empty:
        out += f" -> {_annotation(sig.return_annotation)}"
    return out


def _value(obj: Any) -> str:
    if isinstance(obj, (set, frozenset)):
        return "{" + ", ".join(repr(x) for x in sorted(obj)) + "}"
    if isinstance(obj, dict):
        keys = ", ".join(repr(k) for k in obj)
        return f"dict with {len(obj)} entries: {keys}"
    text = repr(obj)
    return text if len(text) <= 300 else f"{type(obj).__name__} of length {len(obj)}"


def _doc(obj: Any) -> str:
    doc = inspect.getdoc(obj)
    return f"```text\n{doc}\n```\n" if doc else ""


def _with_ropekit_doc(cls: type, name: str, member: Any) -> Any:
    """``member``, or the documented ropekit base-class hook it overrides (never torch's generic docs)."""
    if member.__doc__:
        return member
    for base in cls.__mro__[1:]:
        hook = vars(base).get(name)
        if hook is not None and base.__module__.startswith("ropekit") and getattr(hook, "__doc__", None):
            return hook
    return _Undocumented(member)


class _Undocumented:
    """A member whose docs would come from outside ropekit: its signature, no docstring."""

    def __init__(self, member: Any) -> None:
        self.__signature__ = inspect.signature(member)
        self.__doc__ = None


def _members(cls: type) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            out.append((name, member))
        elif inspect.isfunction(member):
            out.append((name, _with_ropekit_doc(cls, name, member)))
        elif isinstance(member, (classmethod, staticmethod)):
            out.append((name, member.__func__))
    return out


def _entry(module: str, name: str, obj: Any, seen: dict[int, str], w: Callable[[str], object]) -> None:
    qual = f"{module}.{name}"
    w(f"### `{qual}`\n\n")
    if inspect.ismodule(obj):
        w(f"Submodule `{obj.__name__}`: see its section.\n\n")
        return
    if typing.get_origin(obj) is not None:  # a type alias (Literal[...]): callable, but not a function
        w(f"Type alias: `{_annotation(obj)}`\n\n")
        return
    if id(obj) in seen and (inspect.isclass(obj) or callable(obj)):
        w(f"Re-export of `{seen[id(obj)]}`.\n\n")
        return
    if inspect.isclass(obj):
        seen[id(obj)] = qual
        bases = [b.__name__ for b in obj.__bases__ if b is not object]
        w(f"```python\nclass {name}{_signature(obj)}\n```\n\n")
        if bases:
            w(f"Bases: {', '.join(f'`{b}`' for b in bases)}\n\n")
        w(_doc(obj) + "\n")
        for mname, member in _members(obj):
            if isinstance(member, property):
                doc = _doc(member)
                w(f"#### `{name}.{mname}` (property)\n\n" + (f"{doc}\n" if doc else ""))
            else:
                doc = _doc(member)
                w(f"#### `{name}.{mname}{_signature(member)}`\n\n" + (f"{doc}\n" if doc else ""))
        return
    if callable(obj):
        seen[id(obj)] = qual
        w(f"```python\ndef {name}{_signature(obj)}\n```\n\n{_doc(obj)}\n")
        return
    w(f"Constant: `{_value(obj)}`\n\n")


def render(out: TextIO) -> None:
    """Write the whole reference to ``out``."""
    w = out.write
    w(_HEADER + "\n")
    w("Modules: " + ", ".join(f"[`{m}`](#{m.replace('.', '')})" for m in MODULES) + "\n\n")
    seen: dict[int, str] = {}
    for module in MODULES:
        mod = importlib.import_module(module)
        w(f"## {module}\n\n")
        doc = inspect.getdoc(mod)
        if doc:
            w(f"```text\n{doc}\n```\n\n")
        for name in mod.__all__:
            if name.startswith("__"):
                continue
            _entry(module, name, getattr(mod, name), seen, w)


def main() -> int:
    """Print the reference to stdout."""
    render(sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
