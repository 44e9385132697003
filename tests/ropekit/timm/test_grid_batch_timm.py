"""ropekit.positions.grid_batch against timm's own code (oracle): the coordinates timm's rotary embeddings use with
``ref_feat_shape`` (``build_fourier_pos_embed(include_grid=True)``, EVA-02's resize scheme), and the rotary tables
``build_rotary_pos_embed`` makes from them. Runs in the timm step (.timm-site on PYTHONPATH, ``-m timm``)."""

from __future__ import annotations

import pytest
import torch

from ropekit.positions import padded_grid_positions, resized_grid_positions

pytestmark = pytest.mark.timm
sincos = pytest.importorskip("timm.layers.pos_embed_sincos")


@pytest.mark.parametrize(
    ("shape", "ref", "offset", "pixels"),
    [((24, 20), (16, 16), 0.0, False), ((7, 9), (14, 14), 0.5, False), ((12, 10), (16, 16), 0.0, True)],
)
def test_resized_grid_is_timms_ref_feat_shape_grid(shape, ref, offset, pixels) -> None:
    grid, _, _ = sincos.build_fourier_pos_embed(
        list(shape),
        num_bands=4,
        in_pixels=pixels,
        ref_feat_shape=list(ref),
        grid_offset=offset,
        include_grid=True,
    )  # [H, W, 2, 1] float32, channel a = axis a ('ij')
    want = grid[..., 0].reshape(-1, 2).t().double()
    got = resized_grid_positions(shape, ref, offset=offset, mode="pixel" if pixels else "index")
    torch.testing.assert_close(got, want, atol=4e-6, rtol=2e-7)  # timm rounds to float32


def test_rotary_tables_from_padded_batch_equal_timms_per_image() -> None:
    """Each image of a padded batch, rescaled onto the training grid, gets timm's rotary sin/cos at its own size."""
    sizes, ref, dim = [(10, 12), (16, 8)], (16, 16), 32
    pos, mask = padded_grid_positions(sizes, ref_shape=ref)
    bands = sincos.freq_bands(dim // 4, temperature=10000.0, step=1).double()  # timm's language-style bands
    for i, (h, w) in enumerate(sizes):
        sin_t, cos_t = sincos.build_rotary_pos_embed(
            [h, w], dim=dim, in_pixels=False, ref_feat_shape=list(ref)
        )
        p = pos[:, i][:, mask[i]]  # [2, h*w]
        ang = (p[..., None] * bands).permute(1, 0, 2).reshape(h * w, -1).repeat_interleave(2, -1)
        torch.testing.assert_close(torch.sin(ang).float(), sin_t, atol=2e-6, rtol=0)
        torch.testing.assert_close(torch.cos(ang).float(), cos_t, atol=2e-6, rtol=0)
