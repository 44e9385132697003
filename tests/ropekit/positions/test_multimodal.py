"""M-RoPE position ids: golden tables of multiaxis.md (2.4, 3, docstring examples) and transformers' own
``get_rope_index`` (5.23, the v5 rule) as an oracle on left-padded batches."""

from __future__ import annotations

import math
import types

import pytest
import torch

from ropekit.positions.multimodal import (
    VisionBlock,
    mrope_decode_positions,
    mrope_position_ids,
    mrope_positions,
    videorope_positions,
)


def test_qwen2_vl_image_worked_example_2_4() -> None:
    ids = mrope_positions([2, VisionBlock((1, 4, 6)), 2], family="qwen2_vl")
    assert ids.tolist() == [
        [0, 1, 2, 2, 2, 2, 2, 2, 5, 6],
        [0, 1, 2, 2, 2, 3, 3, 3, 5, 6],
        [0, 1, 2, 3, 4, 2, 3, 4, 5, 6],
    ]
    assert int(ids.max()) + 1 - ids.shape[1] == -3
    assert torch.equal(ids, mrope_positions([2, VisionBlock((1, 4, 6)), 2], rule="v5"))  # images: rules agree


def test_qwen2_vl_docstring_video_example() -> None:
    ids = mrope_positions([VisionBlock((3, 4, 4), video=True), 5], family="qwen2_vl")
    assert ids[0, :12].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert ids[1, :4].tolist() == [0, 0, 1, 1] and ids[2, :4].tolist() == [0, 1, 0, 1]
    assert ids[:, 12:].tolist() == [[3, 4, 5, 6, 7]] * 3


@pytest.mark.parametrize(
    "fps,want",
    [
        (1, [0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44]),
        (2, [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22]),
        (4, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]),
        (5, [0, 0, 1, 2, 3, 4, 4, 5, 6, 7, 8, 8]),  # 9 distinct ids (QwenLM/Qwen3-VL#1031)
    ],
)
def test_qwen2_5_vl_fractional_intervals_section_3(fps: int, want: list[int]) -> None:
    blk = VisionBlock((12, 2, 2), video=True, second_per_grid_t=2 / fps)  # temporal_patch_size 2
    ids = mrope_positions([blk], family="qwen2_5_vl", tokens_per_second=2)
    assert ids[0].tolist() == want


def _original_qwen2_5_vl_image(before: int, grid: tuple[int, int, int], after: int) -> torch.Tensor:
    """The image branch of the original Qwen2.5-VL ``get_rope_index`` (transformers 4.x): ``second_per_grid_t =
    0``, so ``t_index = (arange(t) * 0 * tokens_per_second).long()``; the text after resumes at max + 1."""
    t, h, w = grid[0], grid[1] // 2, grid[2] // 2
    t_index = (torch.arange(t).view(-1, 1).expand(-1, h * w) * 0 * 2).long().flatten()
    h_index = torch.arange(h).view(1, -1, 1).expand(t, -1, w).flatten()
    w_index = torch.arange(w).view(1, 1, -1).expand(t, h, -1).flatten()
    image = torch.stack([t_index, h_index, w_index]) + before
    text = torch.arange(after).expand(3, -1) + int(image.max()) + 1
    return torch.cat([torch.arange(before).expand(3, -1), image, text], dim=1)


def test_qwen2_5_vl_image_temporal_patches_v4_at_zero_v5_step_one() -> None:
    for grid in ((2, 2, 2), (3, 4, 2)):
        segs = [1, VisionBlock(grid), 2]
        v4 = mrope_positions(segs, family="qwen2_5_vl", rule="v4")
        assert torch.equal(v4, _original_qwen2_5_vl_image(1, grid, 2)), grid
        types_ = torch.tensor([[0] + [1] * VisionBlock(grid).tokens(2) + [0, 0]])
        want, _ = _hf_get_rope_index(
            "qwen2_5_vl", types_, torch.ones_like(types_), image_grid_thw=torch.tensor([grid])
        )
        assert torch.equal(mrope_positions(segs, family="qwen2_5_vl", rule="v5"), want[:, 0]), grid
    assert mrope_positions([VisionBlock((2, 2, 2))], family="qwen2_5_vl", rule="v5")[0].tolist() == [0, 1]
    # Qwen2-VL steps image patches by 1 under both rules (its original code has no time interval)
    assert mrope_positions([VisionBlock((2, 2, 2))], family="qwen2_vl")[0].tolist() == [0, 1]


