# SPDX-License-Identifier: MIT
"""Entry point of the ``ropekit`` console script: parses arguments and dispatches to a subcommand."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

from ropekit.analysis.compare import SCHEMES
from ropekit.analysis.threads import single_thread
from ropekit.cli import inspect_cmd, precision_cmd
from ropekit.cli.lenient import cli_warnings, error_text
from ropekit.cli.outputs import check_out_dir, check_out_file
from ropekit.cli.presets_cmd import list_presets
from ropekit.cli.source import add_source_args, check_length, resolve_views

__all__ = ["DEFAULT_COMPARE", "build_parser", "main"]

DEFAULT_COMPARE = ",".join(SCHEMES)


def _positive_int(text: str) -> int:
    """argparse type of a count: argparse names the option ("argument --rounds: ...") and exits with status 2."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive int, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive int, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ropekit", description="Rotary position embeddings, explained and exact."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    pi = sub.add_parser("inspect", help="explain a RoPE configuration band by band at a context length")
    add_source_args(pi)
    pi.add_argument(
        "--extend-to",
        type=int,
        default=None,
        help="compare scaling schemes at this target length, <= 2^53 (default with --compare: the context of an extended model, else 4 x L0)",
    )
    pi.add_argument(
        "--compare",
        nargs="?",
        const=DEFAULT_COMPARE,
        default=None,
        help="comma-separated schemes to compare (default with --extend-to: linear,ntk,dynamic,yarn,llama3)",
    )
    pr = sub.add_parser("presets", help="list the embedded checkpoint presets")
    pr.add_argument("--json", action="store_true", help="print machine-readable JSON")
    pb = sub.add_parser("bench", help="time ropekit's backends against the memory floor and the peers")
    pb.add_argument("--quick", action="store_true", help="a reduced matrix that finishes in under a minute")
    pb.add_argument("--json", action="store_true", help="print machine-readable JSON")
    pb.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="device to benchmark (default cpu)"
    )
    pb.add_argument(
        "--rounds",
        type=_positive_int,
        default=None,
        help="timed rounds per implementation, >= 1 (default 5 quick, 15 full)",
    )
    pb.add_argument(
        "--mode",
        action="append",
        default=None,
        choices=("matrix", "decode", "busy", "cache-write", "extension", "axes", "hf", "lab", "all"),
        help="what to time (repeatable; default matrix): see docs/kernels.md",
    )
    pb.add_argument("--out", default=None, help="also write the JSON report to this file")
    pl = sub.add_parser(
        "lab", help="train small models with each positional encoding and test the seeds' claims"
    )
    pl.add_argument(
        "experiment", choices=("extrapolation", "scaling", "frequencies", "passkey", "invariance", "vision")
    )
    pl.add_argument(
        "--out",
        default="lab-results",
        help="folder for the JSON, PNG, Markdown and checkpoints (default lab-results)",
    )
    pl.add_argument("--quick", action="store_true", help="a reduced budget (under 5 minutes)")
    pl.add_argument("--seeds", type=int, default=1, help="seeds per configuration (default 1)")
    pl.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="extrapolation: the first seed, >= 0 (default 0); runs of disjoint seeds can be merged (--merge)",
    )
    pl.add_argument(
        "--train-len",
        type=int,
        default=128,
        help="training length in bytes (default 128; invariance: distances up to 8 x it; not for vision)",
    )
    pl.add_argument(
        "--steps",
        type=int,
        default=None,
        help="training steps per model, >= 1 (default 800, quick 250; not for invariance)",
    )
    pl.add_argument(
        "--corpus", default=None, help="a text file or folder instead of the Python standard library"
    )
    pl.add_argument(
        "--encodings",
        default=None,
        help="comma-separated encodings (extrapolation, passkey; default: the original six, "
        "nope,sinusoidal,learned,alibi,t5,rope)",
    )
    pl.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        default=None,
        help="training precision: fp32, or bf16 (mixed: bf16 matmuls, float32 weights/attention/RoPE; "
        "default bf16 with --quick, else fp32)",
    )
    pl.add_argument("--json", action="store_true", help="print the result JSON to stdout")
    pl.add_argument(
        "--merge",
        action="append",
        default=None,
        metavar="JSON",
        help="extrapolation only, no training: merge result JSONs of runs with the same budget and corpus "
        "(e.g. encodings trained in separate processes) into --out (repeat, at least twice)",
    )
    pp = sub.add_parser("precision", help="phase error of ropekit vs the common float32 recipe, by position")
    add_source_args(pp)
    pp.add_argument(
        "--positions",
        type=str,
        default=None,
        help="comma-separated positions (default 1e3..1e7, 2^24; with --context C: those below C, then C)",
    )
    pp.add_argument(
        "--window",
        type=int,
        default=2048,
        help="positions measured ending at each position (default 2048; from 0 for a position below it)",
    )
    pp.add_argument("--markdown", action="store_true", help="print a Markdown table")
    from ropekit.cli import report_cmd

    report_cmd.add_parser(sub)
    return parser


