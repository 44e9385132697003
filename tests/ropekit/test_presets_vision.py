"""Vision-tower presets: registered, judged at their patch grid by ``ropekit inspect``, wavelengths from the
models' own formulas (multiaxis.md sections 1 and 8)."""

from __future__ import annotations

import io
import json
import math
import re
from contextlib import redirect_stdout

import pytest

from ropekit.cli.main import main
from ropekit.presets import PRESETS, get_preset
from ropekit.presets_vision import VISION_PRESETS, VisionPreset
from ropekit.presets_vl import (
    axial_spec,
    dinov3_spec,
    llama4_vision_spec,
    pixtral_spec,
    qwen_vit_spec,
    rope_vit_axial_spec,
)
from ropekit.spec import RopeSpec


def _inspect(name: str) -> dict[str, object]:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["inspect", name, "--json"]) == 0
    (view,) = json.loads(buf.getvalue())["views"]
    axes: dict[str, object] = view["axes"]
    return axes


def test_registered_in_presets() -> None:
    assert set(VISION_PRESETS) <= set(PRESETS)
    assert {"rope-vit-b16", "pixtral-12b-vision", "dinov3-vitb16", "llama4-vision", "qwen2-vl-vision"} <= set(
        VISION_PRESETS
    )
    assert any(p.spec().axes.n_axes == 3 for p in VISION_PRESETS.values())  # type: ignore[union-attr]


# (preset, axis names, theta of slot k within its axis block, extent) from each model's formula
FORMULAS = {
    "rope-vit-b16": (("x", "y"), lambda k: 100.0 ** (-4 * k / 64), 14.0),
    "dinov3-vitb16": (("row", "col"), lambda k: 2 * math.pi / 100.0 ** (4 * k / 64), 2.0),
    "llama4-vision": (("x", "y"), lambda k: 1e4 ** (-4 * k / 88), 24.0),
    "qwen2-vl-vision": (("row", "col"), lambda k: 1e4 ** (-4 * k / 80), 128.0),
}


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_inspect_axes_at_the_grid(name: str) -> None:
    names, theta, extent = FORMULAS[name]
    rep = _inspect(name)
    assert rep["extents"] == dict.fromkeys(names, extent)  # type: ignore[index]
    bands = rep["bands"]  # type: ignore[index]
    half = len(bands) // 2
    for b in bands:
        k = b["index"] % half
        assert b["axis"] == names[b["index"] // half]
        assert b["theta"] == pytest.approx(theta(k), rel=1e-12)
        assert b["wavelength"] == pytest.approx(2 * math.pi / theta(k), rel=1e-12)
        assert b["turns"] == pytest.approx(extent * theta(k) / (2 * math.pi), rel=1e-12)


def test_pixtral_even_odd_and_video_sections() -> None:
    bands = _inspect("pixtral-12b-vision")["bands"]  # type: ignore[index]
    # rows take theta_{2i}, columns theta_{2i+1}, theta_k = 1e4^(-2k/64) (the native even/odd split)
    for b in bands:
        i = b["index"] % 16
        k = 2 * i + (b["axis"] == "col")
        assert b["theta"] == pytest.approx(1e4 ** (-2 * k / 64), rel=1e-12)
    rep = _inspect("video-axial-3d")
    assert rep["map"] == "T" * 8 + "R" * 12 + "C" * 12  # type: ignore[index]
    assert rep["extents"] == {"t": 16.0, "row": 14.0, "col": 14.0}  # type: ignore[index]
    t0 = [b for b in rep["bands"] if b["axis"] == "t"]  # type: ignore[index]
    assert [b["theta"] for b in t0] == pytest.approx([100.0 ** (-k / 8) for k in range(8)], rel=1e-12)


def test_text_output_lists_every_band_per_axis() -> None:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["inspect", "rope-vit-b16"]) == 0
    text = buf.getvalue()
    assert "x: 0:6.283(2.23)" in text  # 2*pi wavelength, 14 / 2*pi turns over the 14-patch grid
    assert "31:471.2(0.0297)" in text


def test_vision_preset_refuses_layer_types_and_missing_extents() -> None:
    p = get_preset("rope-vit-b16")
    with pytest.raises(ValueError, match="single kind of layer"):
        p.spec("sliding_attention")
    with pytest.raises(ValueError, match="extents must name every axis"):
        VisionPreset("bad", "", {}, (), p.spec(), {"x": 1.0})
    assert p.views(context=30)[0].context == 30 and p.context == 14  # positions 0..13 reach context - 1


_BUILDERS = {
    "pixtral": lambda b: pixtral_spec(64, base=b),
    "qwen_vit": lambda b: qwen_vit_spec(64, base=b),
    "llama4_vision": lambda b: llama4_vision_spec(64, base=b),
    "rope_vit_axial": lambda b: rope_vit_axial_spec(64, base=b),
    "dinov3": lambda b: dinov3_spec(64, base=b),
    "axial": lambda b: axial_spec(64, (8, 12, 12), base=b),
}


@pytest.mark.parametrize("builder", sorted(_BUILDERS))
@pytest.mark.parametrize("base", [1.0, 0.5, 0.0, -5.0, float("nan"), float("inf"), True, "100"])
def test_vision_builders_refuse_a_base_ropespec_refuses(builder: str, base: object) -> None:
    """The builders pass explicit ``freqs``, so RopeSpec never saw ``base``: 1.0 gave all frequencies 1, -5 complex
    powers, 0 a ZeroDivisionError, nan a message about freqs. The rule is RopeSpec's own (the oracle here)."""
    with pytest.raises(ValueError, match="RopeSpec.base must be a finite number > 1"):
        RopeSpec(64, base=base)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=f"{builder}_spec: base must be a finite number > 1, got {re.escape(repr(base))}"
    ):
        _BUILDERS[builder](base)
    _BUILDERS[builder](1.0 + 1e-9)  # just above 1: accepted, as by RopeSpec
