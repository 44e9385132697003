"""AxisMap: slot maps against the strings of multiaxis.md section 1.1, the pairing rule and validation."""

from __future__ import annotations

import pytest

from ropekit import RopeSpec
from ropekit.axes import AxisMap
from ropekit.presets_vl import (
    dinov3_spec,
    ernie_vl_spec,
    glm4v_spec,
    llama4_vision_spec,
    pixtral_spec,
    qwen2_vl_spec,
    qwen3_vl_spec,
    qwen_vit_spec,
    rope_vit_axial_spec,
    videorope_spec,
)

# multiaxis.md 1.1, written out from the table (one letter per slot j = 0, 1, ...).
SECTION_1_1 = {
    "qwen2_vl": (qwen2_vl_spec(), "T" * 16 + "H" * 24 + "W" * 24),
    "qwen3_vl": (qwen3_vl_spec(), "THW" * 20 + "TTTT"),
    "glm4v": (glm4v_spec(), "T" * 8 + "H" * 12 + "W" * 12),
    "ernie_vl": (ernie_vl_spec(), "HW" * 22 + "T" * 20),
    "videorope": (videorope_spec(), "HW" * 24 + "T" * 16),
}


@pytest.mark.parametrize("family", sorted(SECTION_1_1))
def test_slot_maps_match_reference_strings(family: str) -> None:
    spec, want = SECTION_1_1[family]
    assert spec.axes is not None
    assert spec.axes.letters() == want
    assert spec.axes.n_bands == spec.n_bands


def test_qwen3_counts() -> None:
    m = AxisMap.interleaved((24, 20, 20))
    assert [len(m.bands_of(a)) for a in "thw"] == [24, 20, 20]
    assert m.bands_of("t") == tuple(range(0, 60, 3)) + (60, 61, 62, 63)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_channel_axes_follow_the_pairing(layout: str) -> None:
    m = AxisMap.contiguous((2, 3, 3))
    ch = m.channel_axes(layout)
    assert len(ch) == 16
    if layout == "half":  # channel n + j shares slot j's axis
        assert ch[:8] == ch[8:] == m.slots
    else:  # channels 2j, 2j + 1 share slot j's axis
        assert ch[0::2] == ch[1::2] == m.slots


VISION = {  # 2-D families: (spec, letters)
    "qwen_vit": (qwen_vit_spec(16), "RRRRCCCC"),
    "pixtral": (pixtral_spec(16), "RRRRCCCC"),
    "rope_vit": (rope_vit_axial_spec(16), "XXXXYYYY"),
    "llama4_vision": (llama4_vision_spec(16), "XXXXYYYY"),
    "dinov3": (dinov3_spec(16), "RRRRCCCC"),
}


@pytest.mark.parametrize("family", sorted(VISION))
def test_vision_maps(family: str) -> None:
    spec, want = VISION[family]
    assert spec.axes is not None and spec.axes.letters() == want


def test_even_odd_is_pixtral_native_alternation() -> None:
    assert AxisMap.even_odd(8).letters() == "RCRCRCRC"


def test_spec_with_axes_is_frozen_hashable_and_distinct() -> None:
    a, b = qwen2_vl_spec(), qwen2_vl_spec()
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert a != RopeSpec(head_dim=128, base=1e6)
    assert "axes=AxisMap(scheme='contiguous', sections=(16, 24, 24)" in repr(a)


def test_one_d_spec_unchanged() -> None:
    s = RopeSpec(head_dim=8)
    assert s.axes is None and s.n_axes == 1
    assert repr(s) == (
        "RopeSpec(head_dim=8, base=10000.0, rotary_dim=8, layout='half', freqs=None, p=1.0, scaling=None)"
    )
    assert s.to_hf() == {"head_dim": 8, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"scheme": "diagonal", "sections": (1, 1)}, "scheme"),
        ({"scheme": "contiguous", "sections": (1, -1, 2)}, "non-negative"),
        ({"scheme": "contiguous", "sections": (1, 2)}, "one entry per axis"),
        ({"scheme": "contiguous", "sections": (2, 2), "names": ("x", "x")}, "distinct"),
        ({"scheme": "interleaved", "sections": (1, 3, 3)}, "axis 0 needs"),
        ({"scheme": "lta", "sections": (4, 3, 2)}, "equal spatial"),
        ({"scheme": "explicit", "sections": (0, 3)}, "n_axes=3"),
    ],
)
def test_axis_map_rejects(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        AxisMap(**kwargs)


def test_spec_rejects_sections_not_summing_to_half_rotary_dim() -> None:
    with pytest.raises(ValueError, match=r"sections must sum to rotary_dim // 2"):
        RopeSpec(head_dim=128, axes=AxisMap.contiguous((16, 24, 23)))
    with pytest.raises(ValueError, match="RopeSpec.axes must be"):
        RopeSpec(head_dim=8, axes=(2, 1, 1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="multiple of 4"):
        dinov3_spec(18)


def test_axial_nd_spec() -> None:
    from ropekit.presets_vl import axial_spec

    two = axial_spec(16, (4, 4), ("x", "y"))
    assert two == rope_vit_axial_spec(16)  # 2-D halves are RoPE-ViT axial
    video = axial_spec(24, (4, 4, 4))
    assert video.axes.letters() == "TTTTRRRRCCCC"  # type: ignore[union-attr]
    assert video.freqs[4:8] == tuple(100.0 ** (-k / 4) for k in range(4))  # type: ignore[index]
    with pytest.raises(ValueError, match="summing to head_dim/2=12"):
        axial_spec(24, (4, 4, 3))


def test_numpy_integers_are_ints_as_across_ropekit() -> None:
    """NumPy ints (from a config parsed with numpy, or array arithmetic) build the same map as Python ints, stored as
    plain ints (equality, hashing and JSON unchanged); bools stay refused."""
    np = pytest.importorskip("numpy")
    a = AxisMap.contiguous([np.int64(16), np.int32(24), np.int64(24)])
    assert a == AxisMap.contiguous((16, 24, 24)) and hash(a) == hash(AxisMap.contiguous((16, 24, 24)))
    assert all(type(s) is int for s in a.sections)
    assert "".join("THW"[s] for s in a.slots) == "T" * 16 + "H" * 24 + "W" * 24  # multiaxis.md 1.1
    assert AxisMap.halves(np.int64(32)) == AxisMap.halves(32)
    assert AxisMap.even_odd(np.int16(8)) == AxisMap.even_odd(8)
    with pytest.raises(ValueError, match="non-negative ints"):
        AxisMap.contiguous([True, 2, 3])
