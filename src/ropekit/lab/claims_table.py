# SPDX-License-Identifier: MIT
"""The lab's claims beside the published figures they come from, with the lab's verdict judged afresh from the
committed result JSONs (``docs/results/*.json``), as a Markdown table kept in ``docs/lab.md``.

Each row is one claim an experiment judges (:mod:`ropekit.lab.verdicts`): the published figure (paper, table and
numbers, from ``shared/reference/papers.md``; "not in papers.md" where it has none), the quantity the lab measures,
and one verdict column per results folder, linking that folder's Markdown report. Ratios in the published column are
computed here from the papers' table entries, which are written out beside them.

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

from ropekit.lab.verdicts import Verdict

__all__ = ["BLOCKS", "ROWS", "Block", "Row", "judge", "main", "refresh", "table"]


@dataclass(frozen=True)
class Row:
    topic: str  # extrapolation | scaling | frequencies | passkey | counter-examples | vision
    experiment: str  # the results file stem whose claims() judges it
    claim: str  # the verdict's claim text starts with this
    published: str  # paper, table / figure, numbers
    quantity: str  # what the lab measures, and the test


def _r(a: float, b: float) -> str:
    return f"{a:g}/{b:g} = {a / b:.2f}"


_ALIBI = "ALiBi Table 2 (WikiText-103, 247M, L_train 512)"
_NIP = "not in papers.md"
ROWS: tuple[Row, ...] = (
    Row(
        "extrapolation",
        "extrapolation",
        "learned absolute positions break past their table",
        f"{_NIP} (seed 003; papers.md E1 expects learned absolute positions to degrade at once)",
        "ppl(2x)/ppl(1x) of learned > 1.2 on every seed",
    ),
    Row(
        "extrapolation",
        "extrapolation",
        "sinusoidal extrapolates worse than RoPE",
        f"{_ALIBI}, ppl at 2512 / at 512: sinusoidal {_r(132.41, 20.05)}, Rotary {_r(31.58, 20.07)}",
        "ppl(4x)/ppl(1x), sinusoidal vs rope, spreads apart",
    ),
    Row(
        "extrapolation",
        "extrapolation",
        "RoPE degrades beyond the trained length",
        f"{_ALIBI}: Rotary at 7512 / at 512 {_r(51.12, 20.07)}; Kazemnejad et al. 2023 (1.3B code model, "
        f"trained at 1024): RoPE at 1400 / at 1024 {_r(251.684, 2.146)}",
        "ppl(8x)/ppl(1x) of rope > 1.2 on every seed",
    ),
    Row(
        "extrapolation",
        "extrapolation",
        "alibi extrapolates: within 10% of its 1x perplexity at 8x",
        f"{_ALIBI}: ALiBi at 7512 / at 512 {_r(18.33, 19.73)}",
        "ppl(8x)/ppl(1x) of alibi < 1.1 on every seed",
    ),
    Row(
        "extrapolation",
        "extrapolation",
        "kerple-log extrapolates: within 10% of its 1x perplexity at 8x",
        f"{_NIP} (Chi et al. 2022; papers.md gives Kerple's formula only)",
        "ppl(8x)/ppl(1x) of kerple-log < 1.1 on every seed",
    ),
    Row(
        "extrapolation",
        "extrapolation",
        "alibi degrades less than RoPE at 2x",
        f"{_ALIBI}, ppl at 1012 / at 512: ALiBi {_r(18.73, 19.73)}, Rotary {_r(21.37, 20.07)}",
        "ppl(2x)/ppl(1x), rope vs alibi, spreads apart",
    ),
    Row(
        "extrapolation",
        "extrapolation",
        "nope degrades less than RoPE at 2x",
        f"Kazemnejad et al. 2023 (1.3B code model, trained at 1024), ppl at 1400 / at 1024: NoPE "
        f"{_r(2.121, 2.187)}, RoPE {_r(251.684, 2.146)}",
        "ppl(2x)/ppl(1x), rope vs nope, spreads apart",
    ),
    Row(
        "extrapolation",
        "extrapolation",
        "xpos degrades less than RoPE at 4x",
        f"{_NIP} (Sun et al. 2022; papers.md has xPos's formula and Xiong et al. Table 5 at 32k only: "
        "xPos-ABF 6.331 vs ABF 6.323 on Books)",
        "ppl(4x)/ppl(1x), rope vs xpos, spreads apart",
    ),
    Row(
        "extrapolation",
        "extrapolation",
        "fire degrades less than RoPE at 4x",
        f"{_NIP} (Li et al. 2023; papers.md gives FIRE's formula only)",
        "ppl(4x)/ppl(1x), rope vs fire, spreads apart",
    ),
    Row(
        "counter-examples",
        "extrapolation",
        "seed 004's counter-example single-frequency extrapolates worse than RoPE at 2x",
        f"{_NIP} (seed 004 sec. 8.2, an argument without a figure)",
        "ppl(2x)/ppl(1x), single-frequency vs rope, spreads apart",
    ),
    Row(
        "counter-examples",
        "extrapolation",
        "seed 004's counter-example dense-rotation extrapolates worse than RoPE at 2x",
        f"{_NIP} (seed 004 sec. 8.3, an argument without a figure)",
        "ppl(2x)/ppl(1x), dense-rotation vs rope, spreads apart",
    ),
    Row(
        "extrapolation",
        "extrapolation",
        "degradation at 4x orders ALiBi < T5 < RoPE < sinusoidal",
        f"{_ALIBI}, ppl at 2512 / at 512: ALiBi {_r(18.41, 19.73)}, T5 {_r(20.41, 19.65)}, Rotary "
        f"{_r(31.58, 20.07)}, sinusoidal {_r(132.41, 20.05)}",
        "ppl(4x)/ppl(1x), each neighbouring pair's spreads apart in that order",
    ),
    *(
        Row(
            "scaling",
            "scaling",
            f"{name} beats unscaled RoPE zero-shot at 4x",
            published,
            f"fraction of unscaled RoPE's degradation at 4x recovered by {name} > 0 on every seed",
        )
        for name, published in (
            (
                "linear",
                "PI Tables 1, 3 (LLaMA-7B, 2048 -> 8192): unscaled > 1e3 at 4096-32768; zero-shot PI 16.10 at 8192",
            ),
            ("ntk", f"{_NIP} as a number (YaRN sec. 3: NTK-aware is better than PI zero-shot)"),
            (
                "dynamic",
                (
                    "LongRoPE Table 1 (LLaMA2-7B 4k, no fine-tuning, PG19 at 16k = 4x): Dynamic-NTK 23.29 (PI 20.49); "
                    "the unscaled model's figure is not in papers.md"
                ),
            ),
            (
                "yarn",
                (
                    "LongRoPE Table 1 (LLaMA2-7B 4k, no fine-tuning, PG19 at 16k = 4x): YaRN 87.89 (PI 20.49); "
                    "the unscaled model's figure is not in papers.md"
                ),
            ),
            ("llama3", f"{_NIP} (the Llama 3.1 rule's reference code only)"),
        )
    ),
    Row(
        "scaling",
        "scaling",
        "NTK-aware beats PI zero-shot at 2x",
        "no NTK-aware figure in papers.md; LongRoPE Table 1 (LLaMA2-7B 4k, no fine-tuning, PG19 at 8k = 2x): "
        "Dynamic-NTK 10.21 vs PI 10.65",
        "fraction recovered at 2x, ntk vs linear, spreads apart",
    ),
    Row(
        "scaling",
        "scaling",
        "a short fine-tune makes PI good at 4x",
        "PI Table 3 (LLaMA-7B, 2048 -> 8192): ppl at 8192 16.10 before, 7.12 after 200 fine-tuning steps "
        "(Table 1: 7.20 at 2048 before extension)",
        "fraction recovered at 4x by PI after fine-tuning > 0.9 on every seed",
    ),
    Row(
        "scaling",
        "scaling",
        "after fine-tuning YaRN is at least as good as PI at 4x",
        "YaRN Table 1 (Llama-2-7B 4k -> 8k, fine-tuned, Proof-pile): at 8192 YaRN 3.35, PI 3.34; at 4096 "
        "YaRN 3.50, PI 3.51",
        "ppl_yarn(4x)/ppl_PI(4x) after fine-tuning < 1.01 on every seed",
    ),
    Row(
        "frequencies",
        "frequencies",
        "low-frequency bands carry the largest q norms",
        f"{_NIP} as a number (Barbero et al. 2025: Gemma-7B puts most q/k norm on the lowest frequencies)",
        "mean norm of q, lowest-frequency third / highest-frequency third > 1 on every seed (RoPE model)",
    ),
    Row(
        "frequencies",
        "frequencies",
        "positional heads rely on the highest-frequency bands",
        f"{_NIP} as a number (Barbero et al. 2025: Gemma-7B's diagonal and previous-token heads use the highest "
        "frequencies)",
        "fraction of positional heads whose top band is in the highest-frequency third > 0.5 on every seed",
    ),
    Row(
        "frequencies",
        "frequencies",
        "NoPE has the highest loss",
        "Barbero et al. Table 2 (Gemma 2B from scratch, Wiki ppl): NoPE 4.8594, RoPE 4.4627, 0.25-RoPE 4.5302, "
        "0.75-RoPE 4.4414",
        "loss(NoPE) - lowest p-RoPE loss at 1x > 0 on every seed",
    ),
    Row(
        "frequencies",
        "frequencies",
        "0.75-RoPE beats RoPE",
        "Barbero et al. Table 2: 0.75-RoPE 4.4414 vs RoPE 4.4627 (Wiki), 6.4422 vs 6.4429 (FlanV2)",
        "loss(RoPE) - loss(0.75-RoPE) at 1x > 0 on every seed (paired by seed)",
    ),
    Row(
        "frequencies",
        "frequencies",
        "0.25-RoPE is worse than 0.75-RoPE",
        "Barbero et al. Table 2: 0.25-RoPE 4.5302 vs 0.75-RoPE 4.4414 (Wiki), 6.5111 vs 6.4422 (FlanV2)",
        "loss(0.25-RoPE) - loss(0.75-RoPE) at 1x > 0 on every seed (paired by seed)",
    ),
    Row(
        "passkey",
        "passkey",
        "RoPE retrieves the key in-distribution",
        f"{_NIP} for an unextended model; YaRN Table 5: Together-7B (PI, 32k) 100 % within its context",
        "accuracy at 1x of rope > 0.5 on every seed",
    ),
    Row(
        "passkey",
        "passkey",
        "RoPE fails past its training length",
        "PI Table 4 (LLaMA-7B, 2048 -> 8192): fine-tuning without PI reaches an effective passkey window of 1792 "
        "after 200 steps, 2560 after 10 000; PI the full 8192 after 200",
        "accuracy at 8x of rope < 0.5 on every seed",
    ),
    Row(
        "passkey",
        "passkey",
        "ALiBi's local bias does not give long-range retrieval",
        f"{_NIP} (papers.md E5 expects it)",
        "accuracy at 8x of alibi < 0.5 on every seed",
    ),
    Row(
        "passkey",
        "passkey",
        "NoPE generalises past the training length better than RoPE",
        "Kazemnejad et al. 2023 (10 synthetic tasks, trained <= 20, tested to 2L): mean reciprocal rank NoPE "
        "0.69, RoPE 0.33",
        "accuracy at 2x, nope vs rope, spreads apart",
    ),
    Row(
        "counter-examples",
        "invariance",
        "RoPE is relative",
        f"{_NIP} (seed 004, theorem 1)",
        "shift error of rope < 1e-4 on every draw of q, k",
    ),
    Row(
        "counter-examples",
        "invariance",
        "a single frequency is still relative",
        f"{_NIP} (seed 004 sec. 8.2)",
        "shift error of single-frequency < 1e-4 on every draw",
    ),
    Row(
        "counter-examples",
        "invariance",
        "a single frequency cannot tell distances apart",
        f"{_NIP} (seed 004 sec. 8.2)",
        "confusability, rope vs single-frequency, spreads apart",
    ),
    Row(
        "counter-examples",
        "invariance",
        "a dense rotation family that is not a group breaks relative position",
        f"{_NIP} (seed 004 sec. 8.3)",
        "shift error of dense-rotation > 1e-2 on every draw",
    ),
    Row(
        "counter-examples",
        "invariance",
        "a dense rotation that is a one-parameter group is relative",
        f"{_NIP} (seed 004, orthogonal invariance)",
        "shift error of dense-group < 1e-4 on every draw",
    ),
    Row(
        "vision",
        "vision",
        "2-D axial RoPE beats learned absolute (interpolated) at 16x16",
        "RoPE-ViT (Heo et al. 2024), DeiT-S trained at 224, top-1 at 384: Axial 80.0 vs APE 79.4",
        "accuracy at 16x16, rope-axial vs learned, spreads apart",
    ),
    Row(
        "vision",
        "vision",
        "RoPE-Mixed beats learned absolute (interpolated) at 16x16",
        "RoPE-ViT, DeiT-S at 384: Mixed 81.8 vs APE 79.4",
        "accuracy at 16x16, rope-mixed vs learned, spreads apart",
    ),
    Row(
        "vision",
        "vision",
        "RoPE-Mixed beats 2-D axial RoPE at 16x16",
        "RoPE-ViT, DeiT-S at 384: Mixed 81.8 vs Axial 80.0",
        "accuracy at 16x16, rope-mixed vs rope-axial, spreads apart",
    ),
    Row(
        "vision",
        "vision",
        "2-D axial RoPE beats 1-D raster RoPE at 16x16",
        f"{_NIP} (papers.md E7 expects flattened 1-D positions to underperform)",
        "accuracy at 16x16, rope-axial vs rope-1d, spreads apart",
    ),
    Row(
        "vision",
        "vision",
        "2-D axial RoPE keeps more of its 8x8 accuracy at 16x16 than learned absolute",
        f"RoPE-ViT, DeiT-S top-1 at 384 / at 224: Axial {_r(80.0, 80.9)}, APE {_r(79.4, 80.4)}",
        "accuracy at 16x16 / at 8x8, rope-axial vs learned, spreads apart",
    ),
)


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
