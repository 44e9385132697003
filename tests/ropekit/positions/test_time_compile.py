"""time_positions traced by torch.compile(fullgraph=True): the eager values (Python float / int oracles), and the
value checks still refuse bad timestamps, as device asserts (RuntimeError), with no graph break."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

from ropekit.positions.time import time_positions

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
F32_RULE = "timestamps are float32 with magnitude >= 2\\^24"
NS = [1_700_000_000_000_000_000, 1_700_000_000_123_456_789, 1_699_999_999_000_000_001]


def _compiled(**kw: object):  # type: ignore[no-untyped-def]
    torch._dynamo.reset()  # each case its own graph (the lambdas share one code object)
    return torch.compile(lambda t: time_positions(t, **kw), fullgraph=True, backend="aot_eager")  # type: ignore[arg-type]


@pytest.mark.parametrize("kw", [{}, {"scale": 0.5}, {"reference": 2.5, "scale": 3.0}, {"reference": -7}])
def test_float_timestamps_compiled_equal_eager_and_the_formula(kw: dict[str, float]) -> None:
    f = _compiled(**kw)
    for dtype in (torch.float64, torch.float32):
        t = torch.tensor([10.0, 12.5, 3.25, -1e6 + 0.75], dtype=dtype)
        got = f(t)
        ref = float(t[0]) if "reference" not in kw else float(kw["reference"])
        scale = float(kw.get("scale", 1.0))
        want = [(float(x) - ref) / scale for x in t.tolist()]  # Python float64 arithmetic
        assert got.dtype == torch.float64 and got.tolist() == want
        assert torch.equal(got, time_positions(t, **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize("kw", [{}, {"scale": 1e9}, {"reference": NS[2]}, {"reference": 1.7e18 + 0.0}])
def test_integer_timestamps_compiled_keep_every_nanosecond(kw: dict[str, float]) -> None:
    f = _compiled(**kw)
    t = torch.tensor(NS)
    ref = NS[0] if "reference" not in kw else int(kw["reference"])
    scale = kw.get("scale", 1.0)
    # the exact difference (Python ints), rounded once to float64, then the correctly rounded quotient
    want = [float(Fraction(float(x - ref)) / Fraction(scale)) for x in NS]
    got = f(t)
    assert got.tolist() == want
    assert torch.equal(got, time_positions(t, **kw))  # type: ignore[arg-type]
    u = torch.tensor([7, 3, 100], dtype=torch.uint64)
    assert f(u).tolist() == time_positions(u, **kw).tolist()  # type: ignore[arg-type]


def test_compiled_extremes_of_int64_pass() -> None:
    f, g = _compiled(reference=0), _compiled(reference=I64_MAX)
    assert f(torch.tensor([I64_MAX, 0, I64_MIN])).tolist() == [float(I64_MAX), 0.0, float(I64_MIN)]
    assert g(torch.tensor([-1])).tolist() == [float(I64_MIN)]


@pytest.mark.parametrize(
    ("kw", "bad", "rule"),
    [
        ({}, torch.tensor([1.0, 2.0**24], dtype=torch.float32), F32_RULE),
        ({}, torch.tensor([-(2.0**30)], dtype=torch.float32), F32_RULE),
        ({}, torch.tensor([1.0, float("nan")], dtype=torch.float64), "timestamps must be finite"),
        ({}, torch.tensor([1.0, float("inf")], dtype=torch.float64), "timestamps must be finite"),
        ({}, torch.tensor([1.0, float("nan")], dtype=torch.float32), "timestamps must be finite"),
        ({}, torch.tensor([I64_MIN, I64_MAX]), "timestamps - reference overflows int64"),
        ({}, torch.tensor([I64_MAX, I64_MIN]), "timestamps - reference overflows int64"),
        ({"reference": -1}, torch.tensor([I64_MAX]), "timestamps - reference overflows int64"),
        ({"reference": 1}, torch.tensor([I64_MIN]), "timestamps - reference overflows int64"),
        ({"reference": I64_MAX}, torch.tensor([-2]), "timestamps - reference overflows int64"),
        ({"reference": -0.5}, torch.tensor([I64_MAX]), "timestamps - reference overflows int64"),
        ({}, torch.tensor([2**63 + 5, 3], dtype=torch.uint64), "uint64 with values >= 2\\^63"),
        ({"scale": 1e-300}, torch.tensor([0.0, 1e300], dtype=torch.float64), "scale is too small"),
    ],
)
def test_compiled_checks_still_refuse(kw: dict[str, float], bad: torch.Tensor, rule: str) -> None:
    """The eager call refuses these with a ValueError; the traced one with a device assert stating the rule."""
    with pytest.raises(ValueError):
        time_positions(bad, **kw)  # type: ignore[arg-type]
    f = _compiled(**kw)
    with pytest.raises(RuntimeError, match=rule + ".*checked on the device"):
        f(bad)
    ok = torch.tensor([3, 1], dtype=torch.int64) if not bad.is_floating_point() else torch.tensor([3.0, 1.0])
    assert f(ok.to(bad.dtype)).tolist() == time_positions(ok.to(bad.dtype), **kw).tolist()  # type: ignore[arg-type]


def test_compiled_with_dynamic_shapes_and_scale() -> None:
    """dynamic=True: scale and reference become symbolic floats; the argument checks still trace."""
    torch._dynamo.reset()
    f = torch.compile(
        lambda t, s, r: time_positions(t, scale=s, reference=r),
        fullgraph=True,
        backend="aot_eager",
        dynamic=True,
    )
    for n in (3, 5):
        t = torch.arange(n, dtype=torch.float64) * 1.5 + 4.0
        for s, r in ((0.5, None), (3.0, 2.5)):
            want = [(x - (4.0 if r is None else r)) / s for x in t.tolist()]
            assert f(t, s, r).tolist() == want
    ints = torch.arange(4) * 7 + 2**62  # past 2^53: the int64 difference first, then one rounding
    for s, r in ((0.5, None), (3.0, 2**62 + 3), (1.5, float(2**62) + 1024.0)):
        ref = Fraction(2**62) if r is None else Fraction(r)
        # small differences, exact in float64: the oracle is the correctly rounded quotient
        want = [float((Fraction(x) - ref) / Fraction(s)) for x in ints.tolist()]
        assert f(ints, s, r).tolist() == want
