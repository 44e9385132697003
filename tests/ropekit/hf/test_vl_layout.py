"""The VL text rotaries' probed band-to-axis layout (ropekit/hf/vl_layout.py): for every VL text family ropekit
patches, the layout path (one multi-axis gather + one index_select) gives bit for bit the tables of the
recomposition path (ropekit's exact three-axis tables recomposed by transformers' own function), its half tables
too, and transformers' own tables to float32 phase accuracy at small positions; recompositions that are not a
consistent selection are refused (None), so the caller keeps transformers' function."""

from __future__ import annotations

import pytest
import torch

T = pytest.importorskip("transformers")

import ropekit.hf
from ropekit.hf.patch_vl import VL_TEXT_FAMILIES, RopekitVLRotary
from ropekit.hf.rotary import ROPEKIT_TABLES
from ropekit.hf.vl_layout import text_axis_layout

from .test_patch_vl import _model

FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "glm4v", "glm4v_moe", "ernie4_5_vl_moe"]


def _text_rotary(model: torch.nn.Module) -> tuple[torch.nn.Module, str]:
    hits = [(n, m) for n, m in model.named_modules() if type(m).__name__ in VL_TEXT_FAMILIES]
    assert len(hits) == 1, [n for n, _ in hits]
    return hits[0][1], hits[0][0]


def test_every_vl_text_family_is_enumerated() -> None:
    seen = {type(_text_rotary(_model(f))[0]).__name__ for f in FAMILIES}
    assert seen == set(VL_TEXT_FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_layout_path_equals_the_recomposition_path(family: str) -> None:
    torch.manual_seed(0)
    model = _model(family).eval()
    orig, name = _text_rotary(model)
    patched = ropekit.hf.patch(model)
    rot = patched.get_submodule(name)
    assert isinstance(rot, RopekitVLRotary) and rot.layout is not None
    x = torch.zeros(1, dtype=torch.bfloat16)
    positions = [
        torch.randint(0, 2**20, (3, 2, 16)),
        torch.randint(0, 100, (3, 2, 16)),
        torch.randint(0, 2**20, (2, 16)),  # text-only ids: every axis equal
    ]
    for pos in positions:
        got = rot(x, pos)
        layout, rot.layout = rot.layout, None
        try:
            want = rot(x, pos)
        finally:
            rot.layout = layout
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w)
            gi, wi = getattr(g, ROPEKIT_TABLES), getattr(w, ROPEKIT_TABLES)
            assert torch.equal(gi.cos, wi.cos) and torch.equal(gi.sin, wi.sin)
        if int(pos.max()) < 100:  # transformers' float32 phases are within ~1e-5 of exact here
            for g, h in zip(got, orig(x, pos)):
                torch.testing.assert_close(
                    g.float(), h.float(), rtol=0, atol=1e-5 if g.dtype == torch.float32 else 8e-3
                )


def _cat(f: torch.Tensor) -> torch.Tensor:
    return torch.cat((f, f), dim=-1)


@pytest.mark.parametrize(
    "recompose,why",
    [
        (lambda f: _cat(f.sum(0)), "arithmetic, not a selection"),
        (lambda f: torch.cat((f[0], f[1]), dim=-1), "every band read from two axes"),
        (lambda f: _cat(torch.cat((f[0][..., :2], f[1][..., :2]), dim=-1)), "bands 2, 3 never read"),
        (lambda f: f[0], "C != 2n"),
        (lambda f: 1 / 0, "does not run"),
    ],
)
def test_refused_recompositions(recompose: object, why: str) -> None:
    assert text_axis_layout(recompose, (1.0, 0.5, 0.25, 0.125), pairs=False) is None, why  # type: ignore[arg-type]


def test_contiguous_sections_are_read_as_such() -> None:
    sections = [1, 2, 1]

    def qwen2_like(f: torch.Tensor) -> torch.Tensor:  # transformers' Qwen2-VL recomposition, written out
        return _cat(torch.cat([m[i % 3] for i, m in enumerate(f.split(sections, dim=-1))], dim=-1))

    layout = text_axis_layout(qwen2_like, (1.0, 0.5, 0.25, 0.125), pairs=False)
    assert layout is not None and layout.spec.axes is not None
    assert layout.spec.axes.sections == (0, 1, 1, 2) and layout.half is None
    assert layout.full.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]


def test_layout_indices_are_non_persistent_buffers() -> None:
    """The channel indices move with the model (.to / .cuda: no host copy per call) and never enter a checkpoint."""
    model = _model("qwen2_vl").eval()
    _, name = _text_rotary(model)
    patched = ropekit.hf.patch(model)
    rot = patched.get_submodule(name)
    assert isinstance(rot, RopekitVLRotary) and rot.layout is not None
    buffers = dict(rot.named_buffers())
    assert torch.equal(buffers["_full_index"], rot.layout.full)
    assert not any(k.endswith(("_full_index", "_half_index")) for k in patched.state_dict())
    patched.to(torch.bfloat16)  # a dtype cast leaves integer buffers alone
    assert rot.get_buffer("_full_index").dtype == torch.int64
