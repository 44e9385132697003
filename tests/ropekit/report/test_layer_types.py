"""Per-layer-type models and multimodal config.json files in the report read as ``ropekit inspect`` reads them:
the same layer types, windows, spans, layer counts, specs and context; sliding-window layers judged at their window
(trial findings 1 and 2). The oracle is inspect's own path (``ropekit.cli.source.resolve_views`` and
``ropekit.cli.inspect_cmd.report``), since the requirement is "the same as inspect"."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import pytest

from ropekit.analysis.bands import band_table
from ropekit.cli.inspect_cmd import report as inspect_report
from ropekit.cli.main import main
from ropekit.cli.source import resolve_views
from ropekit.presets import PRESETS
from ropekit.report.sources import resolve


def _inspect_views(source: str, context: int | None = None) -> list[Any]:
    """The views ``ropekit inspect SOURCE [--context N]`` judges (its own argument path)."""
    keys = ("head_dim", "base", "rotary_dim", "layout", "p", "scaling", "factor", "original_length")
    args = argparse.Namespace(source=source, context=context, layer_type=None, **dict.fromkeys(keys))
    return resolve_views(args)[1]


def _summary(src: Any) -> list[tuple[Any, ...]]:
    return [
        (label or None, src.windows.get(label), src.span(label), src.layers.get(label), spec, src.context)
        for label, spec in src.specs.items()
    ]


def _inspect_summary(views: list[Any]) -> list[tuple[Any, ...]]:
    return [(v.layer_type, v.window, v.span, v.layers, v.spec, v.context) for v in views]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_has_inspects_layer_types_windows_and_spans(name: str) -> None:
    assert _summary(resolve(name)) == _inspect_summary(_inspect_views(name))


_WINDOWED = sorted(n for n in PRESETS if any(v.window is not None for v in PRESETS[n].views()))


def test_the_registry_has_sliding_window_presets() -> None:
    assert {"gemma-2-9b", "gemma-3-4b", "gpt-oss-20b", "mistral-7b"} <= set(_WINDOWED)


@pytest.mark.parametrize("name", _WINDOWED)
def test_a_config_json_of_a_windowed_preset_reads_like_the_preset(name: str, tmp_path: Path) -> None:
    """The trial: a config.json of gpt-oss / Gemma 2 / Mistral gave one unlabelled section; the preset, two."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(PRESETS[name].config))
    from_file, preset = resolve(str(cfg)), resolve(name)
    assert _summary(from_file) == _summary(preset) == _inspect_summary(_inspect_views(str(cfg)))


def _multimodal_configs(tmp_path: Path) -> dict[str, Path]:
    """Published shapes: the VL presets' configs without the top-level context copied for the presets, and a
    Gemma 3 4B-it config that nests everything (no max_position_embeddings: the class default applies)."""
    out = {}
    for name in ("qwen3-vl-8b", "glm-4.1v-9b"):
        cfg = {k: v for k, v in PRESETS[name].config.items() if k != "max_position_embeddings"}
        out[name] = tmp_path / f"{name}.json"
        out[name].write_text(json.dumps(cfg))
    text = dict(PRESETS["gemma-3-4b"].config)
    out["gemma-3-4b-it"] = tmp_path / "gemma-3-4b-it.json"
    out["gemma-3-4b-it"].write_text(json.dumps({"model_type": "gemma3", "text_config": text}))
    return out


def test_multimodal_configs_read_their_text_config_like_inspect(tmp_path: Path) -> None:
    """The trial: Qwen3-VL got 131,072 (inspect 262,144), GLM-4.1V 131,072 (65,536), Gemma 3 4B-it was refused."""
    for name, path in _multimodal_configs(tmp_path).items():
        src = resolve(str(path))
        assert _summary(src) == _inspect_summary(_inspect_views(str(path))), name
    assert resolve(str(tmp_path / "qwen3-vl-8b.json")).context == 262144  # its text_config's
    assert resolve(str(tmp_path / "glm-4.1v-9b.json")).context == 65536
    assert resolve(str(tmp_path / "gemma-3-4b-it.json")).windows == {"sliding_attention": 1024}


def test_context_flag_moves_full_layers_but_not_windows(tmp_path: Path) -> None:
    src = resolve("gemma-3-4b", context=4096)
    assert _summary(src) == _inspect_summary(_inspect_views("gemma-3-4b", 4096))
    assert (src.span("sliding_attention"), src.span("full_attention")) == (1024, 4096)
    assert resolve("gemma-3-4b", context=512).span("sliding_attention") == 512  # a window beyond the context


def _turning(turns: list[float]) -> int:
    return sum(t >= 1.0 for t in turns)


def test_sliding_layers_are_judged_at_their_window_as_inspect_judges_them(preset_report: Path) -> None:
    """gemma-3-4b's page (the session report): its sliding layers' critical dimension, turning bands and lengths
    are inspect's at the window (1,024), not the context's; the full layers' at the context."""
    data = json.loads((preset_report / "report.json").read_text())["specs"]
    src = resolve("gemma-3-4b")
    for label, spec in src.specs.items():
        got = data[label]
        assert got["span"] == src.span(label) and got["window"] == src.windows.get(label)
        assert got["rotations"]["context"] == got["spectrum"]["context"] == got["span"]
        # inspect's wrapping bands come from band_table at the span (its base-bound scan is not needed here)
        assert _turning(got["rotations"]["after"]) == sum(b.wraps for b in band_table(spec, src.span(label)))
        assert got["decay"]["distance"][-1] == got["span"] == got["decay"]["seq_len"]
    sliding = data["sliding_attention"]
    assert sliding["span"] == 1024 and sliding["spectrum"]["train_len"] == 1024
    # unscaled at the window: Liu et al.'s closed form there is inspect's d_extra (142)
    want = inspect_report(src.specs["sliding_attention"], src.context, span=1024)["summary"]
    assert sliding["spectrum"]["critical_dim"] == want["critical_dim"] == 142
    assert want["critical_dim"] == 2 * math.ceil(128 * math.log(1024 / (2 * math.pi)) / math.log(1e4))
    assert sliding["rotations"]["at_train"] == sliding["rotations"]["before"]  # trained over the window too


def test_sliding_layers_get_inspects_not_compared_note(
    preset_report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """README: "Sliding-window layers are not compared"; the page's note is inspect --compare's reason."""
    assert main(["inspect", "gemma-3-4b", "--compare", "--json"]) == 0
    views = {v["layer_type"]: v for v in json.loads(capsys.readouterr().out)["views"]}
    data = json.loads((preset_report / "report.json").read_text())["specs"]
    assert data["sliding_attention"]["scaling"] == {"skipped": views["sliding_attention"]["skipped"]}
    assert "skipped" not in views["full_attention"] and "ratio" in data["full_attention"]["scaling"]
    page = (preset_report / "index.html").read_text()
    assert views["sliding_attention"]["skipped"] in page