def test_qwen2_5_vl_docstring_example_tps_25() -> None:
    ids = mrope_positions([VisionBlock((3, 4, 4), video=True, second_per_grid_t=2.0), 1], family="qwen2_5_vl",
                          tokens_per_second=25)  # fmt: skip
    assert ids[0, :12].tolist() == [0] * 4 + [50] * 4 + [100] * 4
    assert ids[0, 12] == 101  # v4: text resumes at max + 1


@pytest.mark.parametrize("rule,trailing,delta", [("v4", [10, 11], -3), ("v5", [3, 4], -5)])
def test_v4_v5_divergence_table(rule: str, trailing: list[int], delta: int) -> None:
    segs = [1, VisionBlock((3, 4, 4), video=True, second_per_grid_t=2.0), 2]
    ids = mrope_positions(segs, family="qwen2_5_vl", tokens_per_second=2, rule=rule)  # type: ignore[arg-type]
    assert ids[0, 1:13].tolist() == [1] * 4 + [5] * 4 + [9] * 4
    assert ids[:, -2:].tolist() == [trailing] * 3
    types_ = torch.tensor([[0] + [2] * 12 + [0, 0]])
    _, d = mrope_position_ids(types_, video_grid_thw=[[3, 4, 4]], second_per_grid_ts=[2.0], family="qwen2_5_vl",
                              tokens_per_second=2, rule=rule)  # type: ignore[arg-type]  # fmt: skip
    assert d.tolist() == [[delta]]
    first = mrope_decode_positions(d, 15)[0, 0, 0]
    assert first == (12 if rule == "v4" else 10)  # the divergence table's "first generated"


@pytest.mark.parametrize("family", ["qwen3_vl", "glm4v"])
def test_frame_split_families_give_every_frame_t_offset_zero(family: str) -> None:
    # frames separated by timestamp text (3 tokens each): each frame is its own block at t offset 0
    segs = [3, VisionBlock((1, 4, 4), video=True), 3, VisionBlock((1, 4, 4), video=True)]
    ids = mrope_positions(segs, family=family)  # type: ignore[arg-type]
    assert ids[0].tolist() == [0, 1, 2, 3, 3, 3, 3, 5, 6, 7, 8, 8, 8, 8]
    # a multi-frame video block is split the same way (frames back to back)
    split = mrope_positions([VisionBlock((2, 4, 4), video=True)], family=family)  # type: ignore[arg-type]
    assert split[0].tolist() == [0, 0, 0, 0, 2, 2, 2, 2]


def _hf_get_rope_index(family: str, types_: torch.Tensor, mask: torch.Tensor, **kw):
    pytest.importorskip("transformers")
    if family == "qwen2_vl":
        from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel as M
    elif family == "qwen2_5_vl":
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel as M
    elif family == "qwen3_vl":
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel as M
    else:
        from transformers.models.glm4v.modeling_glm4v import Glm4vModel as M
    fake = types.SimpleNamespace(
        config=types.SimpleNamespace(
            vision_config=types.SimpleNamespace(spatial_merge_size=2, tokens_per_second=2)
        )
    )
    fake.get_vision_position_ids = lambda *a, **k: M.get_vision_position_ids(fake, *a, **k)
    ids = torch.zeros_like(types_)
    return M.get_rope_index(fake, ids, types_, attention_mask=mask, **kw)


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v"])
def test_left_padded_batch_matches_transformers_v5(family: str) -> None:
    # row 0: 2 pad, text 3, image (1, 4, 6) -> 6 tokens, text 2, video (1, 4, 4) -> 4 tokens, text 1
    # row 1: text 2, image (1, 2, 2) -> 1 token, text 4, video (1, 2, 4) -> 2 tokens, text 9
    t0 = [0, 0] + [0] * 3 + [1] * 6 + [0] * 2 + [2] * 4 + [0]
    t1 = [0] * 2 + [1] + [0] * 4 + [2] * 2 + [0] * 9
    types_ = torch.tensor([t0, t1])
    mask = torch.ones_like(types_)
    mask[0, :2] = 0
    images, videos = torch.tensor([[1, 4, 6], [1, 2, 2]]), torch.tensor([[1, 4, 4], [1, 2, 4]])
    extra = {"second_per_grid_ts": torch.tensor([0.4, 1.5])} if family == "qwen2_5_vl" else {}
    want_ids, want_d = _hf_get_rope_index(
        family, types_, mask, image_grid_thw=images, video_grid_thw=videos, **extra
    )
    got_ids, got_d = mrope_position_ids(types_, attention_mask=mask, image_grid_thw=images, video_grid_thw=videos,
                                        family=family, rule="v5", **extra)  # type: ignore[arg-type]  # fmt: skip
    assert torch.equal(got_ids, want_ids) and torch.equal(got_d, want_d)
    # v4 on the same batch: same ids on real tokens (single-frame blocks), padding 1, delta on padded length
    v4_ids, v4_d = mrope_position_ids(types_, attention_mask=mask, image_grid_thw=images, video_grid_thw=videos,
                                      family=family, rule="v4", **extra)  # type: ignore[arg-type]  # fmt: skip
    real = mask.bool()
    assert torch.equal(v4_ids[:, real], want_ids[:, real]) and (v4_ids[:, ~real] == 1).all()
    # first generated token at max + 1 for both rules
    top = want_ids.masked_fill(~real, -1).amax(dim=(0, 2))
    assert mrope_decode_positions(v4_d, types_.shape[1])[0, :, 0].tolist() == (top + 1).tolist()
    assert mrope_decode_positions(want_d, real.sum(1))[0, :, 0].tolist() == (top + 1).tolist()


