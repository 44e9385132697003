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
    assert len(figures) == 2 * len(SECTIONS)  # sliding_attention and full_attention
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
