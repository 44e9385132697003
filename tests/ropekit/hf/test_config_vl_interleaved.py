"""``mrope_interleaved`` read as transformers 5.23's VL families read it: not at all.

No family's rotary code reads the key (Qwen2-VL / Qwen2.5-VL / GLM-4V(-MoE) always split the bands contiguously,
Qwen3-VL(-MoE) always interleaves, ERNIE-4.5-VL always alternates h / w with t last); ropekit honoured it for
Qwen2-VL-style families, so q rotated by ropekit differed from the model's (by ~3). Oracle: each family's own
rotary module and ``apply_rotary_pos_emb`` from its modeling file, with the key set both ways, for every family of
``VL_FAMILIES``; a value that contradicts the family warns, naming the key, its value and the model_type.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest
import torch

from ropekit import RopeSpec
from ropekit.axis_tables import apply_rope_axes
from ropekit.hf.config_vl import VL_FAMILIES

T = pytest.importorskip("transformers")
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from tests.ropekit.hf.test_config_vl import CONFIGS, _hf_rotary


def _transformers_name(model_type: str) -> str:
    """The transformers family that runs ``model_type`` (Baidu's remote-code name: transformers' ERNIE-4.5-VL)."""
    if model_type in CONFIG_MAPPING:
        return model_type
    family = VL_FAMILIES[model_type][0]
    return next(m for m, v in VL_FAMILIES.items() if v[0] == family and m in CONFIG_MAPPING)


def _contradicts(model_type: str, value: bool) -> bool:
    """Whether ``mrope_interleaved=value`` says another map than the family's own (multiaxis.md sections 2-7)."""
    family = VL_FAMILIES[model_type][0]
    return family == "ernie" or value != (family == "qwen3_vl")


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize("model_type", sorted(VL_FAMILIES))
def test_mrope_interleaved_is_read_as_the_family_reads_it(model_type: str, value: bool) -> None:
    name = _transformers_name(model_type)
    assert name in CONFIGS, f"add {name} to test_config_vl.CONFIGS"
    cfg = CONFIGS[name]()
    cfg.text_config.rope_parameters["mrope_interleaved"] = value
    m, emb = _hf_rotary(name, cfg.text_config)  # transformers' module, the key set on its config
    raw: dict[str, Any] = cfg.to_dict()
    if name != model_type:  # a remote-code name (Baidu's ERNIE-4.5-VL config.json): flat, its own model_type
        raw = {**cfg.text_config.to_dict(), "model_type": model_type}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec = RopeSpec.from_hf(raw)
    d = spec.head_dim
    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 9, d), torch.randn(1, 2, 9, d)
    pos = torch.randint(0, 40, (3, 1, 9))  # t, h, w differ: every map gives other angles
    cos, sin = emb(q, pos)
    qh, kh = m.apply_rotary_pos_emb(q, k, cos, sin)
    qr, kr = apply_rope_axes(q, k, pos, spec, format="bhsd")
    torch.testing.assert_close(qr, qh, atol=3e-5, rtol=1e-5)
    torch.testing.assert_close(kr, kh, atol=3e-5, rtol=1e-5)
    msgs = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    said = [s for s in msgs if "mrope_interleaved" in s]
    if _contradicts(model_type, value):
        assert len(said) == 1, msgs
        assert re.search(
            rf"mrope_interleaved={value}.*model_type='{model_type}(_text)?'.*transformers' code for this family does not "
            "read it",
            said[0],
        ), said[0]
    else:
        assert not said, said


def test_mrope_interleaved_of_a_config_of_no_family_is_followed() -> None:
    """Without a VL model_type no transformers code decides: the key does. Oracle: Qwen3-VL's interleaved map from
    multiaxis.md section 4 (slot j: h if j % 3 == 1 and j < 3 s_h, w if j % 3 == 2 and j < 3 s_w, else t)."""
    sec = (24, 20, 20)
    want = "".join(
        "H" if j % 3 == 1 and j < 3 * sec[1] else "W" if j % 3 == 2 and j < 3 * sec[2] else "T"
        for j in range(64)
    )
    for value, letters in ((True, want), (False, "T" * 24 + "H" * 20 + "W" * 20)):
        cfg = {"head_dim": 128, "rope_parameters": {"rope_type": "default", "mrope_section": list(sec),
                                                   "mrope_interleaved": value}}  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            spec = RopeSpec.from_hf(cfg)
        assert spec.axes is not None and spec.axes.letters() == letters
