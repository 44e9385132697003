# SPDX-License-Identifier: MIT
"""The lab's claims beside the published figures they come from, with the lab's verdict judged afresh from the
committed result JSONs (``docs/results/*.json``), as a Markdown table kept in ``docs/lab.md``.

Each row (:data:`ropekit.lab.published.ROWS`) is one claim an experiment judges (:mod:`ropekit.lab.verdicts`): the
published figure (paper, table and numbers, from ``shared/reference/papers.md``; "not in papers.md" where it has
none), the quantity the lab measures, and one verdict column per results folder, linking that folder's Markdown
report.

Refresh the tables in ``docs/lab.md`` after new runs::

    python -m ropekit.lab.claims_table --write docs/lab.md     # --check: exit 1 when a table is stale

A table sits between ``<!-- claims-table NAME -->`` and ``<!-- /claims-table -->``; NAME picks the row topics and the
results folders (relative to the document) in :data:`BLOCKS`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropekit.lab.published import ROWS, Row
from ropekit.lab.verdicts import Verdict

__all__ = ["BLOCKS", "Block", "judge", "main", "refresh", "table"]


@dataclass(frozen=True)
class Block:
    topics: tuple[str, ...]  # the row topics shown
    sources: tuple[tuple[str, str], ...]  # (column title, results folder relative to the document)
    only_judged: bool = False  # leave out rows that no source judges (e.g. encodings no run trained)


BLOCKS: dict[str, Block] = {
    "full": Block(
        ("extrapolation", "scaling", "frequencies", "passkey", "counter-examples", "vision"),
        (("lab verdict (committed results)", "results"),),
    ),
    "corpus2": Block(
        ("extrapolation",),
        (
            ("Python stdlib, full runs (committed results)", "results"),
            ("Python 3.11 docs, --quick (250 steps, bf16), 3 seeds", "results/corpus2"),
        ),
        only_judged=True,
    ),
}


def _judges() -> dict[str, Callable[[dict[str, Any]], list[Verdict]]]:
    from ropekit.lab.experiments import extrapolation, frequencies, invariance, passkey, scaling, vision

    def vision_claims(res: dict[str, Any]) -> list[Verdict]:
        encs = tuple(dict.fromkeys(r["encoding"] for r in res["results"]))
        return vision.claims(res["results"], encs, tuple(res["grids"]))

    return {
        "extrapolation": extrapolation.claims,
        "scaling": scaling.claims,
        "frequencies": frequencies.claims,
        "passkey": passkey.claims,
        "invariance": invariance.claims,
        "vision": vision_claims,
    }


def judge(results: Path) -> dict[str, list[Verdict] | None]:
    """Every experiment's verdicts, judged afresh from ``results/NAME.json`` (None where the file is missing)."""
    out: dict[str, list[Verdict] | None] = {}
    for name, claims in _judges().items():
        f = results / f"{name}.json"
        out[name] = claims(json.loads(f.read_text())) if f.exists() else None
    return out


def _cell(verdicts: list[Verdict] | None, row: Row, link: str) -> str:
    if verdicts is None:
        return f"not run (no `{row.experiment}.json` in `{link}`)"
    found = [v for v in verdicts if v.claim.startswith(row.claim)]
    if not found:
        return f"not judged by this run (e.g. its encodings were not trained; [{row.experiment}]({link}/{row.experiment}.md))"
    v = found[0]
    return f"**{v.status}**: {v.evidence} ([{row.experiment}]({link}/{row.experiment}.md))"


def table(
    doc_dir: Path, topics: Sequence[str], sources: Sequence[tuple[str, str]], *, only_judged: bool = False
) -> str:
    """The Markdown table of the rows in ``topics``, one verdict column per (title, results folder relative to
    ``doc_dir``); ``only_judged`` leaves out the rows no source judges."""
    unknown = sorted(set(topics) - {r.topic for r in ROWS})
    if unknown:
        raise ValueError(f"topics {unknown} are not row topics; known: {sorted({r.topic for r in ROWS})}")
    judged = [judge(doc_dir / rel) for _, rel in sources]
    head = [
        "topic",
        "claim",
        "published (paper, table: numbers)",
        "lab quantity and test",
        *(t for t, _ in sources),
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in (r for r in ROWS if r.topic in topics):
        cells = [_cell(j[row.experiment], row, rel) for j, (_, rel) in zip(judged, sources)]
        if only_judged and all(not c.startswith("**") for c in cells):
            continue
        cells = [row.topic, row.claim, row.published, row.quantity, *cells]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


_BLOCK = re.compile(r"(<!-- claims-table (\w+) -->\n)(.*?)(<!-- /claims-table -->)", re.DOTALL)


def refresh(doc: Path) -> str:
    """``doc``'s text with every claims-table block regenerated from the result JSONs."""
    text = doc.read_text()

    def sub(m: re.Match[str]) -> str:
        name = m.group(2)
        if name not in BLOCKS:
            raise ValueError(f"{doc}: claims-table block {name!r} is not one of {sorted(BLOCKS)}")
        b = BLOCKS[name]
        return m.group(1) + table(doc.parent, b.topics, b.sources, only_judged=b.only_judged) + m.group(4)

    return _BLOCK.sub(sub, text)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m ropekit.lab.claims_table", description=__doc__.split("\n")[0]
    )
    ap.add_argument("doc", nargs="?", default="docs/lab.md", help="the document holding the tables")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="rewrite the tables in place")
    group.add_argument("--check", action="store_true", help="exit 1 when a table is stale")
    args = ap.parse_args(argv)
    doc = Path(args.doc)
    if not doc.is_file():
        raise SystemExit(f"doc {str(doc)!r} is not a file")
    new = refresh(doc)
    if args.write:
        doc.write_text(new)
    elif args.check:
        if new != doc.read_text():
            print(f"{doc}: claims tables are stale; run python -m ropekit.lab.claims_table --write {doc}")
            return 1
    else:  # print the tables only
        sys.stdout.write("".join(m.group(0) + "\n" for m in _BLOCK.finditer(new)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
