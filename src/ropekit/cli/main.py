# SPDX-License-Identifier: MIT
"""Entry point of the ``ropekit`` console script: parses arguments and dispatches to a subcommand."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from ropekit.cli import inspect_cmd, precision_cmd
from ropekit.presets import PRESETS, get_preset
from ropekit.spec import LAYOUTS, RopeSpec

__all__ = ["build_parser", "main", "spec_from_args"]

DEFAULT_HEAD_DIM = 128
DEFAULT_BASE = 500_000.0  # Llama 3.x
DEFAULT_CONTEXT = 131_072  # Llama 3.1's extended context
_SPEC_FLAGS = ("head_dim", "base", "rotary_dim", "layout", "p")


def _add_spec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--head-dim", type=int, default=None, help=f"channels per head (default {DEFAULT_HEAD_DIM})"
    )
    p.add_argument("--base", type=float, default=None, help=f"frequency base (default {DEFAULT_BASE:g})")
    p.add_argument(
        "--rotary-dim", type=int, default=None, help="leading channels that rotate (default: head dim)"
    )
    p.add_argument("--layout", choices=LAYOUTS, default=None, help="channel pairing (default half)")
    p.add_argument("--p", type=float, default=None, help="p-RoPE fraction of frequencies kept (default 1)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ropekit", description="Rotary position embeddings, explained and exact."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    pi = sub.add_parser("inspect", help="explain a RoPE configuration band by band at a context length")
    pi.add_argument(
        "target", nargs="?", default=None, help="a preset name (`ropekit presets`) or a config.json path"
    )
    _add_spec_args(pi)
    pi.add_argument(
        "--context", type=int, default=None, help=f"context length (default {DEFAULT_CONTEXT} or the model's)"
    )
    pi.add_argument(
        "--layer-type", default=None, help="layer type of per-layer-type models (e.g. sliding_attention)"
    )
    pi.add_argument(
        "--extend-to", type=int, default=None, help="compare scaling schemes at this target length"
    )
    pi.add_argument(
        "--compare",
        default="linear,ntk,yarn,llama3",
        help="schemes for --extend-to (default linear,ntk,yarn,llama3)",
    )
    sub.add_parser("presets", help="list the embedded checkpoint presets")
    pb = sub.add_parser("bench", help="time ropekit's backends against the memory floor and the peers")
    pb.add_argument("--quick", action="store_true", help="a reduced matrix that finishes in under a minute")
    pb.add_argument("--json", action="store_true", help="print machine-readable JSON")
    pb.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="device to benchmark (default cpu)"
    )
    pb.add_argument(
        "--rounds", type=int, default=None, help="timed rounds per implementation (default 5 quick, 15 full)"
    )
    pb.add_argument(
        "--mode",
        action="append",
        default=None,
        choices=("matrix", "decode", "busy", "cache-write", "extension", "all"),
        help="what to time (repeatable; default matrix): see docs/kernels.md",
    )
    pb.add_argument("--out", default=None, help="also write the JSON report to this file")
    pl = sub.add_parser(
        "lab", help="train small models with each positional encoding and test the seeds' claims"
    )
    pl.add_argument(
        "experiment", choices=("extrapolation", "scaling", "frequencies", "passkey", "invariance")
    )
    pl.add_argument(
        "--out",
        default="lab-results",
        help="folder for the JSON, PNG, Markdown and checkpoints (default lab-results)",
    )
    pl.add_argument("--quick", action="store_true", help="a reduced budget (under 5 minutes)")
    pl.add_argument("--seeds", type=int, default=1, help="seeds per configuration (default 1)")
    pl.add_argument("--train-len", type=int, default=128, help="training length in bytes (default 128)")
    pl.add_argument(
        "--steps", type=int, default=None, help="training steps per model (default 800, quick 100)"
    )
    pl.add_argument(
        "--corpus", default=None, help="a text file or folder instead of the Python standard library"
    )
    pl.add_argument(
        "--encodings", default=None, help="comma-separated encodings (extrapolation, passkey; default: all)"
    )
    pl.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        default=None,
        help="training precision: fp32, or bf16 (mixed: bf16 matmuls, float32 weights/attention/RoPE; "
        "default bf16 with --quick, else fp32)",
    )
    pl.add_argument("--json", action="store_true", help="print the result JSON to stdout")
    pp = sub.add_parser("precision", help="phase error of ropekit vs the common float32 recipe, by position")
    _add_spec_args(pp)
    pp.add_argument(
        "--positions", type=str, default=None, help="comma-separated positions (default 1e3..1e7, 2^24)"
    )
    pp.add_argument(
        "--window", type=int, default=2048, help="positions measured ending at each position (default 2048)"
    )
    pp.add_argument("--markdown", action="store_true", help="print a Markdown table")
    from ropekit.cli import report_cmd

    report_cmd.add_parser(sub)
    return parser


def spec_from_args(args: argparse.Namespace) -> RopeSpec:
    return RopeSpec(
        head_dim=DEFAULT_HEAD_DIM if args.head_dim is None else args.head_dim,
        base=DEFAULT_BASE if args.base is None else args.base,
        rotary_dim=args.rotary_dim,
        layout="half" if args.layout is None else args.layout,
        p=1.0 if args.p is None else args.p,
    )


def _target_spec(args: argparse.Namespace) -> tuple[RopeSpec, int]:
    """Spec and default context from a preset name or a config.json path."""
    given = [f"--{k.replace('_', '-')}" for k in _SPEC_FLAGS if getattr(args, k) is not None]
    if given:
        raise ValueError(
            f"{', '.join(given)} cannot be combined with a preset or config file ({args.target!r})"
        )
    if args.target in PRESETS:
        preset = get_preset(args.target)
        return preset.spec(args.layer_type), preset.context
    path = Path(args.target)
    if not path.is_file():
        raise ValueError(f"{args.target!r} is neither a preset ({', '.join(PRESETS)}) nor a config.json file")
    cfg = json.loads(path.read_text())
    spec = RopeSpec.from_hf(cfg, layer_type=args.layer_type)
    return spec, int(cfg.get("max_position_embeddings") or DEFAULT_CONTEXT)


def _list_presets() -> int:
    width = max(map(len, PRESETS))
    for name, p in PRESETS.items():
        types = f"  [layer types: {', '.join(p.layer_types)}]" if p.layer_types else ""
        print(f"{name:<{width}}  {p.description}{types}")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    if args.target is not None:
        spec, context = _target_spec(args)
    else:
        spec, context = spec_from_args(args), DEFAULT_CONTEXT
    context = context if args.context is None else args.context
    if args.extend_to is not None:
        schemes = tuple(s.strip() for s in args.compare.split(",") if s.strip())
        return inspect_cmd.run_compare(
            spec, context, args.extend_to, schemes, as_json=args.json, out=sys.stdout
        )
    return inspect_cmd.run(spec, context, as_json=args.json, out=sys.stdout)


def _lab(args: argparse.Namespace) -> int:
    from ropekit.lab.experiments import EXPERIMENTS

    for name in ("seeds", "train_len"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    kw = {}
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
    progress = None if args.json else (lambda name: print(f"... {name}", file=sys.stderr, flush=True))
    modes = args.mode or ["matrix"]
    report = bench.run(
        quick=args.quick, device=args.device, rounds=args.rounds, progress=progress, modes=modes
    )
    print(json.dumps(report, indent=2) if args.json else bench.format_table(report))
    if args.out:
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
        if args.command == "presets":
            return _list_presets()
        if args.command == "inspect":
            return _inspect(args)
        if args.command == "bench":
            return _bench(args)
        if args.command == "lab":
            return _lab(args)
        if args.command == "report":
            from ropekit.cli import report_cmd

            return report_cmd.run(args)
        return precision_cmd.run(
            spec_from_args(args),
            args.positions,
            args.window,
            as_json=args.json,
            markdown=args.markdown,
            out=sys.stdout,
        )
    except ValueError as e:
        print(f"ropekit {args.command}: error: {e}", file=sys.stderr)
        return 2
