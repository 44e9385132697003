"""The GPU numbers in README.md and docs/kernels.md are the committed runs' numbers (docs/bench-gpu-h200*.json),
not retyped by hand: every microsecond figure in the README's GPU table and in the kernels.md prefill table is
looked up in the JSON of the run the text names (run 3: docs/bench-gpu-h200.json, run 2: ...-sweep.json)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN3 = json.loads((ROOT / "docs" / "bench-gpu-h200.json").read_text())
RUN2 = json.loads((ROOT / "docs" / "bench-gpu-h200-sweep.json").read_text())
COLUMNS = [
    "copy (floor)",
    "ropekit apply_rope_tables",
    "ropekit apply_rope (positions)",
    "transformers eager",
    "transformers torch.compile",
    "liger-kernel",
    "flash-attn triton",
]

ENTRY_POINTS_AND_HF = [
    "copy (floor)",
    "ropekit apply_rope_tables",
    "ropekit apply_rope (positions)",
    "ropekit Rotary module",
    "transformers eager",
    "transformers torch.compile",
]


def _case(run: dict, **want: object) -> dict:
    hits = [r for r in run["results"] if all(r.get(k) == v for k, v in want.items())]
    assert len(hits) == 1, want
    return hits[0]["rows"]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _num(cell: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+(?:\.\d+)?", cell.replace("**", ""))]


def _readme_table() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    start = text.index("| Llama-3 8B heads (32 q / 8 kv × 128) |")
    lines = text[start:].split("\n\n")[0].splitlines()
    return [_cells(line) for line in lines[2:]]


@pytest.mark.parametrize(
    "label,tokens,layout",
    [
        ("prefill 32k tokens, half", 32768, "half"),
        ("prefill 32k tokens, interleaved", 32768, "interleaved"),
        ("prefill 4k tokens, half", 4096, "half"),
    ],
)
def test_readme_prefill_rows_are_run_3(label: str, tokens: int, layout: str) -> None:
    row = next(r for r in _readme_table() if r[0] == label)
    rows = _case(RUN3, case="prefill", model="llama3-8b", tokens=tokens, layout=layout)
    for name, cell in zip(COLUMNS, row[1:]):
        if cell == "n/a":
            assert "us" not in rows.get(name, {}), name
            continue
        assert _num(cell) == [round(rows[name]["us"], 1)], (name, cell)


def test_readme_decode_row_is_run_2() -> None:
    row = next(r for r in _readme_table() if r[0].startswith("decode batch 64"))
    rows = _case(RUN2, case="decode", model="llama3-8b", batch=64)
    for name, cell in zip(COLUMNS, row[1:]):
        host, graph = _num(cell)
        assert host == round(rows[name]["host_us"], 1) and graph == round(rows[name]["graph_us"], 2), (
            name,
            cell,
        )


def test_kernels_md_prefill_table_is_run_3() -> None:
    text = (ROOT / "docs" / "kernels.md").read_text()
    start = text.index("### Prefill (run 3, H200")
    lines = [
        ln for ln in text[start:].split("\n\n")[0].splitlines() if ln.startswith("| ") and "---" not in ln
    ]
    checked = 0
    for line in lines[1:]:
        cells = _cells(line)
        model, tok, layout = re.match(r"(8B|70B), (4k|32k), (\w+)", cells[0]).groups()  # type: ignore[union-attr]
        rows = _case(
            RUN3,
            case="prefill",
            model=f"llama3-{model.lower()}",
            tokens=4096 if tok == "4k" else 32768,
            layout=layout,
        )
        for name, cell in zip(COLUMNS, cells[1:]):
            if cell == "n/a":
                continue
            assert _num(cell)[0] == round(rows[name]["us"], 1), (cells[0], name, cell)
            checked += 1
    assert checked >= 30


def test_kernels_md_decode_table_is_run_2() -> None:
    text = (ROOT / "docs" / "kernels.md").read_text()
    start = text.index("| batch | copy | ropekit tables given |")
    lines = [ln for ln in text[start:].split("\n\n")[0].splitlines() if "---" not in ln][1:]
    names = [*ENTRY_POINTS_AND_HF, "liger-kernel", "flash-attn triton"]
    assert len(lines) == 6
    for line in lines:
        cells = _cells(line)
        rows = _case(RUN2, case="decode", model="llama3-8b", batch=int(cells[0]))
        for name, cell in zip(names, cells[1:], strict=True):
            host, graph = _num(cell)
            assert host == round(rows[name]["host_us"], 1), (cells[0], name, cell)
            assert graph == round(rows[name]["graph_us"], 2), (cells[0], name, cell)


def test_kernels_md_mid_size_table_is_run_4() -> None:
    """Run 4's prefill table (H100, 256-4,096 tokens): every time and percent of copy is docs/bench-gpu-h100-mid.json."""
    run4 = json.loads((ROOT / "docs" / "bench-gpu-h100-mid.json").read_text())
    assert run4["machine"]["gpu"] == "NVIDIA H100 80GB HBM3"
    text = (ROOT / "docs" / "kernels.md").read_text()
    start = text.index("| shape, layout | tokens | copy | tables given |")
    lines = [ln for ln in text[start:].split("\n\n")[0].splitlines() if "---" not in ln][1:]
    names = ENTRY_POINTS_AND_HF
    assert len(lines) == 15
    for line in lines:
        cells = _cells(line)
        model, layout = re.match(r"(8B|70B), (\w+)", cells[0]).groups()  # type: ignore[union-attr]
        rows = _case(
            run4, case="prefill", model=f"llama3-{model.lower()}", tokens=int(cells[1]), layout=layout
        )
        copy = rows["copy (floor)"]["us"]
        for name, cell in zip(names, cells[2:], strict=True):
            if cell == "n/a":
                assert "us" not in rows[name], (cells[:2], name)
                continue
            got = _num(cell)
            assert got[0] == round(rows[name]["us"], 1), (cells[:2], name, cell)
            if len(got) > 1:
                assert got[1] == round(100 * copy / rows[name]["us"]), (cells[:2], name, cell)


