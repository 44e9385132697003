# SPDX-License-Identifier: MIT
"""Balance benchmark: ``python -m ropekit.distributed.balance [--seq-len S] [--world-size W ...]``.

Prints, for each layout and world size, the causal (query, key) pairs per rank, the imbalance max / mean, the ring
critical path (sum over steps of the busiest rank's pairs) against the ideal total / W, and the score entries
:func:`ropekit.distributed.ring_attention` actually computes (it skips empty rows and columns of a block, and
computes the rest densely) with their critical path against the same ideal (:mod:`ropekit.distributed.work`).
"""

from __future__ import annotations

import argparse

from ropekit.distributed.layouts import LAYOUTS
from ropekit.distributed.work import causal_pairs, ring_computed_entries, ring_step_pairs

__all__ = ["main", "report"]


def report(seq_len: int, world_sizes: list[int]) -> str:
    """The balance table printed by ``python -m ropekit.distributed.balance`` (Markdown)."""
    lines = [
        f"Causal (query, key) pairs per rank, seq_len = {seq_len}",
        "",
        (
            "| W | layout | causal pairs per rank | max / mean | ring critical path / ideal "
            "| ring_attention: score entries computed per rank | its critical path / ideal |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for w in world_sizes:
        usable = 0
        for layout in LAYOUTS:
            try:
                per = causal_pairs(seq_len, w, layout)  # type: ignore[arg-type]
            except ValueError as e:  # this layout cannot split seq_len over w ranks; the others may
                lines.append(f"| {w} | {layout} | cannot split: {e} | | | | |")
                continue
            usable += 1
            steps = ring_step_pairs(seq_len, w, layout)  # type: ignore[arg-type]
            mean = sum(per) / w
            crit = sum(max(s) for s in steps)
            done = ring_computed_entries(seq_len, w, layout)  # type: ignore[arg-type]
            done_per = [sum(step[r] for step in done) for r in range(w)]
            done_crit = sum(max(s) for s in done)
            lines.append(
                f"| {w} | {layout} | {', '.join(map(str, per))} | {max(per) / mean:.3f} | {crit / mean:.3f} "
                f"| {', '.join(map(str, done_per))} | {done_crit / mean:.3f} |"
            )
        if not usable:
            raise ValueError(f"no layout can split seq_len={seq_len} over world_size={w}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ropekit.distributed.balance", description=__doc__)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--world-size", type=int, nargs="+", default=[2, 4, 8])
    args = parser.parse_args(argv)
    try:
        table = report(args.seq_len, args.world_size)
    except ValueError as e:  # e.g. a length no layout can split over a world size: argparse's usage error, rc 2
        parser.error(str(e))
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
