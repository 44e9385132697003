"""docs/api.md is generated from the docstrings and up to date; it covers every public name."""

from __future__ import annotations

import importlib
import io
import re
from pathlib import Path

import ropekit
from ropekit.cli.apidoc import MODULES, render

API_MD = Path(__file__).resolve().parents[3] / "docs" / "api.md"


def test_committed_reference_is_up_to_date() -> None:
    buf = io.StringIO()
    render(buf)
    assert API_MD.read_text() == buf.getvalue(), (
        "docs/api.md is stale: run `python -m ropekit.cli.apidoc > docs/api.md`"
    )


def test_every_public_name_has_a_section() -> None:
    text = API_MD.read_text()
    for module in MODULES:
        mod = importlib.import_module(module)
        for name in mod.__all__:
            if not name.startswith("__"):
                assert f"### `{module}.{name}`" in text, f"{module}.{name}"


def test_every_subpackage_the_package_lists_is_documented() -> None:
    """README: every public function is in docs/api.md. The subpackages imported on demand are not in
    ``ropekit.__all__`` (ropekit.distributed was missing); the package docstring lists them, so they must be
    documented modules."""
    doc = ropekit.__doc__ or ""
    listed = set(
        re.findall(r"^ {4}(ropekit\.\w+)", doc[doc.index("Subpackages imported on demand:") :], re.MULTILINE)
    )
    assert {"ropekit.distributed", "ropekit.timm"} <= listed  # the docstring's list itself was read
    assert listed <= set(MODULES), sorted(listed - set(MODULES))
    text = API_MD.read_text()
    for name in ("ring_attention", "shard_positions", "seq_to_heads", "causal_pairs"):
        assert f"### `ropekit.distributed.{name}`\n\n```python\ndef {name}(" in text, name


def test_every_position_builder_and_preset_module_is_documented() -> None:
    """The position builders and preset tables users import by module path (README: ``ropekit.positions.time``,
    ``.grid``, ``.multimodal``, ``ropekit.presets_vl``) are enumerated from the packages, so a new one is covered."""
    import pkgutil

    import ropekit.positions

    wanted = {f"ropekit.positions.{m.name}" for m in pkgutil.iter_modules(ropekit.positions.__path__)}
    wanted |= {
        f"ropekit.{m.name}" for m in pkgutil.iter_modules(ropekit.__path__) if m.name.startswith("presets")
    }
    documented = {
        id(getattr(importlib.import_module(m), n))
        for m in MODULES
        for n in importlib.import_module(m).__all__
    }
    for module in sorted(wanted):
        mod = importlib.import_module(module)
        missing = [n for n in getattr(mod, "__all__", ()) if id(getattr(mod, n)) not in documented]
        assert not missing, (module, missing)


def test_type_aliases_are_shown_as_aliases() -> None:
    """Literal aliases are callable objects; they used to print as ``def Layout(*args, **kwargs)``."""
    text = API_MD.read_text()
    assert "(*args, **kwargs)\n" not in text
    assert (
        "### `ropekit.distributed.Layout`\n\nType alias: `Literal['contiguous', 'zigzag', 'stripe']`" in text
    )


def test_rotary_arguments_and_tables_api_documented() -> None:
    text = API_MD.read_text()
    rotary = text[text.index("### `ropekit.Rotary`") :]
    rotary = rotary[: rotary.index("\n### ")]
    for arg in ("spec", "max_seq_len", "format", "cache_limit", "device"):
        assert f"{arg}:" in rotary, arg
    for name in ("ropekit.rope_tables", "ropekit.apply_rope_tables"):
        section = text[text.index(f"### `{name}`") :]
        assert "```python\ndef " in section[:600], name
