"""RopeSpec: validation naming the field, frequencies against formulas, p-RoPE, custom tables, hashing."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
import torch

from ropekit import RopeSpec
from ropekit.scaling import Linear

INVALID = [
    ({"head_dim": 7}, "head_dim", "7"),
    ({"head_dim": 0}, "head_dim", "0"),
    ({"head_dim": -8}, "head_dim", "-8"),
    ({"head_dim": 8.0}, "head_dim", "8.0"),
    ({"head_dim": True}, "head_dim", "True"),
    ({"head_dim": 8, "rotary_dim": 3}, "rotary_dim", "3"),
    ({"head_dim": 8, "rotary_dim": 0}, "rotary_dim", "0"),
    ({"head_dim": 8, "rotary_dim": 10}, "rotary_dim", "10"),
    ({"head_dim": 8, "rotary_dim": -2}, "rotary_dim", "-2"),
    ({"head_dim": 8, "base": 1.0}, "base", "1.0"),
    ({"head_dim": 8, "base": 0.5}, "base", "0.5"),
    ({"head_dim": 8, "base": float("inf")}, "base", "inf"),
    ({"head_dim": 8, "base": float("nan")}, "base", "nan"),
    ({"head_dim": 8, "base": "1e4"}, "base", "'1e4'"),
    ({"head_dim": 8, "layout": "neox"}, "layout", "'neox'"),
    ({"head_dim": 8, "p": 0.0}, "p", "0.0"),
    ({"head_dim": 8, "p": 1.5}, "p", "1.5"),
    ({"head_dim": 8, "p": -0.25}, "p", "-0.25"),
    ({"head_dim": 8, "p": 0.2}, "p", "0.2"),  # floor(0.2 * 4) = 0 bands kept
    ({"head_dim": 8, "freqs": (1.0, 0.1)}, "freqs", "4 entries"),
    ({"head_dim": 4, "freqs": (1.0, -0.1)}, "freqs", "-0.1"),
    ({"head_dim": 4, "freqs": (1.0, float("nan"))}, "freqs", "nan"),
    (
        {"head_dim": 4, "freqs": "12"},
        "freqs",
        "'12'",
    ),  # a str is not a sequence of numbers (read as 1.0, 2.0)
    ({"head_dim": 4, "freqs": (1.0, 0.1), "base": 500.0}, "base", "500.0"),
    ({"head_dim": 8, "scaling": {"type": "linear"}}, "scaling", "'type'"),
]


@pytest.mark.parametrize("kwargs,field,value", INVALID)
def test_invalid_values_raise_naming_the_field(kwargs: dict, field: str, value: str) -> None:
    with pytest.raises(ValueError) as info:
        RopeSpec(**kwargs)
    msg = str(info.value)
    assert f"RopeSpec.{field}" in msg and value in msg, msg


def test_linear_factor_validation() -> None:
    for bad in (0.5, float("nan"), "2", True):
        with pytest.raises(ValueError, match="Linear.factor"):
            Linear(bad)  # type: ignore[arg-type]


def test_frozen_hashable_and_resolved() -> None:
    a = RopeSpec(128, base=5e5)
    b = RopeSpec(128, base=500_000, rotary_dim=128)
    assert a == b and hash(a) == hash(b) and a.rotary_dim == 128
    assert len({a, b, RopeSpec(128)}) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.base = 1e4  # type: ignore[misc]
    assert hash(RopeSpec(4, freqs=[1.0, 0.5])) == hash(RopeSpec(4, freqs=(1.0, 0.5)))


@pytest.mark.parametrize(
    "head_dim,rotary_dim,base",
    [(128, None, 10_000.0), (128, 64, 500_000.0), (96, 32, 1e6), (80, 80, 10_000.0)],
)
def test_inv_freq_follows_the_formula(head_dim: int, rotary_dim: int | None, base: float) -> None:
    spec = RopeSpec(head_dim, base=base, rotary_dim=rotary_dim)
    r = rotary_dim or head_dim
    expect = [base ** (-2 * i / r) for i in range(r // 2)]  # theta_i = B^(-2i/r), exponent over rotary_dim
    got64 = spec.inv_freq(dtype=torch.float64).tolist()
    assert all(math.isclose(g, e, rel_tol=4e-16) for g, e in zip(got64, expect))
    got32 = spec.inv_freq()
    assert got32.dtype == torch.float32
    assert torch.equal(got32, torch.tensor(expect, dtype=torch.float64).float())  # one rounding from float64


def test_inv_freq_refuses_low_precision_and_cannot_be_mutated() -> None:
    spec = RopeSpec(8)
    with pytest.raises(ValueError, match="bfloat16"):
        spec.inv_freq(dtype=torch.bfloat16)
    t = spec.inv_freq(dtype=torch.float64)
    t.zero_()
    assert spec.inv_freq(dtype=torch.float64)[0] == 1.0


def test_p_rope_keeps_highest_fraction() -> None:
    """Barbero et al.: n_rot = floor(p * n) highest frequencies rotate, the rest get frequency 0."""
    full = RopeSpec(16, base=10_000.0).inv_freq(dtype=torch.float64)
    spec = RopeSpec(16, base=10_000.0, p=0.75)
    got = spec.inv_freq(dtype=torch.float64)
    assert spec.n_positional_bands == 6
    assert torch.equal(got[:6], full[:6]) and torch.equal(got[6:], torch.zeros(2, dtype=torch.float64))
    assert RopeSpec(200, p=0.29).n_positional_bands == 29  # 0.29 * 100 = 28.999999999999996 in floating point


def test_p_rope_on_custom_table_zeroes_the_lowest_by_value() -> None:
    spec = RopeSpec(8, freqs=(0.5, 2.0, 0.1, 1.0), p=0.5)
    assert spec.inv_freq(dtype=torch.float64).tolist() == [0.0, 2.0, 0.0, 1.0]


def test_custom_frequencies_and_scaling() -> None:
    spec = RopeSpec(4, freqs=(0.3, 0.02), scaling=Linear(4))
    assert spec.inv_freq(dtype=torch.float64).tolist() == [0.3 / 4, 0.02 / 4]
    assert spec.attention_factor == 1.0 and not spec.dynamic


def test_pairs_per_layout() -> None:
    assert RopeSpec(8, rotary_dim=6).pairs() == ([0, 1, 2], [3, 4, 5])
    assert RopeSpec(8, rotary_dim=6, layout="interleaved").pairs() == ([0, 2, 4], [1, 3, 5])


def test_frequencies_built_under_meta_device_context_stay_real() -> None:
    with torch.device("meta"):
        t = RopeSpec(64, base=123_456.0).inv_freq()
    assert t.device.type == "cpu" and torch.isfinite(t).all()


def _theta(base: float, rotary_dim: int) -> list[float]:
    """Oracle: theta_i = base^(-2i / rotary_dim) in Python float64 arithmetic (the seed's formula)."""
    return [base ** (-2.0 * i / rotary_dim) for i in range(rotary_dim // 2)]


@pytest.mark.parametrize(
    ("kw", "field", "shown"),
    [
        ({"base": 10**400}, "base", "10000000...0000 (401 digits)"),
        ({"base": -(10**400)}, "base", "-10000000...0000 (401 digits)"),
        ({"p": 10**400}, "p", "10000000...0000 (401 digits)"),
        ({"freqs": (1.0, 10**400, 0.01, 0.001)}, "freqs", "10000000...0000 (401 digits) at index 1"),
    ],
)
def test_huge_ints_are_refused_naming_the_field_and_range(
    kw: dict[str, object], field: str, shown: str
) -> None:
    """A 400-digit int is beyond float64 (the oracle: float() overflows on it); it used to escape as a bare
    OverflowError from math.isfinite, a 400-digit message at best. Now a ValueError names the field, the accepted
    range and the value, shortened."""
    with pytest.raises(OverflowError):
        float(10**400)
    with pytest.raises(
        ValueError, match=rf"^RopeSpec\.{field} .*beyond the float64 range.*{re.escape(shown)}"
    ) as e:
        RopeSpec(8, **kw)  # type: ignore[arg-type]
    assert len(str(e.value)) < 250


def test_huge_head_dim_is_refused_naming_the_bound() -> None:
    with pytest.raises(
        ValueError,
        match=r"^RopeSpec\.head_dim must be a positive even integer \(at most 2\*\*31 - 2\), got 10000000\.\.\.0000 \(401 digits\)$",
    ):
        RopeSpec(10**400)
    assert RopeSpec(2**20).n_bands == 2**19  # a large but real head: accepted


@pytest.mark.parametrize(
    ("freqs", "what"),
    [
        ({0.001, 1.0, 0.1, 0.01}, "a set"),  # used to become the hash order (0.1, 1.0, 0.01, 0.001)
        (frozenset({0.001, 1.0, 0.1, 0.01}), "a set"),
        ({1.0: "a", 0.1: "b", 0.01: "c", 0.001: "d"}, "a mapping"),  # used to become its keys
        ("1234", "a str"),
        (iter([1.0, 0.1, 0.01, 0.001]), "a list_iterator"),
    ],
)
def test_freqs_refuses_unordered_containers_and_mappings(freqs: object, what: str) -> None:
    with pytest.raises(ValueError, match=rf"^RopeSpec\.freqs must be an ordered sequence .*got {what}"):
        RopeSpec(8, freqs=freqs)  # type: ignore[arg-type]


@pytest.mark.parametrize("flag", [True, False, np.bool_(True)])
def test_freqs_refuses_bool_entries(flag: object) -> None:
    """True used to be read as the frequency 1.0 (LongRope refuses bools in its factor lists)."""
    with pytest.raises(
        ValueError,
        match=r"^RopeSpec\.freqs entries must be finite real numbers >= 0 \(not bools\), got a bool at index 0",
    ):
        RopeSpec(8, freqs=(flag, 0.1, 0.01, 0.001))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "table",
    [
        [1.0, 0.1, 0.01, 0.001],
        (1, 0.1, 0.01, 0.001),
        np.array([1.0, 0.1, 0.01, 0.001]),
        torch.tensor([1.0, 0.1, 0.01, 0.001], dtype=torch.float64),
        [np.float64(1.0), np.float32(0.5), np.int64(0), torch.tensor(0.25, dtype=torch.float64)],
    ],
    ids=["list", "tuple-with-int", "numpy", "tensor", "numpy-and-0d-scalars"],
)
def test_freqs_accepts_ordered_sequences_of_reals_in_order(table: object) -> None:
    """Oracle: the entries in the order given, as Python floats (the float64 values of each entry)."""
    want = tuple(
        float(v)
        for v in (table.tolist() if hasattr(table, "tolist") and not isinstance(table, list) else table)
    )  # type: ignore[union-attr]
    spec = RopeSpec(8, freqs=table)  # type: ignore[arg-type]
    assert spec.freqs == want and all(type(v) is float for v in spec.freqs)
    assert spec.frequencies().tolist() == list(want)
    assert spec == RopeSpec(8, freqs=want) and hash(spec) == hash(RopeSpec(8, freqs=want))


def test_numpy_scalars_make_the_same_spec_as_python_numbers() -> None:
    """One rule across ropekit (ropekit.integers): numpy ints are ints, numpy floats are reals. The fields hold Python
    numbers, so the spec equals (and hashes as) the one built from Python numbers, and its frequencies are the
    formula's (oracle: Python float64 arithmetic)."""
    got = RopeSpec(np.int64(128), base=np.float32(10_000.0), rotary_dim=np.int32(64))  # type: ignore[arg-type]
    want = RopeSpec(128, base=10_000.0, rotary_dim=64)
    assert got == want and hash(got) == hash(want) and repr(got) == repr(want)
    assert [type(getattr(got, f)) for f in ("head_dim", "base", "rotary_dim", "p")] == [
        int,
        float,
        int,
        float,
    ]
    assert got.frequencies().tolist() == _theta(10_000.0, 64)
    assert got.to_hf() == want.to_hf()
    p_rope = RopeSpec(np.int64(64), p=np.float32(0.5))  # type: ignore[arg-type]
    assert p_rope == RopeSpec(64, p=0.5) and type(p_rope.p) is float
    assert (
        p_rope.frequencies().tolist() == _theta(10_000.0, 64)[:16] + [0.0] * 16
    )  # the 16 highest of 32 kept


@pytest.mark.parametrize("dynamic", [None, True])
def test_check_seq_len_keeps_a_traced_length_symbolic(dynamic: bool | None) -> None:
    """``check_seq_len(x.shape[0])`` under torch.compile: dynamo reports a SymInt's type as int, so the SymInt
    test missed it and ``operator.index`` pinned the length to its value (a graph per length, then the recompile
    limit). Now compared, never converted: one graph (two without dynamic=True: the first one static)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    from ropekit.spec import check_seq_len

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("eager")
    f = torch.compile(
        lambda x: x * check_seq_len(x.shape[0]), fullgraph=True, dynamic=dynamic, backend=counter
    )
    for n in range(3, 11):
        assert torch.equal(f(torch.ones(n)), torch.full((n,), float(n)))
    assert counter.frame_count == (1 if dynamic else 2)


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (0, ValueError, "got 0"),
        (-3, ValueError, "got -3"),
        (2**63 + 1, ValueError, r"in \[1, 2\*\*63\]"),
        (True, TypeError, "got True"),
        (2.0, TypeError, "got 2.0"),
    ],
)
def test_check_seq_len_still_refuses_bad_lengths(value: object, error: type, match: str) -> None:
    from ropekit.spec import check_seq_len

    with pytest.raises(error, match=f"seq_len must be an int.*{match}"):
        check_seq_len(value)
    assert check_seq_len(2**63) == 2**63 and check_seq_len(np.int64(7)) == 7 and check_seq_len(None) is None
    assert type(check_seq_len(np.int64(7))) is int and type(check_seq_len(torch.tensor(5))) is int