def test_kernels_md_liger_gap_table_is_run_7() -> None:
    """Run 7's same-loop table (H100): copy, the default launch and Liger are docs/bench-gpu-h100-run7.json's cells;
    the two "best" columns are the minimum over their configurations in the same JSON; percents are copy / time."""
    run7 = json.loads((ROOT / "docs" / "bench-gpu-h100-run7.json").read_text())
    assert run7["machine"]["gpu"] == "NVIDIA H100 80GB HBM3"
    text = (ROOT / "docs" / "kernels.md").read_text()
    start = text.index("| shape | tokens | copy | ropekit (default launch) | Liger |")
    lines = [ln for ln in text[start:].split("\n\n")[0].splitlines() if "---" not in ln][1:]
    assert len(lines) == len(run7["results"]) == 8
    for line in lines:
        cells = _cells(line)
        (us,) = [
            r["us"]
            for r in run7["results"]
            if r["model"] == f"llama3-{cells[0].lower()}" and r["tokens"] == int(cells[1].replace(",", ""))
        ]
        expect = [
            us["copy"],
            us["default"],
            us["liger"],
            min(v for n, v in us.items() if n.startswith("all_heads")),
            min(v for n, v in us.items() if n.startswith("loop")),
        ]
        for want, cell in zip(expect, cells[2:], strict=True):
            got = _num(cell)
            assert got[0] == round(want, 1), (cells[:2], cell)
            if len(got) > 1:
                assert got[1] == round(100 * us["copy"] / want), (cells[:2], cell)


