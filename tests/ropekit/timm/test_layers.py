"""timm's rotary layers one by one, patched against unpatched (timm's own module is the oracle): settings the
model zoo does not reach (pixel-mode bands, DINOv3's interleaved layout and min/max periods, its training-time
coordinate augmentations, the (sin, cos) ``RotaryEmbedding`` of ``RotAttentionPool2d``), the batched embeddings
NaFlexViT uses, SAM with rope, and NaFlexViT's variable-size (dict) input."""

from __future__ import annotations

import copy

import pytest
import torch
from timm.layers import RotAttentionPool2d
from timm.layers.pos_embed_sincos import (
    RotaryEmbedding,
    RotaryEmbeddingCat,
    RotaryEmbeddingDinoV3,
    RotaryEmbeddingMixed,
    RotaryEmbeddingMRope,
)
from torch import nn

import ropekit.timm as rt
from tests.ropekit.timm.zoo import build, images, rel_err, scramble

pytestmark = pytest.mark.timm


class Holder(nn.Module):
    def __init__(self, rope: nn.Module) -> None:
        super().__init__()
        self.rope = rope


def _embeds(rope: nn.Module, shapes: list[tuple[int, int] | None]) -> list[torch.Tensor]:
    out = []
    for s in shapes:
        e = rope.get_embed(s) if s is not None else rope.get_embed()
        out.extend(e if isinstance(e, tuple) else [e])
    return out


LAYERS = {
    "cat pixel bands (linear)": lambda: RotaryEmbeddingCat(32, in_pixels=True, linear_bands=True, max_res=64),
    "cat pixel bands (log)": lambda: RotaryEmbeddingCat(32, in_pixels=True, max_res=128),
    "cat cached xy offset ref": lambda: RotaryEmbeddingCat(
        32,
        in_pixels=False,
        temperature=100,
        feat_shape=[6, 4],
        ref_feat_shape=[3, 3],
        grid_indexing="xy",
        grid_offset=1.0,
    ),
    "base (sin, cos)": lambda: RotaryEmbedding(32, in_pixels=False, temperature=10000),
    "mixed ij": lambda: RotaryEmbeddingMixed(64, depth=3, num_heads=2, grid_indexing="ij"),
    "mixed xy cached": lambda: RotaryEmbeddingMixed(64, depth=2, num_heads=2, feat_shape=[5, 3]),
    "dinov3 interleaved": lambda: RotaryEmbeddingDinoV3(32, rotate_half=False, normalize_coords="max"),
    "dinov3 min/max periods": lambda: RotaryEmbeddingDinoV3(
        32, min_period=0.5, max_period=50.0, feat_shape=[4, 6]
    ),
    "dinov3 grid offset, min": lambda: RotaryEmbeddingDinoV3(32, grid_offset=0.25, normalize_coords="min"),
    "mrope": lambda: RotaryEmbeddingMRope(32, mrope_section=(2, 3, 3)),
}


#: timm forms the angle in float32: its error grows with the angle (pixel-mode bands reach max_res / 2 * pi ~ 200)
TOL = {"cat pixel bands (linear)": 1e-4, "cat pixel bands (log)": 2e-4}


@pytest.mark.parametrize("key", list(LAYERS))
def test_layer_embeddings_equal_unpatched(key: str) -> None:
    torch.manual_seed(0)
    rope = LAYERS[key]()
    shapes: list[tuple[int, int] | None] = [(7, 9), (1, 4)] + (
        [None] if getattr(rope, "feat_shape", None) else []
    )
    ref = _embeds(rope, shapes)
    holder = rt.patch(Holder(rope))
    got = _embeds(rope, shapes)
    assert type(rope).__name__ == "Ropekit" + type(ref[0]).__name__ or type(rope).__name__.startswith(
        "Ropekit"
    )
    for r, g in zip(ref, got):
        assert r.shape == g.shape and r.dtype == g.dtype
        assert float((r - g).detach().abs().max()) <= TOL.get(key, 1e-5), key
    if hasattr(rope, "get_batch_embeds") and getattr(rope, "bands", 0) is not None:
        rt.unpatch(holder)
        ref_b = rope.get_batch_embeds([(4, 6), (5, 3)], seq_len=32)
        rt.patch(holder)
        got_b = rope.get_batch_embeds([(4, 6), (5, 3)], seq_len=32)
        assert float((ref_b - got_b).detach().abs().max()) <= TOL.get(key, 1e-5)
    rt.unpatch(holder)


@pytest.mark.parametrize("linear", [True, False])
def test_pixel_bands_against_float64_oracle(linear: bool) -> None:
    """Pixel mode from the definition in float64 (linspace(-1, 1) coordinates, pi-scaled bands): ropekit's tables
    are float32-rounded exact values; timm's carry its float32 angle's error."""
    dim, max_res, (h, w) = 32, 128, (7, 9)
    rope = RotaryEmbeddingCat(dim, in_pixels=True, linear_bands=linear, max_res=max_res)
    nb = dim // 4
    k = torch.arange(nb, dtype=torch.float64)
    if linear:
        bands = (1 + k * (max_res / 2 - 1) / (nb - 1)) * torch.pi
    else:
        bands = (
            2 ** (k * (torch.log2(torch.tensor(float(max_res), dtype=torch.float64)) - 1) / (nb - 1))
            * torch.pi
        )
    ys, xs = torch.meshgrid(
        torch.linspace(-1, 1, h, dtype=torch.float64),
        torch.linspace(-1, 1, w, dtype=torch.float64),
        indexing="ij",
    )
    ang = torch.cat([ys.reshape(-1, 1) * bands, xs.reshape(-1, 1) * bands], -1).repeat_interleave(2, -1)
    oracle = torch.cat([ang.sin(), ang.cos()], -1)
    timm_err = float((rope.get_embed((h, w)).double() - oracle).abs().max())
    with rt.patched(Holder(rope)):
        ours_err = float((rope.get_embed((h, w)).double() - oracle).abs().max())
    assert ours_err <= 1e-6 < timm_err


