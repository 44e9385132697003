"""M-RoPE decode positions against transformers 5.23 itself: the ids its ``generate()`` hands the language model
for every new token (tiny random Qwen2-VL, Qwen2.5-VL, Qwen3-VL and GLM-4V, a left-padded batch whose prompts end
in text after a multi-frame video, in an image and in a video; beams), and the ids its model forward derives
from ``rope_deltas`` when called with a cache and no ``position_ids``.

No pixels are fed: positions depend on the token types and grids only, and the vision towers would only cost time.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from ropekit.positions.multimodal import (
    mrope_decode_positions,
    mrope_generate_positions,
    mrope_position_ids,
)

from .test_patch_vl import IMG, VID, _model

FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v"]
IMAGES = [[1, 4, 6], [1, 4, 4]]
VIDEOS = [[6, 4, 4], [2, 4, 6]]


def _video(family: str, t: int, per_frame: int) -> list[int]:
    """Token types of a video: frames back to back, or one block a frame with a timestamp token between."""
    if family in ("qwen3_vl", "glm4v"):
        return [2] * per_frame + [x for _ in range(t - 1) for x in [0] + [2] * per_frame]
    return [2] * (per_frame * t)


def _batch(family: str) -> dict:
    rows = [
        [0, 0, *_video(family, 6, 4), 0, 0],  # text after a multi-frame video
        [0, 0, 0, *[1] * 6],  # ends in an image
        [0, *[1] * 4, 0, *_video(family, 2, 6)],  # ends in a video
    ]
    width = max(map(len, rows))
    types_ = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    ids = torch.where(types_ == 1, IMG, torch.where(types_ == 2, VID, 20)).masked_fill(mask == 0, 0)
    kw = {"input_ids": ids, "attention_mask": mask, "mm_token_type_ids": types_,
          "image_grid_thw": torch.tensor(IMAGES), "video_grid_thw": torch.tensor(VIDEOS)}  # fmt: skip
    if family == "qwen2_5_vl":
        kw["second_per_grid_ts"] = torch.tensor([2.0, 0.5])
    return kw


def _seen_positions(model: torch.nn.Module) -> tuple[list[torch.Tensor], object]:
    seen: list[torch.Tensor] = []
    hook = model.model.language_model.register_forward_pre_hook(
        lambda _m, _a, k: seen.append(k["position_ids"].clone()), with_kwargs=True
    )
    return seen, hook


def _ours(family: str, kw: dict) -> tuple[torch.Tensor, torch.Tensor]:
    extra = {"second_per_grid_ts": kw["second_per_grid_ts"]} if family == "qwen2_5_vl" else {}
    return mrope_position_ids(kw["mm_token_type_ids"], attention_mask=kw["attention_mask"],
                              image_grid_thw=IMAGES, video_grid_thw=VIDEOS, family=family, rule="v5",
                              **extra)  # type: ignore[arg-type]  # fmt: skip


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("beams", [1, 2])
def test_generate_continues_each_row_from_the_prompts_last_id(family: str, beams: int) -> None:
    torch.manual_seed(0)
    model = _model(family).eval()
    kw = _batch(family)
    seen, hook = _seen_positions(model)
    with torch.no_grad():
        model.generate(**kw, max_new_tokens=4, do_sample=False, num_beams=beams, pad_token_id=0)
    hook.remove()
    prefill, steps = seen[0], seen[1:]
    assert len(steps) == 3 and prefill.shape[0] == 4  # generate() passes [text; t; h; w]
    ours, deltas = _ours(family, kw)
    assert torch.equal(prefill[1:], ours.repeat_interleave(beams, dim=1))
    b = 3 * beams
    for k, step in enumerate(steps):
        assert torch.equal(step[1:], mrope_generate_positions(ours, k, batch=b)), (family, k)
        assert torch.equal(step, mrope_generate_positions(prefill, k))  # the text row continues the same way
    # the delta form (max + 1 onward) is another rule: it differs after an image or video, and after text that
    # follows a multi-frame Qwen2/2.5-VL video (Qwen3-VL and GLM-4V split frames: there the text is the max)
    real = kw["attention_mask"].sum(1).repeat_interleave(beams)
    old = mrope_decode_positions(deltas, real, batch=b)[:, :, 0]
    differs = [not torch.equal(old[:, r], steps[0][1:, r, 0]) for r in range(b)]
    assert differs == [d for d in (family in ("qwen2_vl", "qwen2_5_vl"), True, True) for _ in range(beams)]


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_without_position_ids_adds_deltas_to_the_cache_length(family: str) -> None:
    torch.manual_seed(0)
    model = _model(family).eval()
    kw = _batch(family)
    row = {k: v[:1] for k, v in kw.items() if k in ("input_ids", "mm_token_type_ids")}  # unpadded row 0
    grids = {"image_grid_thw": None, "video_grid_thw": kw["video_grid_thw"][:1]}
    if family == "qwen2_5_vl":
        grids["second_per_grid_ts"] = kw["second_per_grid_ts"][:1]
    seen, hook = _seen_positions(model)
    with torch.no_grad():
        out = model(**row, **grids, use_cache=True)
        cache, n = out.past_key_values, row["input_ids"].shape[1]
        for k in range(2):
            model(input_ids=torch.tensor([[20]]), past_key_values=cache)
    hook.remove()
    deltas = model.model.rope_deltas
    extra = {"second_per_grid_ts": grids["second_per_grid_ts"]} if family == "qwen2_5_vl" else {}
    _, ours = mrope_position_ids(row["mm_token_type_ids"], video_grid_thw=grids["video_grid_thw"],
                                 family=family, rule="v5", **extra)  # type: ignore[arg-type]  # fmt: skip
    assert torch.equal(ours, deltas)
    for k, step in enumerate(seen[1:]):
        assert torch.equal(step, mrope_decode_positions(ours, n + k)), (family, k)
