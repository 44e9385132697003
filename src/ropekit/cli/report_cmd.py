# SPDX-License-Identifier: MIT
"""``ropekit report SOURCE --out DIR [--json]``: write DIR/index.html, a self-contained page of figures.

SOURCE: a preset name, a config.json, a transformers model folder (weights analysed with the ``hf`` extra) or a
lab checkpoint. A model folder whose only weights are pickle files (``pytorch_model.bin``; never loaded) gets the
configuration-only report, with a note on stderr, on the page and in the JSON (``weights_note``: both written by
:func:`ropekit.report.build.build_report`). Prints the page's path (on stderr with ``--json``, which prints the
numbers on stdout), and the build time on stderr (the page itself carries none: the same SOURCE gives the same
bytes). ``--lenient`` reads a config.json as ``RopeSpec.from_hf(strict=False)`` does (:mod:`ropekit.cli.lenient`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from ropekit.cli.lenient import add_lenient_arg, lenient_scope

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Register the ``report`` subcommand on ``sub`` (argparse subparsers)."""
    p = sub.add_parser("report", help="write a self-contained HTML page of figures for a RoPE configuration")
    p.add_argument(
        "source",
        help="a preset name, config.json, transformers model folder or lab checkpoint (.safetensors)",
    )
    p.add_argument("--out", required=True, help="folder for index.html (created if missing)")
    p.add_argument(
        "--context",
        type=int,
        default=None,
        help="context length (default: the config's max_position_embeddings, else transformers' default for its "
        "model_type where ropekit knows it; otherwise the config is refused; for a YaRN config whose context "
        "equals its original_max_position_embeddings L0, L0 x factor)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the numbers behind every figure as JSON (also written to DIR/report.json)",
    )
    add_lenient_arg(p)


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``ropekit report`` for parsed ``args``; ``out``/``err`` default to the current sys.stdout/stderr."""
    from ropekit.cli.outputs import check_out_dir
    from ropekit.cli.source import check_length
    from ropekit.report.build import build_report
    from ropekit.report.page import write_report
    from ropekit.report.sources import resolve

    if args.context is not None:
        check_length("--context", args.context)
    check_out_dir("--out", args.out)  # before the figures are built, not after
    _check_lenient(args)
    t0 = time.perf_counter()
    with lenient_scope(
        args
    ):  # --lenient: the config (and a model folder's patch) read as strict=False reads it
        source = resolve(args.source, context=args.context)
        report = build_report(source)  # with the note on skipped weights (Source.weights_note), if any
    path = write_report(report, Path(args.out))
    out, err = out or sys.stdout, err or sys.stderr
    if source.context_note:
        print(f"ropekit report: context {source.context:,} tokens: {source.context_note}", file=err)
    if source.weights_note:
        print(f"ropekit report: {source.weights_note}", file=err)
    print(f"ropekit report: built in {time.perf_counter() - t0:.1f} s", file=err)
    if args.json:
        (Path(args.out) / "report.json").write_text(json.dumps(report.data) + "\n")
        print(json.dumps(report.data), file=out)
        print(str(path), file=err)
    else:
        print(str(path), file=out)
    return 0


def _check_lenient(args: argparse.Namespace) -> None:
    """Refuse ``--lenient`` for a SOURCE without a config.json to read (a preset, a lab checkpoint)."""
    from ropekit.presets import PRESETS

    if getattr(args, "lenient", False) and (args.source in PRESETS or args.source.endswith(".safetensors")):
        raise ValueError(
            f"--lenient applies to a config.json or model folder SOURCE (how its keys are read); {args.source!r} "
            "has no config to read: drop it"
        )
