# SPDX-License-Identifier: MIT
"""The kernel's warnings, attributed to the user's call (the first frame outside ropekit and torch), so that
``warnings`` shows the line that asked for the kernel, whatever the depth of ropekit's own frames below it.

Shapes: none.
"""

from __future__ import annotations

import os
import sys
import warnings

__all__: list[str] = []


def _warn(message: str) -> None:
    """warnings.warn attributed to the first frame outside ropekit and torch: the user's call."""
    import torch

    skip = tuple(
        {os.path.dirname(os.path.dirname(__file__)) + os.sep, os.path.dirname(torch.__file__) + os.sep}
        | {os.path.realpath(os.path.dirname(os.path.dirname(__file__))) + os.sep}
    )
    frame, level = sys._getframe(1), 2  # level 2: _warn's caller
    while frame is not None and (
        frame.f_code.co_filename.startswith(skip) or frame.f_code.co_filename.startswith("<frozen")
    ):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]  # None ends the loop
    warnings.warn(message, stacklevel=level)
