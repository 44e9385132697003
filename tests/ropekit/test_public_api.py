"""The public surface: everything in __all__ exists, the package is typed, and nothing is loaded via pickle."""

from __future__ import annotations

from pathlib import Path

import ropekit


def test_all_names_resolve() -> None:
    for name in ropekit.__all__:
        assert getattr(ropekit, name) is not None, name
    assert {"RopeSpec", "apply_rope", "Rotary", "rope_tables", "positions_from_mask"} <= set(ropekit.__all__)


def test_py_typed_marker_ships() -> None:
    assert (Path(ropekit.__file__).parent / "py.typed").exists()


def test_no_pickle_in_library_code() -> None:
    src = Path(ropekit.__file__).parent
    for f in src.rglob("*.py"):
        text = f.read_text()
        assert "import pickle" not in text and "torch.load(" not in text, f