def test_multi_frame_video_qwen2_5_v5_matches_transformers() -> None:
    types_ = torch.tensor([[0] + [2] * 12 + [0, 0]])
    vids = torch.tensor([[3, 4, 4]])
    want, wd = _hf_get_rope_index("qwen2_5_vl", types_, torch.ones_like(types_), video_grid_thw=vids,
                                  second_per_grid_ts=torch.tensor([2.0]))  # fmt: skip
    got, gd = mrope_position_ids(
        types_, video_grid_thw=vids, second_per_grid_ts=[2.0], family="qwen2_5_vl", rule="v5"
    )
    assert torch.equal(got, want) and torch.equal(gd, wd)


def test_decode_continuity_and_batch_expansion() -> None:
    segs = [2, VisionBlock((1, 4, 6)), 2]
    full = mrope_positions([*segs, 3])  # prefill + 3 generated text tokens in one pass
    types_ = torch.tensor([[0, 0] + [1] * 6 + [0, 0]])
    _, d = mrope_position_ids(types_, image_grid_thw=[[1, 4, 6]])
    steps = [mrope_decode_positions(d, 10 + i)[:, 0, 0] for i in range(3)]
    assert torch.stack(steps, 1).tolist() == full[:, 10:].tolist()
    assert mrope_decode_positions(d, 10, batch=4).shape == (3, 4, 1)
    with pytest.raises(ValueError, match="batch=3 must be a positive multiple"):
        mrope_decode_positions(torch.zeros(2, 1, dtype=torch.int64), 10, batch=3)


def test_errors() -> None:
    with pytest.raises(ValueError, match="family must be one of"):
        mrope_positions([1], family="llava")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rule must be"):
        mrope_positions([1], rule="v6")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="grid_thw must be three positive ints"):
        VisionBlock((1, 0, 4))
    with pytest.raises(ValueError, match="not divisible by spatial_merge_size=2"):
        mrope_positions([VisionBlock((1, 3, 4))])
    with pytest.raises(ValueError, match="more image tokens than image_grid_thw"):
        mrope_position_ids(torch.tensor([[1, 1, 1, 1, 1, 1, 1]]), image_grid_thw=[[1, 4, 6]])
    with pytest.raises(ValueError, match="cannot hold grid"):
        mrope_position_ids(torch.tensor([[1, 1, 1, 0]]), image_grid_thw=[[1, 4, 6]])
    with pytest.raises(ValueError, match="were not used"):
        mrope_position_ids(torch.tensor([[0, 0]]), image_grid_thw=[[1, 4, 6]])
    with pytest.raises(ValueError, match="second_per_grid_ts has 2 entries for 1 videos"):
        mrope_position_ids(
            torch.tensor([[2]]),
            video_grid_thw=[[1, 2, 2]],
            second_per_grid_ts=[1.0, 2.0],
            family="qwen2_5_vl",
        )


I64_MAX = 2**63 - 1


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, 0.0, -1.0, "2", True])
def test_temporal_scale_must_be_finite_and_positive(bad: object) -> None:
    with pytest.raises(
        ValueError, match=rf"VisionBlock.second_per_grid_t must be a finite number > 0 or None, got {bad!r}"
    ):
        VisionBlock((2, 2, 2), video=True, second_per_grid_t=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=rf"tokens_per_second must be a finite number > 0, got {bad!r}"):
        video = [VisionBlock((2, 2, 2), video=True)]
        mrope_positions(video, family="qwen2_5_vl", tokens_per_second=bad)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=rf"second_per_grid_ts\[1\] must be a finite number > 0, got {bad!r}"
    ):
        mrope_position_ids(torch.tensor([[2, 2]]), video_grid_thw=[[1, 2, 2], [1, 2, 2]],
                           second_per_grid_ts=[1.0, bad], family="qwen2_5_vl")  # type: ignore[list-item]  # fmt: skip
    with pytest.raises(ValueError, match=rf"delta must be a finite number > 0, got {bad!r}"):
        videorope_positions([2], delta=bad)  # type: ignore[arg-type]


