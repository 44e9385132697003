"""M-RoPE arguments that used to be accepted and misread: decode inputs (float deltas truncated, negative or bool
past lengths, ``batch=True``), video timing given to a family that ignores it, grids not divisible by the merge
(blamed on the token count), and attention masks that are not 0/1. Each is refused naming the argument and value."""

from __future__ import annotations

import pytest
import torch

from ropekit.positions.multimodal import (
    VisionBlock,
    mrope_decode_positions,
    mrope_generate_positions,
    mrope_position_ids,
    mrope_positions,
)

DELTAS = torch.tensor([[-3], [2]])


@pytest.mark.parametrize(
    "deltas",
    [torch.tensor([[2.7]]), torch.tensor([[2.0]]), torch.tensor([[True]]), torch.tensor([[1 + 0j]])],
)
def test_decode_refuses_non_integer_deltas(deltas: torch.Tensor) -> None:
    with pytest.raises(ValueError, match=rf"rope_deltas must be an integer tensor, got {deltas.dtype}"):
        mrope_decode_positions(deltas, 10)


@pytest.mark.parametrize(
    "past,msg",
    [
        (torch.tensor([-5, 4]), r"past_length must be non-negative, got \[-5, 4\]"),
        (
            torch.tensor([True, False]),
            r"past_length must be an integer tensor, got torch.bool \[True, False\]",
        ),
        (torch.tensor([4.0, 5.0]), r"past_length must be an integer tensor, got torch.float32"),
        (torch.tensor([4, 5, 6]), r"past_length tensor must have shape \(2,\), got \(3,\)"),
        (-5, "past_length must be a non-negative int or an integer tensor, got -5"),
        (True, "past_length must be a non-negative int or an integer tensor, got True"),
    ],
)
def test_decode_refuses_bad_past_lengths_like_the_int_path(past: object, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        mrope_decode_positions(DELTAS, past)  # type: ignore[arg-type]


@pytest.mark.parametrize("batch", [True, False, 3, 0, -2, 4.0, "4"])
def test_decode_refuses_bad_batch_even_when_it_equals_the_rows(batch: object) -> None:
    with pytest.raises(ValueError, match=rf"batch={batch!r} must be a positive multiple of the 2 rows"):
        mrope_decode_positions(DELTAS, 10, batch=batch)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=rf"batch={batch!r} must be a positive multiple of the 2 rows"):
        mrope_generate_positions(torch.zeros(3, 2, 4, dtype=torch.int64), batch=batch)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"batch=True must be a positive multiple of the 1 rows"):
        mrope_decode_positions(DELTAS[:1], 10, batch=True)  # True == 1 used to pass


def test_decode_accepts_integer_inputs_of_any_width() -> None:
    want = mrope_decode_positions(DELTAS, torch.tensor([7, 9]))
    assert want[:, :, 0].tolist() == [[4, 11]] * 3
    got = mrope_decode_positions(DELTAS.to(torch.int32), torch.tensor([7, 9], dtype=torch.int16))
    assert got.dtype == torch.int64 and torch.equal(got, want)


