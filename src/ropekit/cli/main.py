# SPDX-License-Identifier: MIT
"""Entry point of the ``ropekit`` console script: parses arguments and dispatches to a subcommand."""

from __future__ import annotations

import argparse
import sys

from ropekit.cli import inspect_cmd, precision_cmd
from ropekit.spec import LAYOUTS, RopeSpec

__all__ = ["main", "build_parser", "spec_from_args"]

DEFAULT_HEAD_DIM = 128
DEFAULT_BASE = 500_000.0  # Llama 3.x
DEFAULT_CONTEXT = 131_072  # Llama 3.1's extended context


def _add_spec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--head-dim",
        type=int,
        default=DEFAULT_HEAD_DIM,
        help=f"channels per head (default {DEFAULT_HEAD_DIM})",
    )
    p.add_argument(
        "--base", type=float, default=DEFAULT_BASE, help=f"frequency base (default {DEFAULT_BASE:g})"
    )
    p.add_argument(
        "--rotary-dim", type=int, default=None, help="leading channels that rotate (default: head dim)"
    )
    p.add_argument("--layout", choices=LAYOUTS, default="half", help="channel pairing (default half)")
    p.add_argument("--p", type=float, default=1.0, help="p-RoPE fraction of frequencies kept (default 1)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ropekit", description="Rotary position embeddings, explained and exact."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    pi = sub.add_parser("inspect", help="explain a RoPE configuration band by band at a context length")
    _add_spec_args(pi)
    pi.add_argument(
        "--context", type=int, default=DEFAULT_CONTEXT, help=f"context length (default {DEFAULT_CONTEXT})"
    )
    pp = sub.add_parser("precision", help="phase error of ropekit vs the common float32 recipe, by position")
    _add_spec_args(pp)
    pp.add_argument(
        "--positions", type=str, default=None, help="comma-separated positions (default 1e3..1e7, 2^24)"
    )
    pp.add_argument(
        "--window", type=int, default=2048, help="positions measured ending at each position (default 2048)"
    )
    pp.add_argument("--markdown", action="store_true", help="print a Markdown table")
    return parser


def spec_from_args(args: argparse.Namespace) -> RopeSpec:
    return RopeSpec(
        head_dim=args.head_dim, base=args.base, rotary_dim=args.rotary_dim, layout=args.layout, p=args.p
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        spec = spec_from_args(args)
        if args.command == "inspect":
            return inspect_cmd.run(spec, args.context, as_json=args.json, out=sys.stdout)
        return precision_cmd.run(
            spec, args.positions, args.window, as_json=args.json, markdown=args.markdown, out=sys.stdout
        )
    except ValueError as e:
        print(f"ropekit {args.command}: error: {e}", file=sys.stderr)
        return 2