def test_temporal_product_past_int64_is_refused() -> None:
    # finite factors whose product leaves int64 (or float64): refused before int() or the int64 tensor
    for spg, tps in ((1e10, 1e10), (1e300, 1e10)):
        blk = VisionBlock((2, 2, 2), video=True, second_per_grid_t=spg)
        with pytest.raises(
            ValueError, match=r"M-RoPE ids overflow int64: frame 1 of VisionBlock.grid_thw=\(2, 2, 2\)"
        ):
            mrope_positions([blk], family="qwen2_5_vl", tokens_per_second=tps)
    # the oracle: int(i * spg * tps) in Python floats, as the Qwen reference writes it
    spg, tps = 0.7, 3.0
    ids = mrope_positions([VisionBlock((4, 2, 2), video=True, second_per_grid_t=spg)], family="qwen2_5_vl",
                          tokens_per_second=tps)  # fmt: skip
    assert ids[0].tolist() == [int(i * spg * tps) for i in range(4)]
    # second_per_grid_ts as a tensor reads the same values as the list
    types_ = torch.tensor([[0, 2, 2, 0]])
    a = mrope_position_ids(types_, video_grid_thw=[[2, 2, 2]], second_per_grid_ts=[2.5], family="qwen2_5_vl")
    b = mrope_position_ids(types_, video_grid_thw=[[2, 2, 2]], second_per_grid_ts=torch.tensor([2.5]),
                           family="qwen2_5_vl")  # fmt: skip
    assert torch.equal(a[0], b[0])
    t_row = a[0][0, 0].tolist()  # text at 0, the frames at 1 + int(i * 2.5 * 2), text after at max + 1
    assert t_row == [0, 1 + int(0 * 2.5 * 2.0), 1 + int(1 * 2.5 * 2.0), 7]


@pytest.mark.parametrize("start", [0, 1, -4, 10**12, I64_MAX - 40])
def test_mrope_start_shifts_ids_exactly(start: int) -> None:
    segs = [2, VisionBlock((2, 4, 6), video=True, second_per_grid_t=1.5), 3]
    base = mrope_positions(segs, family="qwen2_5_vl")  # small ids
    got = mrope_positions(segs, family="qwen2_5_vl", start=start)
    assert got.tolist() == [[start + v for v in row] for row in base.tolist()]  # Python-int oracle


def test_mrope_start_is_validated() -> None:
    for bad in (1.7, 3.0, "3", True, None):
        with pytest.raises(TypeError, match=rf"start must be an int, got {bad!r} \({type(bad).__name__}\)"):
            mrope_positions([2], start=bad)  # type: ignore[arg-type]
    for bad in (2**63, -(2**63) - 1):
        with pytest.raises(ValueError, match=rf"start must fit int64 \(the ids' dtype\), got {bad}"):
            mrope_positions([2], start=bad)
    # ids that would pass 2^63 - 1 are refused, not wrapped to negative ids
    assert mrope_positions([2], start=I64_MAX - 1).tolist() == [[I64_MAX - 1, I64_MAX]] * 3
    with pytest.raises(
        ValueError, match=r"a text run of 3 tokens reaches id 9223372036854775808 > 2\^63 - 1"
    ):
        mrope_positions([3], start=I64_MAX - 1)
    with pytest.raises(ValueError, match=r"VisionBlock.grid_thw=\(1, 6, 4\) reaches id 9223372036854775808"):
        mrope_positions([VisionBlock((1, 6, 4))], start=I64_MAX - 1)  # rows 0..2 of the merged grid
    with pytest.raises(ValueError, match=r"a text run of 1 tokens reaches id 9223372036854775808"):
        mrope_positions([VisionBlock((1, 2, 2)), 1], start=I64_MAX)  # the block fits, the text after does not


