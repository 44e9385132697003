"""Captions and figures say only what they draw (trial findings 3, 8 and 9), for every preset and layer type: the
dynamic-NTK remark only where a dynamic curve is drawn, "scaling moves bands" only where scaling moves them, no
critical-dimension line or number for an explicit table, and a training length derived from the context labelled
as assumed wherever it is shown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from ropekit.analysis.compare import default_target
from ropekit.analysis.rotations import rotations
from ropekit.analysis.schemes import scheme_table
from ropekit.analysis.spectrum import spectrum
from ropekit.presets import PRESETS
from ropekit.report import captions, figures
from ropekit.report.sources import resolve

_LAYERS = [(n, label) for n in sorted(PRESETS) for label in resolve(n).specs]


def _close(fig: Any) -> None:
    import matplotlib.pyplot as plt

    plt.close(fig)


@pytest.mark.parametrize(("name", "label"), _LAYERS, ids=[f"{n}-{lab or 'default'}" for n, lab in _LAYERS])
def test_captions_describe_what_is_drawn(name: str, label: str) -> None:
    src = resolve(name)
    spec, context = src.specs[label], src.context
    window = src.windows.get(label) if src.span(label) < context else None
    table = scheme_table(spec, context=context, target=default_target(spec, context))
    sp = spectrum(spec, context)
    text = captions.scaling_caption(table, spec, assumed=sp.train_len_assumed)
    assert ("dynamic NTK" in text) == ("dynamic" in table.ratio)
    assert ("thick line" in text) == any(k.startswith("model:") for k in table.ratio)
    for refused in table.not_applicable:
        assert refused in text.split("Not applicable")[1]
    assert ("L0 assumed = context / factor" in text) == sp.train_len_assumed
    rot = rotations(spec, src.span(label))
    moves = spec.scaling is not None and not torch.equal(rot.before, rot.after)
    text = captions.rotations_caption(rot, spec, window=window, assumed=sp.train_len_assumed)
    assert ("moves" in text) == moves and ("one curve" in text) == (not moves)


@pytest.mark.parametrize(("name", "label"), _LAYERS, ids=[f"{n}-{lab or 'default'}" for n, lab in _LAYERS])
def test_the_spectrum_draws_a_critical_line_only_where_there_is_one(name: str, label: str) -> None:
    src = resolve(name)
    spec = src.specs[label]
    sp = spectrum(spec, src.context)
    fig = figures.spectrum_figure(sp, name)
    labels = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    _close(fig)
    critical = [k for k in labels if k.startswith("critical dimension")]
    text = captions.spectrum_caption(sp, spec.n_bands)
    if sp.critical_dim is None:
        assert not critical and text.startswith("No critical dimension") and "critical_dim null" in text
        marked = [k for k in labels if k.startswith("never turns within")]
        never = [i for i, t in enumerate(sp.turns_in_train.tolist()) if not t]
        assert (list(labels[marked[0]].get_xdata()) if marked else []) == never
        assert f"the {len(never)} of {spec.n_bands} bands marked x" in text
    else:
        assert critical == [f"critical dimension {sp.critical_dim} (band {sp.critical_band})"]
        assert f"critical dimension {sp.critical_dim}:" in text


def test_unscaled_and_vision_captions_of_the_trial() -> None:
    """The trial: pixtral's scaling caption said dynamic NTK overshoots (no dynamic curve), llama-2's rotations
    caption said scaling moves bands (it has none)."""
    spec = PRESETS["pixtral-12b-vision"].spec()
    table = scheme_table(spec, context=64, target=256)
    text = captions.scaling_caption(table, spec)
    assert "dynamic NTK" not in text and "dynamic" not in table.ratio
    assert text.endswith("Not applicable to this explicit frequency table: ntk, dynamic, yarn.")
    spec = PRESETS["llama-2-7b"].spec()
    assert "scaling" not in captions.rotations_caption(rotations(spec, 4096), spec).split(";")[0]


def test_the_scaling_caption_names_the_models_own_factor_when_s_differs() -> None:
    """Llama 3.1 8B: schemes are compared at s = 131,072 / 8,192 = 16; its own llama3 factor is 8."""
    spec = PRESETS["llama-3.1-8b"].spec()
    table = scheme_table(spec, context=131072, target=131072)
    assert (
        "s = 16" in (text := captions.scaling_caption(table, spec))
        and "its own factor is 8, not s = 16" in text
    )


def test_the_page_labels_the_assumed_training_length(preset_report: Path) -> None:
    """gemma-3-4b's full layers: Linear x8 states no L0; 131,072 / 8 = 16,384 is labelled as assumed (figure
    captions and the spec table), the sliding layers' training length is their window."""
    data = json.loads((preset_report / "report.json").read_text())["specs"]
    assert data["full_attention"]["spectrum"]["train_len_assumed"] is True
    assert data["full_attention"]["scaling"]["original_length_assumed"] is True
    page = (preset_report / "index.html").read_text()
    assert "training length L0 assumed = context / factor = 16,384" in page
    assert "<td>16,384 (L0 assumed = context / factor)</td>" in page
    assert "<td>1,024 (the window)</td>" in page
