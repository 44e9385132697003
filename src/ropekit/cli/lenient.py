# SPDX-License-Identifier: MIT
"""``--lenient`` of the commands that read a config.json (``inspect``, ``precision``, ``report``), and how the CLI
shows the parser's warnings.

By default a config is read as ``RopeSpec.from_hf`` reads it (strict: what transformers only warns about is
refused, naming the key and value). ``--lenient`` reads it with ``strict=False`` instead: what transformers accepts
with a warning is accepted, and the warning is printed on stderr (``ropekit inspect: warning: ...``). What
transformers itself refuses, or what no frequency table can come from, stays refused. A strict refusal that
``--lenient`` would read ends with a line saying so (:func:`error_text`).

Shapes: none (argument handling only).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from collections.abc import Iterator
from typing import Any, TextIO

from ropekit.hf.config import StrictRefusal, lenient_reading

__all__ = ["LENIENT_HELP", "add_lenient_arg", "cli_warnings", "error_text", "lenient_scope"]

LENIENT_HELP = (
    "read a config.json as transformers does where ropekit's strict reading refuses what transformers only warns "
    "about (e.g. a llama3 original_max_position_embeddings not below max_position_embeddings): accepted, with "
    "the warning on stderr (RopeSpec.from_hf(strict=False))"
)


def add_lenient_arg(p: argparse.ArgumentParser) -> None:
    """Register ``--lenient`` on a command's parser."""
    p.add_argument("--lenient", action="store_true", help=LENIENT_HELP)


def lenient_scope(args: argparse.Namespace) -> contextlib.AbstractContextManager[None]:
    """The block a command reads its config in: lenient with ``--lenient``, else as it is."""
    return lenient_reading() if getattr(args, "lenient", False) else contextlib.nullcontext()


def _is_strict_refusal(e: BaseException | None) -> bool:
    """True when ``e`` or an exception it was raised from (re-raised naming the file) is a strict refusal."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, StrictRefusal):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def error_text(e: ValueError, args: argparse.Namespace) -> str:
    """The error line of ``e``; a strict refusal of a command that has ``--lenient`` says that it would read it."""
    msg = str(e)
    if hasattr(args, "lenient") and not args.lenient and _is_strict_refusal(e):
        msg += " [--lenient reads it as transformers does, with this message as a warning]"
    return msg


@contextlib.contextmanager
def cli_warnings(command: str, err: TextIO | None = None) -> Iterator[None]:
    """Show the warnings raised in the block as ``ropekit COMMAND: warning: MESSAGE`` lines on stderr (each
    distinct message once), not as Python's ``file:line: UserWarning`` with a source line."""

    def show(
        message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
    ) -> None:
        print(f"ropekit {command}: warning: {message}", file=err or sys.stderr)

    with warnings.catch_warnings():
        if not sys.warnoptions:  # -W / PYTHONWARNINGS win; else each distinct message once per call
            warnings.simplefilter("default", UserWarning)
        warnings.showwarning = show
        yield
