# SPDX-License-Identifier: MIT
"""Where a CLI command will write, checked before it starts working.

``ropekit bench --out FILE`` writes after minutes of timing, ``ropekit lab --out DIR`` after training, ``ropekit
report --out DIR`` after building its figures: an unusable path found only then loses the run (and surfaced as a
Python traceback). These checks run first and raise ``ValueError`` naming the flag and the path, which the CLI
prints as ``ropekit COMMAND: error: ...`` with exit status 2. Nothing is created by the checks.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["check_out_dir", "check_out_file"]


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _check_parent(flag: str, path: Path, what: str) -> None:
    """The folder that would hold ``path`` exists, or can be created below a writable folder."""
    anchor = _nearest_existing(path.parent)
    if not anchor.is_dir():
        raise ValueError(
            f"{flag} {str(path)!r}: {str(anchor)!r} is not a folder, so the {what} cannot be created"
        )
    if not os.access(anchor, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {str(path)!r}: the folder {str(anchor)!r} is not writable")


def _path(flag: str, value: str | Path, what: str) -> Path:
    """The path of a flag's value; an empty value (``--out "$UNSET"``) is refused, not read as the current folder."""
    if isinstance(value, str) and not value:
        raise ValueError(f"{flag} '': expected a {what} name, got an empty string")
    return Path(value)


def check_out_dir(flag: str, value: str | Path) -> None:
    """``value`` names a writable folder, or one that can be created (with its parents)."""
    path = _path(flag, value, "folder")
    if path.exists():
        if not path.is_dir():
            raise ValueError(
                f"{flag} {str(path)!r} exists and is not a folder (expected a folder, created if missing)"
            )
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(f"{flag} {str(path)!r}: the folder is not writable")
        return
    _check_parent(flag, path, "folder")


def check_out_file(flag: str, value: str | Path) -> None:
    """``value`` names a writable file, or one that can be created (its folder is created if missing)."""
    path = _path(flag, value, "file")
    if path.exists():
        if path.is_dir():
            raise ValueError(f"{flag} {str(path)!r} is a folder (expected a file name)")
        if not os.access(path, os.W_OK):
            raise ValueError(f"{flag} {str(path)!r}: the file is not writable")
        return
    _check_parent(flag, path, "file")
