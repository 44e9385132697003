"""Vision grids: golden tables of multiaxis.md section 8 and transformers' own vision rotaries as oracles."""

from __future__ import annotations

import pytest
import torch

from ropekit.axis_tables import apply_rope_axes
from ropekit.positions.grid import (
    grid_positions,
    merge_block_positions,
    normalized_grid,
    pixtral_patch_ids,
    pixtral_positions_from_ids,
    with_prefix,
)
from ropekit.presets_vl import (
    dinov3_spec,
    llama4_vision_spec,
    pixtral_spec,
    qwen_vit_spec,
    rope_vit_axial_spec,
)


def test_qwen_vit_block_major_table_8_1() -> None:
    pos = merge_block_positions((1, 4, 4), 2)
    assert pos[0].tolist() == [0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3]
    assert pos[1].tolist() == [0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3]
    assert torch.equal(merge_block_positions((3, 4, 4), 2), pos.repeat(1, 3))  # repeated per frame


def test_qwen_vit_positions_match_transformers() -> None:
    vu = pytest.importorskip("transformers.vision_utils")
    grids = torch.tensor([[2, 4, 6], [1, 8, 2]])
    want = vu.get_vision_position_ids(grids, 2)  # (tokens, 2)
    got = torch.cat([merge_block_positions(tuple(g), 2) for g in grids.tolist()], dim=1)
    assert torch.equal(got, want.T)


def test_llama4_one_based_with_cls_last() -> None:
    pos = grid_positions((3, 3), start=1)
    xy = with_prefix(pos[[1, 0]], 1, where="last")  # axes (x, y) = (col, row)
    assert xy[0].tolist() == [1, 2, 3, 1, 2, 3, 1, 2, 3, 0]
    assert xy[1].tolist() == [1, 1, 1, 2, 2, 2, 3, 3, 3, 0]


def test_dinov3_coordinates_and_augmentations() -> None:
    c = normalized_grid(4, 2)
    assert c[0].tolist()[::2] == [-0.75, -0.25, 0.25, 0.75] and c[1].tolist()[:2] == [-0.5, 0.5]
    assert torch.equal(
        normalized_grid(4, 2, normalize="max")[1, :2], torch.tensor([-0.75, -0.25], dtype=torch.float64)
    )
    g = torch.Generator().manual_seed(0)
    aug = normalized_grid(4, 4, shift=0.1, jitter=1.5, rescale=2.0, generator=g)
    assert aug.shape == (2, 16) and not torch.equal(aug, normalized_grid(4, 4))
    assert aug.abs().max() <= (0.75 + 0.1) * 1.5 * 2.0 + 1e-12  # bounds of the three augmentations
    with pytest.raises(ValueError, match="jitter must be None or a finite number > 1.0"):
        normalized_grid(4, 4, jitter=0.5)


def test_pixtral_ids_example_and_range() -> None:
    ids = pixtral_patch_ids(3, 4, 64)
    assert ids.tolist() == [0, 1, 2, 3, 64, 65, 66, 67, 128, 129, 130, 131]
    assert torch.equal(pixtral_positions_from_ids(ids, 64), grid_positions((3, 4)))
    with pytest.raises(ValueError, match=r"ids must be in \[0, max_width\*\*2 = 4096\)"):
        pixtral_positions_from_ids(torch.tensor([4096]), 64)
    with pytest.raises(ValueError, match="does not fit Pixtral's max_width=64"):
        pixtral_patch_ids(3, 65, 64)


def _hf_vision(family: str, q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor):
    """q, k [N, heads, D]; pos [2, N] (row, col). transformers' own rotary + apply."""
    pytest.importorskip("transformers")
    d = q.shape[-1]
    if family == "pixtral":
        from transformers import PixtralVisionConfig
        from transformers.models.pixtral import modeling_pixtral as m

        cfg = PixtralVisionConfig(hidden_size=4 * d, num_attention_heads=4, head_dim=d)
        cos, sin = m.PixtralVisionRotaryEmbedding(cfg)(q, pos.T)
        return m.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)
    from transformers.models.qwen2_vl import modeling_qwen2_vl as m
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig

    cfg = Qwen2VLVisionConfig(embed_dim=4 * d, num_heads=4)
    cos, sin = m.Qwen2VLVisionRotaryEmbedding(cfg)(q, pos.T)
    return m.apply_rotary_pos_emb_vision(q, k, cos, sin)


