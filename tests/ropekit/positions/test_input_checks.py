"""Inputs the position builders used to take silently or answer with an unnamed error (a user trial): lossy
float32 timestamps given as NumPy data, results past float64, merged V2PE positions, uint64 offsets past int64,
out-of-range pad positions and grid starts, 0-d tensor offsets, meta tensors. Oracles: Python arithmetic on the
given values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ropekit import (
    RopeSpec,
    apply_rope,
    apply_rope_varlen,
    positions_from_cu_seqlens,
    positions_from_mask,
    positions_with_offset,
)
from ropekit.positions.grid import grid_positions
from ropekit.positions.time import time_positions, v2pe_positions

UNIX = [
    1_700_000_000.0,
    1_700_000_060.0,
    1_700_000_100.0,
]  # float32 rounds these to 1.7e9, 1.7e9, 1.7e9 + 128


@pytest.mark.parametrize(
    "given",
    [
        lambda: np.array(UNIX, dtype=np.float32),
        lambda: [np.float32(x) for x in UNIX],
        lambda: torch.tensor(UNIX, dtype=torch.float32),
    ],
    ids=["numpy-array", "numpy-scalars", "tensor"],
)
def test_float32_timestamps_past_2_24_are_refused_however_given(given: object) -> None:
    data = given()  # type: ignore[operator]
    assert float(np.float32(UNIX[1])) == float(np.float32(UNIX[0]))  # the premise: float32 merges them
    with pytest.raises(ValueError, match=r"timestamps are float32 with magnitude up to 1\.7e\+09 >= 2\^24"):
        time_positions(data)


def test_numpy_and_list_timestamps_keep_their_values() -> None:
    want = [x - UNIX[0] for x in UNIX]  # Python float64 arithmetic
    assert time_positions(np.array(UNIX)).tolist() == want
    assert time_positions(UNIX).tolist() == want
    assert time_positions([np.float64(x) for x in UNIX]).tolist() == want
    ns = [1_700_000_000_000_000_001, 1_700_000_000_000_000_003]
    assert time_positions(np.array(ns, dtype=np.int64), scale=1e-9 * 1e9).tolist() == [0.0, 2.0]
    assert time_positions(np.array([3, 5], dtype=np.uint64)).tolist() == [0.0, 2.0]
    with pytest.raises(ValueError, match="timestamps are uint64 with values >= 2\\^63"):
        time_positions(np.array([2**63, 2**63 + 2], dtype=np.uint64))
    for bad in ([10**20], [1, [2]], ["a"]):
        with pytest.raises(ValueError, match="timestamps must be a tensor or a sequence of numbers"):
            time_positions(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("ts", "scale"), [([0.0, 1.0], 1e-320), ([0, 10**18], 1e-300)])
def test_a_scale_that_overflows_float64_is_named(ts: list[float], scale: float) -> None:
    assert max(ts) / scale == float("inf")  # the premise, in Python floats
    with pytest.raises(ValueError, match=rf"scale={scale!r} is too small for these timestamps"):
        time_positions(ts, scale=scale)


@pytest.mark.parametrize(("start", "delta"), [(2.0**52, 0.5), (2.0**51 + 8, 0.125)])
def test_v2pe_positions_that_float64_merges_are_refused(start: float, delta: float) -> None:
    assert (
        start + delta == start or start + 2 * delta == start + delta
    )  # the premise: float64 spacing > delta
    with pytest.raises(ValueError, match=rf"v2pe positions merge: .* delta={delta!r}"):
        v2pe_positions([("text", 1), ("visual", 6), ("text", 1)], delta, start=start)
    fine = v2pe_positions([("text", 1), ("visual", 6), ("text", 1)], delta, start=1e6)
    assert fine.tolist() == [1e6 + k * delta for k in range(7)] + [float(np.ceil(1e6 + 6 * delta)) + 1]


def test_varlen_offsets_must_be_signed_or_uint8() -> None:
    spec = RopeSpec(head_dim=8)
    q = torch.randn(3, 1, 8)
    cu = torch.tensor([0, 3])
    for dtype in (torch.uint16, torch.uint32, torch.uint64, torch.bool, torch.float32):
        off = (
            torch.tensor([2**63 + 5], dtype=torch.uint64)
            if dtype == torch.uint64
            else torch.ones(1, dtype=dtype)
        )
        with pytest.raises(
            ValueError, match=r"offsets must be an integer tensor \(torch\.int8, .*torch\.uint8\)"
        ):
            apply_rope_varlen(q, None, cu, spec, offsets=off)
    want = apply_rope(q, None, torch.arange(3) + 7, spec, format="thd")[0]
    got = apply_rope_varlen(q, None, cu, spec, offsets=torch.tensor([7], dtype=torch.uint8))[0]
    assert torch.equal(got, want)


def test_unsigned_positions_name_the_accepted_dtypes() -> None:
    q = torch.randn(1, 2, 1, 8)
    with pytest.raises(
        ValueError, match=r"dtypes int8, int16, int32, int64, uint8, float32, float64, got torch\.uint32"
    ):
        apply_rope(q, None, torch.tensor([0, 1], dtype=torch.uint32), RopeSpec(head_dim=8))


def test_pad_position_and_grid_start_must_fit_int64() -> None:
    m = torch.tensor([[0, 1, 1]])
    with pytest.raises(ValueError, match=r"pad_position must fit int64 .* got 1180591620717411303424"):
        positions_from_mask(m, pad_position=2**70)
    assert positions_from_mask(m, pad_position=-(2**63)).tolist() == [[-(2**63), 0, 1]]
    with pytest.raises(ValueError, match=r"start \+ 1 \(the last cell\) must fit int64"):
        grid_positions((2, 2), start=2**63 - 1)
    assert grid_positions((2, 2), start=2**63 - 2).max().item() == 2**63 - 1
    assert grid_positions((2, 2), start=np.int64(1)).tolist() == [
        [1, 1, 2, 2],
        [1, 2, 1, 2],
    ]  # numpy ints are ints
    with pytest.raises(TypeError, match="start must be an int"):
        grid_positions((2, 2), start=1.0)  # type: ignore[arg-type]


def test_zero_d_tensor_offset_is_a_scalar_and_one_d_seq_len_is_not() -> None:
    assert positions_with_offset(2, torch.tensor(100)).tolist() == [100, 101]
    assert positions_with_offset(2, torch.tensor(100, dtype=torch.int32)).dtype == torch.int64
    with pytest.raises(ValueError, match=r"offset \+ seq_len - 1 must fit int64"):
        positions_with_offset(3, torch.tensor(2**63 - 2))
    with pytest.raises(TypeError, match="seq_len must be an int"):
        positions_with_offset(torch.tensor([2]), 3)  # type: ignore[arg-type]
    assert positions_with_offset(torch.tensor(2), 3).tolist() == [3, 4]


def test_meta_tensors_build_meta_positions_or_are_named() -> None:
    out = positions_from_cu_seqlens(torch.tensor([0, 1, 3], device="meta"), total=3)
    assert out.device.type == "meta" and out.shape == (3,)
    with pytest.raises(ValueError, match="cu_seqlens on the meta device needs total="):
        positions_from_cu_seqlens(torch.tensor([0, 1, 3], device="meta"))
    mask = positions_from_mask(torch.ones(2, 4, dtype=torch.int64, device="meta"))
    assert mask.device.type == "meta" and mask.shape == (2, 4)
    q = torch.randn(1, 2, 1, 8)
    before = q.clone()
    with pytest.raises(ValueError, match="positions are on the meta device .* q is on cpu"):
        apply_rope(q, None, torch.arange(2, device="meta"), RopeSpec(head_dim=8), inplace=True)
    assert torch.equal(q, before)