def test_videorope_start_is_validated() -> None:
    half = videorope_positions([2, VisionBlock((2, 2, 2), video=True)], delta=0.5, start=0.25)
    assert half.dtype == torch.float64 and half[0].tolist() == [0.25, 1.25, 2.25, 2.75]
    for bad, err, msg in (
        (math.nan, ValueError, "start must be a finite real number, got nan"),
        (math.inf, ValueError, "start must be a finite real number, got inf"),
        ("3", TypeError, r"start must be a finite real number, got '3' \(str\)"),
        (True, TypeError, r"start must be a finite real number, got True \(bool\)"),
        (2**53, ValueError, r"start must be below 2\^53 in magnitude"),
    ):
        with pytest.raises(err, match=msg):
            videorope_positions([2], start=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"videorope positions reach 9007199254740992 >= 2\^53"):
        videorope_positions([2], start=2**53 - 1)


def test_videorope_diagonal_layout_example_9_1() -> None:
    ids = videorope_positions([5, VisionBlock((2, 6, 6), video=True), 1], delta=1)
    f0, f1 = ids[:, 5:14], ids[:, 14:23]
    assert f0[0].tolist() == [5] * 9 and f1[0].tolist() == [6] * 9
    assert f0[1].tolist() == [4, 4, 4, 5, 5, 5, 6, 6, 6] and f0[2].tolist() == [4, 5, 6] * 3
    assert torch.equal(f1[1:], f0[1:] + 1)
    assert ids[:, -1].tolist() == [7, 7, 7]  # next text at max(t row) + 1
    half = videorope_positions([VisionBlock((3, 2, 2), video=True)], delta=0.5)
    assert half.dtype == torch.float64 and half[0].tolist() == [0.0, 0.5, 1.0]


def test_split_text_row() -> None:
    from ropekit.positions.multimodal import split_text_row

    p4 = torch.arange(4 * 2 * 3).reshape(4, 2, 3)
    text, rows = split_text_row(p4)
    assert torch.equal(text, p4[0]) and torch.equal(rows, p4[1:])  # type: ignore[arg-type]
    assert split_text_row(p4[1:])[0] is None
    assert split_text_row(p4[0])[1].shape == (3, 2, 3)
    with pytest.raises(ValueError, match="4 .* or 3 .* rows, got 2"):
        split_text_row(p4[:2])


def test_qwen2_5_vl_video_steps_copy_transformers_truncation() -> None:
    """Truncation of i * interval depends on order and dtype: transformers 5.x (after its PR #48669) forms the
    interval tokens_per_second * second_per_grid_t and multiplies in float32. With second_per_grid_t from the
    processor's float32 tensor, a float64 product put frame 25 of a 25 fps video at t = 3 instead of 4."""
    mod = pytest.importorskip("transformers.models.qwen2_5_vl.modeling_qwen2_5_vl")
    vision_ids = mod.Qwen2_5_VLModel.get_vision_position_ids  # uses nothing of the model instance
    for fps in range(1, 61):
        spg = torch.tensor([2.0 / fps], dtype=torch.float32)[
            0
        ]  # temporal_patch_size 2, as the processor gives it
        for tps in (1, 2, 4, 25):
            want = vision_ids(None, 0, torch.tensor([60, 2, 2]), 1, 2, tps * spg)
            block = VisionBlock((60, 2, 2), video=True, second_per_grid_t=float(spg))
            got = mrope_positions([block], family="qwen2_5_vl", tokens_per_second=tps)
            assert torch.equal(got, want), (fps, tps)


def test_grids_refuse_floats_and_bools_that_int_would_truncate() -> None:
    """A float or bool grid entry used to become int(v) silently (4.5 -> 4, True -> 1)."""
    for bad in (
        (1, 4.5, 6),
        (1, torch.tensor(4.5), 6),
        (torch.tensor(True), 4, 6),
        torch.tensor([1.0, 4.0, 6.0]),
    ):
        with pytest.raises(ValueError, match=r"VisionBlock.grid_thw must be three positive ints \(T, h, w\)"):
            VisionBlock(bad)  # type: ignore[arg-type]
    assert VisionBlock(torch.tensor([1, 4, 6])).grid_thw == (1, 4, 6)  # a row of image_grid_thw
    assert VisionBlock((torch.tensor(1), torch.tensor(4), torch.tensor(6))).grid_thw == (1, 4, 6)
    types_ = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 0]])
    for grids in ([[1, 4.5, 6]], torch.tensor([[1.0, 4.0, 6.0]]), [[True, 4, 6]]):
        with pytest.raises(ValueError, match=r"image_grid_thw\[0\] must be three positive ints"):
            mrope_position_ids(types_, image_grid_thw=grids)  # type: ignore[arg-type]
    ids, _ = mrope_position_ids(types_, image_grid_thw=torch.tensor([[1, 4, 6]]))
    assert torch.equal(ids, mrope_position_ids(types_, image_grid_thw=[[1, 4, 6]])[0])