def test_dinov3_training_augmentations_follow_timm_under_one_seed() -> None:
    rope = RotaryEmbeddingDinoV3(
        32, shift_coords=0.1, jitter_coords=1.5, rescale_coords=2.0, feat_shape=[4, 4]
    )
    rope.train()
    torch.manual_seed(3)
    ref = [rope.get_embed(), rope.get_embed((5, 7))]
    with rt.patched(Holder(rope)):
        torch.manual_seed(3)
        got = [rope.get_embed(), rope.get_embed((5, 7))]
        rope.eval()
        assert (
            float((got[0] - rope.get_embed()).abs().max()) > 1e-3
        )  # the augmentation did move the positions
    for r, g in zip(ref, got):
        assert float((r - g).abs().max()) <= 1e-5


def test_rot_attention_pool_with_base_rotary() -> None:
    torch.manual_seed(0)
    pool = RotAttentionPool2d(64, ref_feat_size=4, head_dim=32, rope_type="base").eval()
    scramble(pool, 0)
    assert type(pool.pos_embed) is RotaryEmbedding
    x = torch.randn(2, 64, 4, 5)
    with torch.no_grad():
        ref = pool(x)
        with rt.patched(pool):
            got = pool(x)
    assert rel_err(got, ref) <= 1e-4


def test_sam_with_rope() -> None:
    kw = {
        "embed_dim": 64,
        "num_heads": 2,
        "depth": 2,
        "global_attn_indexes": [1],
        "window_size": 2,
        "use_rel_pos": False,
        "use_rope": True,
        "num_classes": 0,
    }
    model = build("samvit_base_patch16", kw, 64)
    x = images(64)
    with torch.no_grad():
        ref = model(x)
        with rt.patched(model):
            assert type(model.rope_global).__name__ == "RopekitRotaryEmbeddingCat"
            got = model(x)
    assert rel_err(got, ref) <= 1e-4


# "mixed" is left out: timm 1.0.29's NaFlexRopeIterator is called with dtype and device swapped, so the unpatched
# model already fails on dict input with RoPE-Mixed (TypeError in torch.zeros); image-tensor input is in the zoo
@pytest.mark.parametrize("rope_type", ["axial", "dinov3"])
def test_naflexvit_variable_size_batch(rope_type: str) -> None:
    model = build(
        "naflexvit_base_patch16_gap",
        {"embed_dim": 64, "num_heads": 2, "depth": 2, "num_classes": 8, "rope_type": rope_type},
        64,
    )
    g = torch.Generator().manual_seed(0)
    sizes = [(3, 5), (4, 4)]
    n = max(h * w for h, w in sizes)
    patches = torch.randn(len(sizes), n, 16 * 16 * 3, generator=g)
    coord = torch.zeros(len(sizes), n, 2, dtype=torch.long)
    valid = torch.zeros(len(sizes), n, dtype=torch.bool)
    for i, (h, w) in enumerate(sizes):
        yx = torch.stack(torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij"), -1).reshape(-1, 2)
        coord[i, : h * w], valid[i, : h * w] = yx, True
    batch = {"patches": patches, "patch_coord": coord, "patch_valid": valid}
    with torch.no_grad():
        ref = model(copy.copy(batch))
        with rt.patched(model):
            got = model(copy.copy(batch))
    assert rel_err(got, ref) <= 1e-4


def test_grid_must_be_two_dimensional() -> None:
    rope = RotaryEmbeddingCat(32, in_pixels=False)
    with (
        rt.patched(Holder(rope)),
        pytest.raises(ValueError, match=r"2-D grid \(H, W\), got shape \(2, 3, 4\)"),
    ):
        rope.get_embed((2, 3, 4))


def test_other_views_of_a_patched_embedding_rotate_as_timm() -> None:
    """One token's row ``emb[i]`` of an axial embedding, or one head of a Mixed depth slice, broadcast over the
    tokens: not a depth slice ropekit serves, so timm's own function rotates (the wrapper is installed everywhere
    while any model is patched)."""
    import timm.layers.pos_embed_sincos as sincos

    original = sincos.apply_rot_embed_cat
    axial = RotaryEmbeddingCat(32, in_pixels=False, temperature=100)
    mixed = RotaryEmbeddingMixed(32, depth=2, num_heads=2)
    g = torch.Generator().manual_seed(0)
    with rt.patched(nn.Sequential(axial, mixed)):
        assert sincos.apply_rot_embed_cat is not original  # the wrapper
        emb, memb = axial.get_embed((4, 4)), mixed.get_embed((4, 4))
        with torch.no_grad():
            for view in (emb[5], memb[1][0], memb[1][:, 3]):
                x = torch.randn(2, 2, 1, view.shape[-1] // 2, generator=g)
                assert torch.equal(sincos.apply_rot_embed_cat(x, view), original(x, view))


def test_float64_dinov3_model_patches() -> None:
    """A float64 DINOv3 model (float64 periods): verified on float64 q and k, as its forward gives them; timm's
    arithmetic rotates float64 (the tables are ropekit's float32 values)."""
    model = build("vit_small_patch16_dinov3", {"embed_dim": 64, "num_heads": 2, "depth": 2}, 64).double()
    x = images(64).double()
    with torch.no_grad():
        ref = model(x)
        with rt.patched(model):
            assert type(model.rope).__name__ == "RopekitRotaryEmbeddingDinoV3"
            got = model(x)
    assert got.dtype == torch.float64 and rel_err(got, ref) <= 1e-6