def test_kernels_md_liger_gap_table_is_run_8() -> None:
    """Run 8's same-loop table (H100): copy, the default launch and Liger are docs/bench-gpu-h100-run8.json's cells;
    the "best" column is the minimum over the head-loop configurations; percents are copy / time."""
    run8 = json.loads((ROOT / "docs" / "bench-gpu-h100-run8.json").read_text())
    assert run8["machine"]["gpu"] == "NVIDIA H100 80GB HBM3"
    text = (ROOT / "docs" / "kernels.md").read_text()
    start = text.index("### Run 8")
    start = text.index("| shape | tokens | copy |", start)
    lines = [ln for ln in text[start:].split("\n\n")[0].splitlines() if "---" not in ln][1:]
    assert len(lines) == len(run8["results"]) == 8
    for line in lines:
        cells = _cells(line)
        (us,) = [
            r["us"]
            for r in run8["results"]
            if r["model"] == f"llama3-{cells[0].lower()}" and r["tokens"] == int(cells[1].replace(",", ""))
        ]
        expect = [
            us["copy"],
            us["default"],
            us["liger"],
            min(v for n, v in us.items() if n.startswith("loop")),
        ]
        assert len(cells) == 2 + len(expect), line
        for column, (want, cell) in enumerate(zip(expect, cells[2:], strict=True)):
            got = _num(cell)
            assert got[0] == round(want, 1), (cells[:2], cell)
            assert len(got) == (1 if column == 0 else 2), (cells[:2], cell)  # copy has no percent
            if column:
                assert got[1] == round(100 * us["copy"] / want), (cells[:2], cell)


def test_kernels_md_multi_axis_tables_are_run_9() -> None:
    """Run 9's multi-axis tables (H100): every cell is docs/bench-gpu-h100-run9.json's, before and after the
    position kernels took an axis map; prefill cells are device µs, decode cells host µs / graph µs."""
    run9 = json.loads((ROOT / "docs" / "bench-gpu-h100-run9.json").read_text())
    assert run9["machine"]["gpu"] == "NVIDIA H100 80GB HBM3"
    text = (ROOT / "docs" / "kernels.md").read_text()
    section = text[text.index("### Run 9") : text.index("### Not done yet on a GPU")]
    lines = [
        ln for ln in section.splitlines() if ln.startswith("| ") and "---" not in ln and "| case |" not in ln
    ]

    def key(r: dict) -> tuple[str, int | None]:
        return r["case"], r["batch"] if "decode" in r["case"] else None

    before = {key(r): r["rows"] for r in run9["before"]["results"]}
    after = {key(r): r["rows"] for r in run9["after"]["results"]}
    assert len(lines) == len(after) == 9
    names = [
        "copy (floor)",
        "ropekit apply_rope (1-D)",
        "ropekit apply_rope_axes",
        "ropekit Rotary (axes)",
        "ropekit apply_rope_tables (axes)",
        "transformers eager",
        "transformers torch.compile",
    ]
    for line in lines:
        cells = _cells(line)
        label = cells[0]
        batch = int(label.rsplit(" ", 1)[1]) if " batch " in label else None
        case = (
            label.split(" batch ")[0] if batch else " ".join(label.split()[: 3 if "vision" in label else 2])
        )
        rows_b, rows_a = before[(case, batch)], after[(case, batch)]
        assert len(cells) == 1 + len(names), line
        for name, cell in zip(names, cells[1:], strict=True):
            parts = cell.split("→")
            if len(parts) == 2:  # before -> after
                assert _expected(rows_b[name], batch) == parts[0].strip(), (label, name, cell)
            assert _expected(rows_a.get(name), batch) == parts[-1].strip().strip("*"), (label, name, cell)


def _expected(row: dict | None, batch: int | None) -> str:
    if row is None:
        return "n/a"
    if "error" in row:
        return "error"
    if batch is None:
        return f"{row['us']:.1f}"
    g = row.get("graph_us")
    return f"{row['host_us']:.1f} / {'-' if g is None else f'{g:.2f}'}"
