"""The page written by ``ropekit report``: every section, figure and caption, images embedded, no network."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

SECTIONS = ("spectrum", "rotations", "scaling", "decay", "precision")


def test_every_section_has_a_figure_per_layer_type(preset_report: Path) -> None:
    page = (preset_report / "index.html").read_text()
    for key in SECTIONS:
        assert f'<section id="{key}">' in page
    figures = re.findall(r"<figure>(.*?)</figure>", page)
    # sliding_attention and full_attention, but the sliding layers' scaling comparison is a note, as in inspect
    assert len(figures) == 2 * len(SECTIONS) - 1
    (note,) = re.findall(r'<p class="note">(.*?)</p>', page)
    assert note.startswith("gemma-3-4b / sliding_attention: not compared: sliding window of 1,024 tokens")
    for fig in figures:
        img = re.search(r'<img src="data:image/png;base64,([^"]+)" alt="([^"]+)">', fig)
        assert img is not None
        assert base64.b64decode(img.group(1)).startswith(b"\x89PNG\r\n\x1a\n")
        assert "gemma-3-4b / " in img.group(2)
        caption = re.search(r"<figcaption>(.+)</figcaption>", fig)
        assert caption is not None and len(caption.group(1)) > 40


def test_page_is_self_contained(preset_report: Path) -> None:
    page = (preset_report / "index.html").read_text()
    links = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert links and all(u.startswith(("data:image/png;base64,", "#")) for u in links)
    assert "<script" not in page and "http://" not in page and "https://" not in page


def test_json_numbers_behind_the_figures(preset_report: Path) -> None:
    data = json.loads((preset_report / "report.json").read_text())
    assert data["source"] == "gemma-3-4b" and set(data["specs"]) == {"sliding_attention", "full_attention"}
    full = data["specs"]["full_attention"]
    assert set(SECTIONS) <= set(full)
    assert full["scaling"]["ratio"]["model:Linear"] == pytest.approx([8.0] * 128)  # gemma 3: linear x8
    assert full["spectrum"]["critical_dim"] % 2 == 0
    assert full["decay"]["su_bound"][0] == (128 + 1) / 2  # (n + 1) / 2 at distance 0, n = 128 bands
    sliding = data["specs"]["sliding_attention"]
    assert sliding["rotations"]["before"] == sliding["rotations"]["after"]  # sliding layers are not scaled


def test_the_same_source_gives_the_same_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Trial finding 10: the footer said "Generated ... in 10.9 s", so two builds of one input differed. The build
    time now goes to stderr only."""
    from ropekit.cli.main import main

    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "head_dim": 8,
                "num_attention_heads": 2,
                "hidden_size": 16,
                "max_position_embeddings": 512,
                "rope_theta": 1e4,
            }
        )
    )
    pages = []
    for out in ("a", "b"):
        assert main(["report", str(cfg), "--out", str(tmp_path / out)]) == 0
        assert re.search(r"ropekit report: built in \d+\.\d s", capsys.readouterr().err)
        pages.append((tmp_path / out / "index.html").read_bytes())
    assert pages[0] == pages[1] and b" s. The numbers" not in pages[0]


def test_the_fixture_page_has_no_build_time(preset_report: Path) -> None:
    footer = re.search(r"<footer>(.*?)</footer>", (preset_report / "index.html").read_text())
    assert footer is not None and not re.search(r"\d+\.\d s", footer.group(1))