@pytest.mark.parametrize("family", ["pixtral", "qwen_vit"])
def test_vision_rotary_matches_transformers(family: str) -> None:
    d = 16
    spec = pixtral_spec(d) if family == "pixtral" else qwen_vit_spec(d)
    pos = merge_block_positions((1, 6, 4), 2) if family == "qwen_vit" else grid_positions((5, 7))
    n = pos.shape[1]
    q, k = torch.randn(n, 4, d), torch.randn(n, 4, d)
    qh, kh = _hf_vision(family, q, k, pos)
    qr, kr = apply_rope_axes(q, k, pos, spec, format="thd")
    torch.testing.assert_close(qr, qh, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(kr, kh, atol=1e-5, rtol=1e-5)


def test_llama4_vision_matches_transformers() -> None:
    pytest.importorskip("transformers")
    from transformers import Llama4VisionConfig
    from transformers.models.llama4 import modeling_llama4 as m

    d, idx = 16, 3
    cfg = Llama4VisionConfig(hidden_size=4 * d, num_attention_heads=4, image_size=idx * 14, patch_size=14)
    freqs = m.Llama4VisionRotaryEmbedding(cfg).freqs_ci  # [idx^2 + 1, 1, d/2] complex
    n = idx * idx + 1
    q, k = torch.randn(1, n, 4, d), torch.randn(1, n, 4, d)
    qh, kh = m.vision_apply_rotary_emb(q, k, freqs)
    xy = with_prefix(grid_positions((idx, idx), start=1)[[1, 0]], 1, where="last")
    qr, kr = apply_rope_axes(q, k, xy, llama4_vision_spec(d))
    torch.testing.assert_close(qr, qh, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(kr, kh, atol=1e-5, rtol=1e-5)
    assert torch.equal(qr[:, -1], q[:, -1])  # the class token is not rotated


@pytest.mark.parametrize("spec_fn", [rope_vit_axial_spec, dinov3_spec])
def test_prefix_tokens_unrotated_and_any_grid_size(spec_fn) -> None:
    spec = spec_fn(16)
    for h, w in ((3, 5), (14, 14), (17, 9)):  # variable resolution: positions from the grid, no fixed table
        pos = grid_positions((h, w)) if spec_fn is rope_vit_axial_spec else normalized_grid(h, w)
        pos = with_prefix(pos[[1, 0]] if spec_fn is rope_vit_axial_spec else pos, 5)  # 1 CLS + 4 registers
        x = torch.randn(1, h * w + 5, 2, 16, dtype=torch.float64)
        out, _ = apply_rope_axes(x, None, pos, spec)
        assert torch.equal(out[:, :5], x[:, :5])
        assert not torch.allclose(out[:, 6:], x[:, 6:])


# ---------------------------------------------------------------------- argument checks (user trial, vision)
@pytest.mark.parametrize(
    ("grid_thw", "named"),
    [
        ((1, 4.5, 6), "4.5"),  # was truncated to (1, 4, 6)
        ((1.9, 4, 6), "1.9"),  # was T = 1
        ((True, 4, 6), "True"),  # was T = 1
        ((1, 4, 6.0), "6.0"),
        ((1, torch.tensor(4.0), 6), "tensor(4.)"),
        ((torch.tensor(True), 4, 6), "tensor(True)"),
        (torch.tensor([1.0, 4.0, 6.0]), "tensor([1., 4., 6.])"),
        (torch.tensor([True, True, True]), "tensor([True, True, True])"),
        (torch.tensor([[1, 4, 6]]), "tensor([[1, 4, 6]])"),  # the whole [n, 3] grid: pass one row
        ((1, 4), "(1, 4)"),
    ],
)
def test_merge_block_positions_refuses_non_integers_and_bools_naming_the_value(
    grid_thw: object, named: str
) -> None:
    with pytest.raises(ValueError, match=r"grid_thw must be three positive ints \(T, h, w\)") as err:
        merge_block_positions(grid_thw)  # type: ignore[arg-type]
    assert named in str(err.value)


def test_merge_block_positions_takes_a_row_of_image_grid_thw_as_transformers() -> None:
    np = pytest.importorskip("numpy")
    vu = pytest.importorskip("transformers.vision_utils")
    grids = torch.tensor([[2, 4, 6], [1, 8, 2]])
    for i in range(2):
        want = vu.get_vision_position_ids(grids[i : i + 1], 2).T  # transformers' own ids for that image
        for form in (grids[i], grids[i].int(), tuple(grids[i]), tuple(np.array(grids[i].tolist()))):
            assert torch.equal(merge_block_positions(form, 2), want)


@pytest.mark.parametrize("name", ["shift", "jitter", "rescale"])
@pytest.mark.parametrize("value", [float("inf"), -float("inf"), float("nan")])
def test_normalized_grid_refuses_non_finite_augmentations(name: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"{name} must be None or a finite number"):
        normalized_grid(3, 4, **{name: value}, generator=torch.Generator().manual_seed(0))  # type: ignore[arg-type]


def test_normalized_grid_augmentations_stay_finite_at_large_strengths() -> None:
    aug = normalized_grid(
        3, 4, shift=1e6, jitter=1e6, rescale=1e6, generator=torch.Generator().manual_seed(0)
    )
    assert torch.isfinite(aug).all()


@pytest.mark.parametrize(
    "ids", [torch.tensor([True, False]), torch.tensor([0.0, 1.0]), torch.tensor([[0, 1]]), [0, 1]]
)
def test_pixtral_positions_from_ids_refuses_bool_float_and_other_shapes(ids: object) -> None:
    with pytest.raises(ValueError, match="ids must be a 1-D integer tensor"):
        pixtral_positions_from_ids(ids, 4)  # type: ignore[arg-type]
    assert torch.equal(
        pixtral_positions_from_ids(torch.tensor([0, 5], dtype=torch.int32), 4), torch.tensor([[0, 1], [0, 1]])
    )
