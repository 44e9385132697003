"""time_positions on batches: each row re-referenced to its own first (valid) timestamp, padding masked out, a
rounding past 2^53 warned about, NumPy datetime64 read as nanoseconds.

Trial finding (T1): with the default reference, the first element of the whole [b, s] tensor was subtracted from
every row, so int64-nanosecond rows 200 days apart lost their nanoseconds ([0, 2, 2] for 1-ns steps), and a left
pad of 0 collapsed every row (1-ns gaps became 0.0), silently. Oracle: exact Python-int arithmetic.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from ropekit.positions.time import time_positions

DAY = 86_400 * 10**9
BASE = 1_700_000_000_000_000_000  # ns since the epoch, ~2023-11


def _rows() -> list[list[int]]:
    return [[BASE + i for i in (0, 1, 2, 5)], [BASE + 200 * DAY + i for i in (0, 1, 3, 4)]]


def test_each_row_starts_at_zero_with_every_nanosecond() -> None:
    rows = _rows()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # exact: no rounding to warn about
        got = time_positions(torch.tensor(rows)).tolist()
    assert got == [[float(x - r[0]) for x in r] for r in rows]
    assert got[1] == [0.0, 1.0, 3.0, 4.0]  # was [0, 2, 2, ...] off the first row's reference


def test_left_padding_is_masked_out_of_the_reference_and_the_result() -> None:
    rows = _rows()
    padded = torch.tensor([[0, 0, *rows[0][:2]], rows[1]])  # row 0: two pads, then two events 1 ns apart
    mask = padded != 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = time_positions(padded, mask=mask).tolist()
    assert got == [[0.0, 0.0, 0.0, 1.0], [float(x - rows[1][0]) for x in rows[1]]]
    with pytest.warns(UserWarning, match=r"reaches 1700000000000000001 > 2\^53 .* \(a mask= skips padding\)"):
        unmasked = time_positions(padded).tolist()  # the pad is row 0's reference: rounded, but not silently
    assert unmasked[0][2] == unmasked[0][3]  # the 1-ns step is lost in float64 there


def test_float_padding_may_hold_nan_under_a_mask() -> None:
    t = torch.tensor([[float("nan"), 100.25, 101.0], [7.0, 9.5, 10.0]], dtype=torch.float64)
    assert time_positions(t, mask=~t.isnan(), scale=0.25).tolist() == [[0.0, 0.0, 3.0], [0.0, 10.0, 12.0]]
    with pytest.raises(ValueError, match="timestamps must be finite"):
        time_positions(t)


def test_an_explicit_reference_is_shared_by_every_row() -> None:
    t = torch.tensor([[10, 12], [20, 25]])
    assert time_positions(t, reference=10).tolist() == [[0.0, 2.0], [10.0, 15.0]]
    mask = torch.tensor([[True, False], [True, True]])
    assert time_positions(t, reference=10, mask=mask).tolist() == [[0.0, 0.0], [10.0, 15.0]]


def test_datetime64_and_timedelta64_are_read_as_nanoseconds() -> None:
    dt = np.array(
        ["2024-01-01T00:00:00", "2024-01-01T00:00:01.5", "2024-01-01T01:00:00"], dtype="datetime64[ms]"
    )
    assert time_positions(dt, scale=1e9).tolist() == [0.0, 1.5, 3600.0]
    td = np.array([0, 250, 1000], dtype="timedelta64[us]")
    assert time_positions(td).tolist() == [0.0, 250_000.0, 1_000_000.0]
    with pytest.raises(ValueError, match="NaT"):
        time_positions(np.array(["2024-01-01", "NaT"], dtype="datetime64[s]"))


@pytest.mark.parametrize(
    "mask",
    [torch.ones(2, 3), torch.ones(3, 2, dtype=torch.bool), [[True] * 3] * 2],
    ids=["float", "shape", "list"],
)
def test_a_bad_mask_is_refused_naming_it(mask: object) -> None:
    with pytest.raises(ValueError, match=r"mask must be a bool tensor of the timestamps' shape \(2, 3\)"):
        time_positions(torch.arange(6).reshape(2, 3), mask=mask)  # type: ignore[arg-type]


def test_masked_rows_compile_to_the_eager_values() -> None:
    rows = _rows()
    padded = torch.tensor([[0, 0, *rows[0][:2]], rows[1]])
    mask = padded != 0
    f = torch.compile(lambda t, m: time_positions(t, mask=m, scale=2.0), fullgraph=True, backend="aot_eager")
    assert f(padded, mask).tolist() == time_positions(padded, mask=mask, scale=2.0).tolist()
