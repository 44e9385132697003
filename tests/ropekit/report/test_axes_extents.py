"""The report's "bands per axis" section judges each axis at the same extent as ``ropekit inspect`` (a vision
preset's patch grid, else the default extents at the context), for every multi-axis preset in the registry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ropekit.cli.main import main
from ropekit.presets import PRESETS
from ropekit.report.build import build_report
from ropekit.report.sources import resolve

_MULTI_AXIS = sorted(
    name for name, p in PRESETS.items() if any(p.spec(t).axes is not None for t in (p.layer_types or (None,)))
)


def _inspect_views(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """The views of ``ropekit inspect ... --json`` (the oracle: inspect's own path)."""
    assert main(["inspect", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["views"]  # type: ignore[no-any-return]


def _inspect_axes(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str | None, Any]:
    """layer type -> the ``axes`` entry of ``ropekit inspect ... --json``."""
    return {v["layer_type"]: v["axes"] for v in _inspect_views(argv, capsys) if "axes" in v}


def _summary(axes: dict[str, Any]) -> dict[str, tuple[float, int, int]]:
    return {a["axis"]: (a["extent"], a["wrapping_bands"], a["n_bands"]) for a in axes["axes"]}


def test_the_registry_has_vision_and_m_rope_presets() -> None:
    assert {"rope-vit-b16", "dinov3-vitb16", "video-axial-3d", "qwen2-vl-7b"} <= set(_MULTI_AXIS)


@pytest.mark.parametrize("name", _MULTI_AXIS)
def test_report_extents_and_band_counts_equal_inspects(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    views = _inspect_views([name], capsys)
    want = {v["layer_type"]: v["axes"] for v in views if "axes" in v}
    data = build_report(resolve(name)).data["specs"]
    # no critical dimension where inspect has none (explicit vision tables), the same one where it applies
    for v in views:
        got = data["default" if v["layer_type"] is None else v["layer_type"]]["spectrum"]["critical_dim"]
        assert (got is None) == (v["summary"]["critical_dim"] is None)
        if v["summary"]["critical_dim_applies"]:
            assert got == v["summary"]["critical_dim"]
    got = {(None if label == "default" else label): d["axes"] for label, d in data.items() if "axes" in d}
    assert set(got) == set(want)
    for label, axes in want.items():
        assert got[label]["extents"] == axes["extents"]
        assert _summary(got[label]) == _summary(axes)
        assert [b["wraps"] for b in got[label]["bands"]] == [b["wraps"] for b in axes["bands"]]


def test_vision_grids_are_the_presets_own(capsys: pytest.CaptureFixture[str]) -> None:
    """Known values: RoPE-ViT-B/16 at 224 px is 14 x 14 patches; DINOv3's box is 2 wide, where 3 of 16 bands turn
    (docs/vision.md); the 3-D video preset is 16 frames of 14 x 14."""
    axes = {
        n: build_report(resolve(n)).data["specs"]["default"]["axes"]
        for n in ("rope-vit-b16", "dinov3-vitb16")
    }
    assert axes["rope-vit-b16"]["extents"] == {"x": 14.0, "y": 14.0}
    assert {a["axis"]: a["wrapping_bands"] for a in axes["dinov3-vitb16"]["axes"]} == {"row": 3, "col": 3}
    assert resolve("video-axial-3d").extents == {"": {"t": 16.0, "row": 14.0, "col": 14.0}}


def test_report_context_moves_m_rope_time_axis_like_inspect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--context`` on an M-RoPE preset: the time axis is judged at the new context in both commands."""
    want = _inspect_axes(["qwen2-vl-7b", "--context", "4096"], capsys)[None]
    assert main(["report", "qwen2-vl-7b", "--out", str(tmp_path / "r"), "--context", "4096", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["specs"]["default"]["axes"]
    assert got["extents"] == want["extents"] and got["extents"]["t"] == 4096.0
    assert _summary(got) == _summary(want)