def test_generate_positions_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match=r"prefill_ids must be an integer tensor, got torch.float32"):
        mrope_generate_positions(torch.zeros(3, 1, 2))
    with pytest.raises(
        ValueError, match=r"prefill_ids must be \[3 or 4, batch, seq >= 1\], got shape \(2, 1, 2\)"
    ):
        mrope_generate_positions(torch.zeros(2, 1, 2, dtype=torch.int64))
    with pytest.raises(
        ValueError, match=r"prefill_ids must be \[3 or 4, batch, seq >= 1\], got shape \(3, 1, 0\)"
    ):
        mrope_generate_positions(torch.zeros(3, 1, 0, dtype=torch.int64))
    with pytest.raises(ValueError, match="generated must be a non-negative int, got -1"):
        mrope_generate_positions(torch.zeros(3, 1, 2, dtype=torch.int64), -1)
    ids = torch.tensor([[[0, 4]], [[0, 5]], [[0, 6]]])
    assert mrope_generate_positions(ids, 2, 3).tolist() == [[[7, 8, 9]], [[8, 9, 10]], [[9, 10, 11]]]


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl", "glm4v"])
def test_video_timing_is_refused_for_families_that_ignore_it(family: str) -> None:
    types_ = torch.tensor([[0] + [2] * 8 + [0]])
    grids = {"video_grid_thw": [[2, 4, 4]]}
    with pytest.raises(
        ValueError, match=rf"second_per_grid_ts is read by family='qwen2_5_vl' only .*{family!r}"
    ):
        mrope_position_ids(types_, second_per_grid_ts=[5.0], family=family, **grids)  # type: ignore[arg-type]
    for tps in (99.0, 2.0):  # even the value Qwen2.5-VL would default to: it means nothing here
        with pytest.raises(
            ValueError, match=rf"tokens_per_second={tps!r} is read by family='qwen2_5_vl' only"
        ):
            mrope_position_ids(types_, tokens_per_second=tps, family=family, **grids)  # type: ignore[arg-type]
        with pytest.raises(
            ValueError, match=rf"tokens_per_second={tps!r} is read by family='qwen2_5_vl' only"
        ):
            mrope_positions([1], tokens_per_second=tps, family=family)  # type: ignore[arg-type]
    block = VisionBlock((2, 4, 4), video=True, second_per_grid_t=0.5)
    with pytest.raises(
        ValueError, match=r"VisionBlock.second_per_grid_t=0.5 is read by family='qwen2_5_vl' only"
    ):
        mrope_positions([block], family=family)  # type: ignore[arg-type]
    # without timing the family's own rule applies; Qwen2.5-VL reads both
    mrope_position_ids(types_, family=family, **grids)  # type: ignore[arg-type]
    fast = mrope_position_ids(
        types_, second_per_grid_ts=[5.0], tokens_per_second=2.0, family="qwen2_5_vl", **grids
    )
    assert fast[0][0, 0].tolist() == [0, 1, 1, 1, 1, 11, 11, 11, 11, 12]


def test_an_image_refuses_a_frame_interval() -> None:
    """An image has no frame interval: Qwen2.5-VL's ``second_per_grid_ts`` holds one value per video only, so a
    ``second_per_grid_t`` on an image block would be ignored and is refused, whatever the family."""
    with pytest.raises(ValueError, match=r"second_per_grid_t=0.5 applies to videos only: pass video=True"):
        VisionBlock((2, 4, 4), second_per_grid_t=0.5)
    with pytest.raises(ValueError, match=r"second_per_grid_t=0.5 applies to videos only"):
        VisionBlock((1, 4, 4), video=False, second_per_grid_t=0.5)
    assert VisionBlock((2, 4, 4), video=True, second_per_grid_t=0.5).second_per_grid_t == 0.5


def test_transformers_ignores_the_timing_it_is_refused_for() -> None:
    """The oracle for refusing: Qwen2-VL's ``get_rope_index`` takes ``second_per_grid_ts`` and drops it."""
    pytest.importorskip("transformers")
    from tests.ropekit.positions.test_multimodal import _hf_get_rope_index

    types_ = torch.tensor([[0] + [2] * 8 + [0]])
    grids = {"video_grid_thw": torch.tensor([[2, 4, 4]])}
    a = _hf_get_rope_index("qwen2_vl", types_, torch.ones_like(types_), **grids)
    b = _hf_get_rope_index(
        "qwen2_vl", types_, torch.ones_like(types_), second_per_grid_ts=torch.tensor([5.0]), **grids
    )
    assert torch.equal(a[0], b[0])


def test_grid_not_divisible_by_the_merge_is_named() -> None:
    types_ = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0]])
    with pytest.raises(
        ValueError, match=r"image_grid_thw\[1\]=\(1, 3, 5\) has h or w not divisible by spatial_merge_size=2"
    ):
        mrope_position_ids(types_, image_grid_thw=[[1, 4, 4], [1, 3, 5]])
    with pytest.raises(ValueError, match=r"video_grid_thw\[0\]=\(2, 6, 6\) .* spatial_merge_size=4"):
        mrope_position_ids(torch.tensor([[2, 2]]), video_grid_thw=[[2, 6, 6]], spatial_merge_size=4)