def _inspect(args: argparse.Namespace) -> int:
    if args.extend_to is not None:
        check_length("--extend-to", args.extend_to)
    source, views = resolve_views(args)
    if args.extend_to is not None or args.compare is not None:
        schemes = tuple(
            s.strip()
            for s in (DEFAULT_COMPARE if args.compare is None else args.compare).split(",")
            if s.strip()
        )
        if not schemes:
            raise ValueError(f"--compare needs at least one scheme, got {args.compare!r}")
        if len(set(schemes)) != len(schemes):
            raise ValueError(f"--compare lists a scheme twice: {args.compare!r}")
        return inspect_cmd.run_compare_views(
            source, views, args.extend_to, schemes, as_json=args.json, out=sys.stdout
        )
    return inspect_cmd.run_views(source, views, as_json=args.json, out=sys.stdout)


def _precision(args: argparse.Namespace) -> int:
    """--context C measures the default positions below C and C itself; with spec flags it also sets the
    default L0 of --scaling dynamic/yarn/llama3 (C / factor). With --positions it has no other use: refused."""
    sets_l0 = (
        args.source is None and args.scaling in ("dynamic", "yarn", "llama3") and args.original_length is None
    )
    if args.context is not None and args.positions is not None and not sets_l0:
        raise ValueError(
            f"--context {args.context} has no effect with --positions {args.positions!r}: --context picks the "
            "positions measured (the defaults below it, then it), and the spec "
            + ("comes from SOURCE" if args.source is not None else "has no length of its own")
            + "; drop one of them"
        )
    source, views = resolve_views(args)
    return precision_cmd.run_views(
        source,
        views,
        args.positions,
        args.window,
        as_json=args.json,
        markdown=args.markdown,
        out=sys.stdout,
        context=args.context,
    )


