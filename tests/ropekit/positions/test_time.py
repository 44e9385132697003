"""Continuous positions: float64 re-referencing, exact int64 re-referencing (Python-int oracle), V2PE steps, and
exact phases for large real-valued times (mpmath oracle)."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import torch

from ropekit import RopeSpec, rope_tables
from ropekit.axes import AxisMap
from ropekit.axis_tables import axis_tables
from ropekit.positions.time import time_positions, v2pe_positions


def test_time_positions_rereference_in_float64() -> None:
    t = torch.tensor([1.7e9 + 0.25, 1.7e9 + 1.75, 1.7e9 + 3.0], dtype=torch.float64)
    assert time_positions(t, reference=1.7e9, scale=0.5).tolist() == [0.5, 3.5, 6.0]
    assert time_positions([10.0, 12.5]).tolist() == [0.0, 2.5]  # default reference: first timestamp
    with pytest.raises(ValueError, match="float32 with magnitude"):
        time_positions(torch.tensor([1.7e9], dtype=torch.float32))
    with pytest.raises(ValueError, match="scale must be"):
        time_positions([1.0], scale=0.0)
    with pytest.raises(ValueError, match="must be finite"):
        time_positions([1.0, float("nan")])


#: int64 Unix nanoseconds ~1.7e18, past float64's 2^53: a float64 cast first rounds them to multiples of 256
NS = [
    1_700_000_000_000_000_000,
    1_700_000_000_123_456_789,
    1_700_000_003_999_999_999,
    1_699_999_999_000_000_001,
]
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


@pytest.mark.parametrize("reference", [None, NS[0], NS[3], 1_699_999_990_000_000_000, 0])
@pytest.mark.parametrize("as_list", [False, True])
def test_integer_timestamps_rereference_exactly(reference: int | None, as_list: bool) -> None:
    ref = NS[0] if reference is None else reference
    t = NS if as_list else torch.tensor(NS)
    got = time_positions(t, reference=reference)
    assert got.dtype == torch.float64
    assert got.tolist() == [float(x - ref) for x in NS]  # Python ints: exact difference, one rounding
    if reference != 0:  # differences below 2^53: every nanosecond kept
        assert [int(v) for v in got.tolist()] == [x - ref for x in NS]
    # (exact difference -> float64) / scale, correctly rounded: the exact quotient of Fractions, rounded once
    for scale in (1e9, 3.0, 1e-3):
        want = [float(Fraction(float(x - ref)) / Fraction(scale)) for x in NS]
        assert time_positions(t, reference=reference, scale=scale).tolist() == want


def test_integer_timestamps_other_dtypes_and_float_reference() -> None:
    ints = (torch.int8, torch.int16, torch.int32, torch.uint8, torch.uint16, torch.uint32, torch.uint64)
    for dtype in ints:
        assert time_positions(torch.tensor([7, 3, 100], dtype=dtype)).tolist() == [0.0, -4.0, 93.0]
    # a float reference: its integer part subtracted exactly in int64, its fraction after the conversion
    assert time_positions(torch.tensor([10, 7]), reference=2.5).tolist() == [7.5, 4.5]
    assert time_positions(torch.tensor([10, 7]), reference=-2.25, scale=0.5).tolist() == [24.5, 18.5]
    big = [2**62 + 1, 2**62 + 3, 2**62 - 7]  # float64 holds none of them; 2^62 itself is a float
    assert time_positions(torch.tensor(big), reference=float(2**62)).tolist() == [1.0, 3.0, -7.0]
    assert time_positions(torch.tensor(NS), reference=1.7e18).tolist() == [float(x - NS[0]) for x in NS]
    assert time_positions(torch.zeros(0, dtype=torch.int64)).tolist() == []


def test_integer_difference_outside_int64_is_refused_not_wrapped() -> None:
    # the extremes of the range: exactly representable differences pass ...
    assert time_positions(torch.tensor([I64_MAX, 0]), reference=0).tolist() == [float(I64_MAX), 0.0]
    assert time_positions(torch.tensor([I64_MIN]), reference=0).tolist() == [float(I64_MIN)]
    assert time_positions(torch.tensor([-1]), reference=I64_MAX).tolist() == [float(I64_MIN)]
    # ... one more and int64 would wrap around: refused, naming timestamps and reference
    cases = [
        (
            torch.tensor([I64_MIN, I64_MAX]),
            None,
            r"reference=None \(each row's first timestamp: \[-9223372036854775808\]\)",
        ),
        (torch.tensor([I64_MAX, I64_MIN]), None, r"difference spans \[-18446744073709551615, 0\]"),
        (torch.tensor([I64_MAX]), -1, r"reference=-1, so the difference spans \[9223372036854775808, "),
        (torch.tensor([I64_MIN]), 1, r"reference=1, so the difference spans \[-9223372036854775809, "),
        (torch.tensor([-2]), I64_MAX, r"difference spans \[-9223372036854775809, "),
        (torch.tensor([5]), 2**64, r"reference=18446744073709551616"),
        (torch.tensor([I64_MAX]), -0.5, r"reference=-0.5 \(integer part -1\)"),
        (torch.tensor([0]), 1e30, r"reference=1e\+30 \(integer part 1000000000000000019884624838656\)"),
    ]
    for t, ref, msg in cases:
        with pytest.raises(ValueError, match=r"timestamps - reference overflows int64: .*" + msg):
            time_positions(t, reference=ref)
    with pytest.raises(ValueError, match="uint64 with values >= 2\\^63"):
        time_positions(torch.tensor([2**63 + 5, 3], dtype=torch.uint64))
    with pytest.raises(ValueError, match="timestamps must be a tensor or a sequence of numbers"):
        time_positions([1, 2**64])
    with pytest.raises(ValueError, match="timestamps must be float64, float32 or integer, got torch.bool"):
        time_positions([True, False])


def test_float_timestamps_keep_float64_subtraction() -> None:
    t = torch.tensor([float(x) for x in NS], dtype=torch.float64)  # already rounded to float64 by the caller
    want = [float(x) - float(NS[0]) for x in NS]  # Python float64 arithmetic
    assert time_positions(t).tolist() == want
    assert time_positions([float(x) for x in NS]).tolist() == want  # a list with floats is read as float64
    assert time_positions([1, 2.5]).tolist() == [0.0, 1.5]
    with pytest.raises(ValueError, match="reference must be a finite number or None, got inf"):
        time_positions(torch.tensor([1, 2]), reference=math.inf)
    with pytest.raises(ValueError, match="reference must fit float64 for float timestamps"):
        time_positions([1.0], reference=10**400)


def test_v2pe_steps() -> None:
    # V2PE's own example shape: the visual tokens step by delta from the token before them (not from it + 1)
    assert v2pe_positions([("text", 2), ("visual", 4), ("text", 1)], 0.25).tolist() == [
        0,
        1,
        1.25,
        1.5,
        1.75,
        2,
        3,
    ]
    plain = v2pe_positions([("text", 3), ("visual", 5), ("text", 2)], 1.0)
    assert plain.tolist() == list(range(10))  # delta 1 is plain 1-D RoPE
    with pytest.raises(ValueError, match=r"delta must be a number in \(0, 1\]"):
        v2pe_positions([("text", 1)], 2.0)


def test_v2pe_start_and_delta_are_validated() -> None:
    segs = [("text", 2), ("visual", 3), ("text", 1)]
    # oracle: V2PE's get_rope_pos_id (v2pe_fix) in exact fractions: token k = 1..n of a visual run at
    # last + k * delta (last: the previous token's position), the next token at ceil(last + n * delta) + 1
    for start, delta in ((0.5, 0.25), (3, 0.5), (-7.75, 1.0), (2**40, 1 / 3)):
        cur, want = Fraction(start), []
        for kind, n in segs:
            if kind == "text":
                want += [cur + i for i in range(n)]
                cur += n
            else:
                last = cur - 1
                want += [last + k * Fraction(delta) for k in range(1, n + 1)]
                cur = Fraction(math.ceil(last + n * Fraction(delta))) + 1
        got = v2pe_positions(segs, delta, start=start)
        assert all(abs(Fraction(g) - w) <= abs(w) * 2**-52 for g, w in zip(got.tolist(), want)), (start, got)
    for bad, err, msg in (
        (math.nan, ValueError, "start must be a finite real number, got nan"),
        (math.inf, ValueError, "start must be a finite real number, got inf"),
        ("x", TypeError, "start must be a finite real number, got 'x' \\(str\\)"),
        (True, TypeError, "start must be a finite real number, got True \\(bool\\)"),
        (2**53, ValueError, "start must be below 2\\^53 in magnitude .*got 9007199254740992"),
        (-1e300, ValueError, "start must be below 2\\^53 in magnitude"),
    ):
        with pytest.raises(err, match=msg):
            v2pe_positions(segs, 0.5, start=bad)  # type: ignore[arg-type]
    assert v2pe_positions([("text", 2)], 0.5, start=2**53 - 2).tolist() == [2**53 - 2, 2**53 - 1]
    with pytest.raises(ValueError, match="v2pe positions reach 9007199254740992 >= 2\\^53"):
        v2pe_positions([("text", 2)], 0.5, start=2**53 - 1)  # the second token would merge with the first
    for bad_delta in (math.nan, math.inf, 0.0, -0.5, "0.5", True):
        with pytest.raises(ValueError, match=r"delta must be a number in \(0, 1\]"):
            v2pe_positions(segs, bad_delta)  # type: ignore[arg-type]


@pytest.mark.parametrize("p", [0.5, 123.456789, 1e6 + 0.375, 9.999e6 + 0.1])
def test_real_valued_phases_exact_against_mpmath(p: float) -> None:
    spec = RopeSpec(head_dim=32, base=10_000.0, axes=AxisMap.contiguous((6, 5, 5)))
    pos = torch.tensor([[p], [p / 3], [-p]], dtype=torch.float64)
    cos, sin = axis_tables(pos, spec, dtype=torch.float64)
    mpmath.mp.dps = 50
    for j, a in enumerate(spec.axes.slots):  # type: ignore[union-attr]
        theta = mpmath.mpf(10_000) ** (-mpmath.mpf(2 * j) / 32)
        ang = mpmath.mpf(float(pos[a, 0])) * theta
        assert abs(float(cos[0, j]) - float(mpmath.cos(ang))) < 1e-8
        assert abs(float(sin[0, j]) - float(mpmath.sin(ang))) < 1e-8
    # and the 1-D float path agrees bit for bit with the axis-0 bands
    c1, _ = rope_tables(pos[0], dataclasses.replace(spec, axes=None), dtype=torch.float64)
    t_bands = list(spec.axes.bands_of("t"))  # type: ignore[union-attr]
    assert torch.equal(cos[0, t_bands], c1[0, t_bands])


@pytest.mark.parametrize("num", [np.float32, np.float64, np.int64])
def test_numpy_numbers_are_numbers(num: type) -> None:
    """reference, scale, delta and start taken from numpy arrays (np.float32 is not a Python float) give the same
    positions as the Python numbers of the same value; bools stay refused."""
    ts = torch.tensor([10, 20, 35])
    want = time_positions(ts, reference=float(num(5)), scale=float(num(2)))
    assert torch.equal(time_positions(ts, reference=num(5), scale=num(2)), want)
    segs = [("text", 2), ("visual", 2)]
    delta = 0.25 if num is np.int64 else num(0.25)
    assert (
        v2pe_positions(segs, delta, start=num(3)).tolist()
        == v2pe_positions(segs, float(delta), start=3.0).tolist()
    )
    with pytest.raises(ValueError, match="scale"):
        time_positions(ts, scale=np.bool_(True))


def test_v2pe_matches_its_reference_code_on_image_sequences() -> None:
    """V2PE's get_rope_pos_id (v2pe_fix), restated with torch.linspace as it is written there (float64 here): text up
    to and including <img>, then the image tokens linspace(last, last + n * delta, n + 1)[1:], </img> and the text
    after at ceil(last image position) + 1 onwards; several images, strides 1 .. 64 over 256 tokens per image."""
    for stride in (1, 4, 16, 64):
        delta = stride / 256
        runs = [("text", 5), ("visual", 256), ("text", 7), ("visual", 512), ("text", 3)]
        want: list[float] = []
        last = -1.0
        for kind, n in runs:
            if kind == "text":
                want += [last + 1 + i for i in range(n)]
                last = want[-1]
            else:
                img = torch.linspace(last, last + delta * n, n + 1, dtype=torch.float64)[1:]
                want += img.tolist()
                last = float(math.ceil(img[-1].item()))
        got = v2pe_positions(runs, delta).tolist()
        assert got == pytest.approx(want, abs=1e-12), stride
