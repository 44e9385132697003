"""The M-RoPE position ids that ``ropekit bench --mode hf`` feeds a Qwen2-VL decoder are the ones transformers'
own ``get_rope_index`` builds for the same token sequence (text, one image of side x side merged patches, text),
so the benchmark times the layout a real image prompt has; a decode step's ids continue the prompt's."""

from __future__ import annotations

import pytest
import torch

T = pytest.importorskip("transformers")

from ropekit.hf import bench


def _tiny() -> object:
    text = {"vocab_size": 100, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
            "num_attention_heads": 2, "num_key_value_heads": 1, "bos_token_id": 1, "eos_token_id": 2,
            "pad_token_id": 0, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                                   "mrope_section": [2, 3, 3]}}  # fmt: skip
    vision = {"depth": 1, "embed_dim": 16, "hidden_size": 32, "num_heads": 2, "mlp_ratio": 2}
    cfg = T.Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=5, vision_start_token_id=4)
    return T.Qwen2VLForConditionalGeneration(cfg).model


@pytest.mark.parametrize("n", [65, 257, 2048])
def test_positions_are_transformers_get_rope_index(n: int) -> None:
    prefix, side = bench._image(n)
    ids = torch.full((1, n), 7)
    ids[0, prefix : prefix + side * side] = 5
    types = (ids == 5).int()
    grid = torch.tensor([[1, 2 * side, 2 * side]])  # before the 2 x 2 spatial merge
    want, _ = _tiny().get_rope_index(ids, mm_token_type_ids=types, image_grid_thw=grid)
    got = bench._mrope_positions(1, n, 0)
    assert got.shape == (3, 1, n) and side * side >= n // 2 - 2 * side
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    # a decode step after a prompt of n - 1 tokens: the last column, for every sequence of the batch
    step = bench._mrope_positions(4, 1, n - 1)
    torch.testing.assert_close(step, want[:, :, -1:].expand(3, 4, 1), rtol=0, atol=0)
