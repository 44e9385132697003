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


def _videorope_slots(sections: tuple[int, int, int]) -> str:
    """The slot letters of VideoRoPE's own code (Wiselnn570/VideoRoPE, modeling_videorope.py,
    ``apply_m_modify_multimodal_rotary_pos_emb``), re-derived from it for one half of the head: the section
    ``[t, h, w]`` becomes ``[t, h + w]``, doubled and reversed (``[h + w, t, h + w, t]``); in each half the first
    h + w slots alternate rows 1 (h, even j) and 2 (w, odd j), the last t slots take row 0 (t)."""
    merged = [sections[0], sections[1] + sections[2]] * 2
    letters = ""
    for i, count in enumerate(merged[::-1][:2]):  # one half: [h + w, t]
        letters += "".join("HW"[j % 2] for j in range(count)) if i % 2 == 0 else "T" * count
    return letters


@pytest.mark.parametrize(("head_dim", "sections"), [(128, (16, 24, 24)), (64, (8, 12, 12)), (16, (2, 3, 3))])
def test_videorope_spec_is_videoropes_own_slot_map(head_dim: int, sections: tuple[int, int, int]) -> None:
    from ropekit.presets_vl import videorope_spec

    assert videorope_spec(head_dim, sections=sections).axes.letters() == _videorope_slots(sections)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("sections", "why"),
    [
        ((16, 24, 25), r"has h=24 != w=25"),  # sums to 65: used to lose a slot silently, (16, 24, 24)
        ((16, 20, 28), r"has h=20 != w=28"),  # used to become (16, 24, 24) silently
        ((16, 23, 24), r"has h=23 != w=24"),  # used to name sections (16, 23, 23), never passed
        ((16, 24, 24, 0), r"must be three non-negative ints"),
        ((16, 20, 20), r"sums to 56 but head_dim=128 has 64 rotary slots"),
        ((16.0, 24, 24), r"must be three non-negative ints"),
    ],
)
def test_videorope_spec_refuses_sections_it_would_have_to_change(sections: tuple[int, ...], why: str) -> None:
    """VideoRoPE alternates h and w over h + w slots, so unequal h and w cannot be honoured (the oracle,
    ``_videorope_slots``, gives h and w the same count whatever the split); a sum other than head_dim / 2 leaves
    slots without an axis. Both are refused naming ``sections`` and the value given, before any spec is built."""
    from ropekit.presets_vl import videorope_spec

    if len(sections) == 3 and all(isinstance(s, int) for s in sections):
        letters = _videorope_slots(sections)  # type: ignore[arg-type]
        assert (letters.count("H"), letters.count("W")) != sections[1:] or sum(sections) != 64
    with pytest.raises(ValueError, match=rf"^videorope_spec: sections.*{why}") as err:
        videorope_spec(sections=sections)  # type: ignore[arg-type]
    assert repr(sections) in str(err.value)  # the value the caller gave, not a re-split one


@pytest.mark.parametrize("builder", sorted(_BUILDERS))
def test_vision_builders_take_numpy_numbers_as_ropespec_does(builder: str) -> None:
    """RopeSpec(np.int64(64), base=np.float32(100)) is accepted (ropekit.integers' one rule); the builders refused
    a numpy head_dim or base ('must be a positive multiple of 4' for np.int64(64)). The spec equals the one from
    Python numbers, whose frequency table is the family formula (oracle: theta_k = base^(-4k/D) of the 2-D halves,
    checked on qwen_vit)."""
    import numpy as np

    got = _BUILDERS[builder](np.float32(100.0))
    assert got == _BUILDERS[builder](100.0)
    for hd in (np.int64(64), np.int32(64)):
        assert qwen_vit_spec(hd, base=np.float64(100.0)) == qwen_vit_spec(64, base=100.0)  # type: ignore[arg-type]
    assert (
        list(qwen_vit_spec(np.int64(64), base=np.float32(100.0)).freqs or ())
        == [  # type: ignore[arg-type]
            100.0 ** (-4.0 * k / 64) for k in range(16)
        ]
        * 2
    )
    with pytest.raises(ValueError, match=r"head_dim must be a positive multiple of 4, got np.int64\(62\)"):
        qwen_vit_spec(np.int64(62))  # type: ignore[arg-type]
