# SPDX-License-Identifier: MIT
"""Render the README's performance table (its ```text block under "## Performance") from a `ropekit bench` JSON.

    python tools/bench_readme.py docs/bench-cpu.json                   # print the block
    python tools/bench_readme.py docs/bench-cpu.json --write README.md # replace the block in README.md

The README shows three of the benchmark's cases (prefill float32 and bfloat16, decode float32; half-split layout);
docs/kernels.md has every mode. tests/tools/test_bench_readme.py checks that the README's block is this render of
the committed docs/bench-cpu.json, so the table and the JSON cannot drift apart.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

CASES = ("prefill fp32 half", "prefill bf16 half", "decode fp32 half")
_BLOCK = re.compile(r"(## Performance\n.*?```text\n)(.*?)(```)", re.DOTALL)


def render(report: dict[str, Any]) -> str:
    """The text block (without the fences) for the matrix mode's CASES of ``report``."""
    m = report["machine"]
    head = f"machine: {m.get('cpu', '?')} ({m.get('cpu_count')} cores, {m.get('torch_threads')} torch threads)"
    lines = [f"{head}, torch {m['torch']}"]
    rows = [r for r in report["results"] if r.get("mode", "matrix") == "matrix"]
    for case in CASES:
        rs = [r for r in rows if r["case"] == case]
        if not rs:
            raise ValueError(f"the report has no matrix rows for case {case!r}")
        hf = next((r["median_ms"] for r in rs if r["impl"] == "transformers eager"), math.nan)
        lines += ["", case, f"  {'implementation':<42} {'median':>11}  {'x floor':>7}  {'vs HF eager':>11}"]
        for r in rs:
            ms = r["median_ms"]
            t = f"{ms * 1e3:.1f} us" if ms < 1 else f"{ms:.3f} ms"
            speed = f"{hf / ms:.1f}x" if not math.isnan(hf) else ""
            lines.append(f"  {r['impl']:<42} {t:>11}  {r['ratio_to_floor']:>7.2f}  {speed:>11}")
    return "\n".join(lines) + "\n"


def replace_block(readme: str, block: str) -> str:
    """``readme`` with its performance block replaced by ``block``; ValueError when it has none."""
    if not _BLOCK.search(readme):
        raise ValueError("README has no ```text block under '## Performance'")
    return _BLOCK.sub(lambda mt: mt.group(1) + block + mt.group(3), readme, count=1)


def current_block(readme: str) -> str:
    found = _BLOCK.search(readme)
    if found is None:
        raise ValueError("README has no ```text block under '## Performance'")
    return found.group(2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path, help="JSON written by `ropekit bench --out`")
    ap.add_argument("--write", type=Path, metavar="README", help="replace the block in this file")
    args = ap.parse_args(argv)
    block = render(json.loads(args.report.read_text()))
    if args.write is None:
        sys.stdout.write(block)
    else:
        args.write.write_text(replace_block(args.write.read_text(), block))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