def _lab(args: argparse.Namespace) -> int:
    from ropekit.lab.experiments import EXPERIMENTS

    for name in ("seeds", "train_len", "steps"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    defaults = vars(build_parser().parse_args(["lab", args.experiment]))
    unused, why = {  # flags an experiment has no use for: refused rather than ignored
        "invariance": (("steps", "corpus", "precision"), "it trains nothing; --train-len sets its distances"),
        "vision": (("train_len", "corpus", "precision"), "it trains small ViTs on synthetic shape scenes"),
        "passkey": (("corpus",), "its sequences are synthetic filler text around a hidden key"),
    }.get(args.experiment, ((), ""))
    given = [f"--{n.replace('_', '-')} {getattr(args, n)}" for n in unused if getattr(args, n) != defaults[n]]
    if given:
        raise ValueError(f"lab {args.experiment} does not take {', '.join(given)} ({why})")
    check_out_dir("--out", args.out)  # before training, not after
    kw: dict[str, Any] = {}
    if args.encodings is not None:
        from ropekit.lab.encodings import ENCODINGS

        if args.experiment not in ("extrapolation", "passkey"):
            raise ValueError(f"--encodings applies to extrapolation and passkey, not {args.experiment}")
        encs = tuple(e.strip() for e in args.encodings.split(",") if e.strip())
        bad = [e for e in encs if e not in ENCODINGS]
        if bad or not encs:
            raise ValueError(
                f"--encodings {args.encodings!r}: known encodings are {', '.join(sorted(ENCODINGS))}"
            )
        kw["encodings"] = encs
    if args.precision is not None:
        kw["precision"] = args.precision
    if args.first_seed != defaults["first_seed"]:
        if args.experiment != "extrapolation":
            raise ValueError(f"--first-seed applies to extrapolation only, not {args.experiment}")
        if args.first_seed < 0:
            raise ValueError(f"--first-seed must be >= 0, got {args.first_seed}")
        kw["first_seed"] = args.first_seed
    if args.merge is not None:
        training = ("seeds", "first_seed", "train_len", "steps", "corpus", "encodings", "precision")
        given = [f"--{name.replace('_', '-')}" for name in training if getattr(args, name) != defaults[name]]
        if args.experiment != "extrapolation" or given:
            raise ValueError(
                "--merge merges extrapolation results without training (the merged runs fix the budget); got "
                f"experiment {args.experiment!r}" + (f" with {', '.join(given)}" if given else "")
            )
        from ropekit.lab.experiments.extrapolation import merge

        res = merge(Path(args.out), [Path(p) for p in args.merge], quick=args.quick)
    else:
        res = EXPERIMENTS[args.experiment](
            Path(args.out),
            quick=args.quick,
            seeds=args.seeds,
            train_len=args.train_len,
            steps=args.steps,
            corpus=args.corpus,
            **kw,
        )
    if args.json:
        print(json.dumps({k: v for k, v in res.items() if k != "files"}, indent=2))
    else:
        print(Path(res["files"]["markdown"]).read_text())
        print(f"written: {', '.join(res['files'].values())}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from ropekit import bench

    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("--device cuda: no CUDA device is available")
    if args.out is not None:
        check_out_file("--out", args.out)  # before minutes of timing, not after
    progress = None if args.json else (lambda name: print(f"... {name}", file=sys.stderr, flush=True))
    modes = args.mode or ["matrix"]
    report = bench.run(
        quick=args.quick, device=args.device, rounds=args.rounds, progress=progress, modes=modes
    )
    print(json.dumps(report, indent=2) if args.json else bench.format_table(report))
    if args.out is not None:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
    return 0


def main(argv: list[str] | None = None) -> int:
    if hasattr(signal, "SIGPIPE") and argv is None:  # `ropekit inspect | head` ends quietly
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        if args.command not in ("inspect", "precision", "report"):
            return _dispatch(parser, args)
        with cli_warnings(args.command):  # the config reader's warnings (--lenient's among them)
            return _dispatch(parser, args)
    except ValueError as e:
        print(f"ropekit {args.command}: error: {error_text(e, args)}", file=sys.stderr)
        return 2
    except OSError as e:  # a file or folder the checks could not foresee (a full disk, /proc, a race)
        print(f"ropekit {args.command}: error: {e}", file=sys.stderr)
        return 2


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run the parsed command (``main`` reports its ValueError / OSError)."""
    if args.command in ("presets", "inspect", "precision"):
        with single_thread():  # thousands of small tensor ops: threads only add synchronisation
            if args.command == "presets":
                return list_presets(as_json=args.json, out=sys.stdout)
            if args.command == "inspect":
                return _inspect(args)
            return _precision(args)
    if args.command == "bench":
        return _bench(args)
    if args.command == "lab":
        return _lab(args)
    if args.command == "report":
        from ropekit.cli import report_cmd

        return report_cmd.run(args)
    parser.error(f"unknown command {args.command!r}")  # pragma: no cover - argparse refuses it first