@pytest.mark.parametrize("bad", [0.4, 2, -1, float("nan")])
def test_attention_mask_must_hold_only_zero_and_one(bad: float) -> None:
    types_ = torch.tensor([[0, 0, 1, 1, 1, 1, 0]])
    mask = torch.tensor([[1.0, bad, 1, 1, 1, 1, 1]])
    with pytest.raises(ValueError, match=r"attention_mask must hold only 0 and 1, got .* at \(0, 1\)") as err:
        mrope_position_ids(types_, attention_mask=mask, image_grid_thw=[[1, 4, 4]])
    assert f"got {float(bad)!r}"[:7] in str(err.value)  # the value as the float32 mask holds it


def test_zero_one_masks_of_any_dtype_agree() -> None:
    types_ = torch.tensor([[0, 0, 1, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1, 1]])
    mask = torch.tensor([[0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]])
    grids = {"image_grid_thw": [[1, 4, 4], [1, 4, 4]]}
    want = mrope_position_ids(types_, attention_mask=mask, **grids)
    for dtype in (torch.bool, torch.int32, torch.float32):
        got = mrope_position_ids(types_, attention_mask=mask.to(dtype), **grids)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), dtype


_I64_MAX = 2**63 - 1


@pytest.mark.parametrize(
    ("deltas", "past", "seq_len", "batch"),
    [
        ([[3]], 2**63 - 2, 1, None),  # the trial: wrapped to -2**63 + 1
        ([[2**62]], 2**62, 1, None),  # wrapped to -2**63
        ([[0]], _I64_MAX, 2, None),  # the second new token passes int64
        ([[0], [5]], [7, 2**63 - 5], 1, None),  # only row 1 passes it
        ([[0], [1]], [0, 0, 0, _I64_MAX], 1, 4),  # beams: row 3 reads delta row 1
    ],
)
def test_decode_refuses_ids_past_int64(
    deltas: list[list[int]], past: int | list[int], seq_len: int, batch: int | None
) -> None:
    """Oracle: the ids in Python integers (exact), past + k + delta on each row (deltas repeated for beams).
    ids past 2^63 - 1 used to wrap silently to large negative ids (int64 addition)."""
    rows = batch or len(deltas)
    per_row = [deltas[i // (rows // len(deltas))][0] for i in range(rows)]
    starts = past if isinstance(past, list) else [past] * rows
    exact = [[p + k + d for k in range(seq_len)] for p, d in zip(starts, per_row)]
    assert max(max(r) for r in exact) > _I64_MAX  # the case really passes int64
    past_arg = torch.tensor(past) if isinstance(past, list) else past
    with pytest.raises(
        ValueError, match=r"M-RoPE ids overflow int64: past_length=\d+.* rope_deltas\[\d\]=\d+"
    ):
        mrope_decode_positions(torch.tensor(deltas), past_arg, seq_len, batch=batch)


@pytest.mark.parametrize(
    ("deltas", "past", "seq_len"),
    [([[3]], 2**63 - 4, 1), ([[-3], [2]], [2**63 - 1, 2**63 - 3], 1), ([[0]], _I64_MAX - 1, 2)],
)
def test_decode_ids_up_to_int64_max_are_exact(
    deltas: list[list[int]], past: int | list[int], seq_len: int
) -> None:
    """Positive control: ids that reach exactly 2^63 - 1 are built, equal to the Python-integer oracle."""
    starts = past if isinstance(past, list) else [past] * len(deltas)
    want = [[p + k + d[0] for k in range(seq_len)] for p, d in zip(starts, deltas)]
    past_arg = torch.tensor(past) if isinstance(past, list) else past
    got = mrope_decode_positions(torch.tensor(deltas), past_arg, seq_len)
    assert all(got[a].tolist() == want for a in range(3))


def test_decode_refuses_a_past_length_past_int64() -> None:
    with pytest.raises(ValueError, match=r"past_length=9223372036854775808 is past int64"):
        mrope_decode_positions(torch.tensor([[0]]), 2**63, 0)


def test_numpy_integer_batch_and_start_are_ints() -> None:
    """A numpy int batch (beam expansion) gives the ids a Python int does; bools stay refused (above)."""
    np = pytest.importorskip("numpy")
    want = mrope_decode_positions(DELTAS, 10, batch=2 * DELTAS.shape[0])
    got = mrope_decode_positions(DELTAS, 10, batch=np.int64(2 * DELTAS.shape[0]))
    assert torch.equal(got, want)
