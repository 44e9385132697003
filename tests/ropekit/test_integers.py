"""Integer arguments: numpy integers are lengths like Python ints (``ropekit.integers.whole``), through the public
functions a user passes them to; bools, floats and strings stay refused, naming the argument."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from ropekit import RopeSpec, Rotary
from ropekit.analysis import phase_error, rotations, spectrum
from ropekit.integers import whole
from ropekit.positions.grid import with_prefix
from ropekit.positions.time import v2pe_positions
from ropekit.scaling import DynamicNTK, Llama3, Yarn

SPEC = RopeSpec(64, base=10_000.0)


@pytest.mark.parametrize("value", [7, np.int64(7), np.int32(7), np.uint8(7), torch.tensor(7)])
def test_whole_takes_integers(value: object) -> None:
    n = whole(value, 1, "x must be a positive int")
    assert n == 7 and type(n) is int


@pytest.mark.parametrize("value", [True, np.bool_(True), 7.0, np.float64(7.0), "7", None, 0, np.int64(-1)])
def test_whole_refuses_everything_else(value: object) -> None:
    with pytest.raises(ValueError, match="x must be a positive int"):
        whole(value, 1, "x must be a positive int")


CALLS: dict[str, Callable[[Any], Any]] = {
    "rotations(context)": lambda n: rotations(SPEC, n),
    "spectrum(context)": lambda n: spectrum(SPEC, n),
    "phase_error(position, window)": lambda n: phase_error(SPEC, n * 100, window=n),
    "Rotary(max_seq_len)": lambda n: Rotary(SPEC, max_seq_len=n)(
        torch.ones(1, 3, 2, 64), torch.ones(1, 3, 2, 64), positions=torch.arange(3)
    ),
    "with_prefix(n_prefix)": lambda n: with_prefix(torch.zeros(2, 4), n),
    "v2pe_positions(segment length)": lambda n: v2pe_positions([("text", n), ("visual", n)], 0.5),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_numpy_integers_act_as_ints(name: str) -> None:
    want, got = _flat(CALLS[name](40)), _flat(CALLS[name](np.int64(40)))
    assert len(want) == len(got) > 0
    for w, g in zip(want, got, strict=True):
        assert type(w) is type(g)
        assert torch.equal(w, g) if isinstance(w, torch.Tensor) else w == g or _both_nan(w, g)


def _both_nan(a: object, b: object) -> bool:
    return isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)


def _flat(x: object) -> list[object]:
    """The leaves of a result: tensors, numbers, strings; dataclasses and tuples/lists opened."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return [v for f in dataclasses.fields(x) for v in _flat(getattr(x, f.name))]
    if isinstance(x, (tuple, list)):
        return [v for item in x for v in _flat(item)]
    return [x]


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("bad", [True, 40.0])
def test_bools_and_floats_are_still_refused(name: str, bad: object) -> None:
    with pytest.raises(ValueError, match=repr(bad)):
        CALLS[name](bad)


@pytest.mark.parametrize(
    "build",
    [
        lambda n: DynamicNTK(2.0, max_position_embeddings=n),
        lambda n: Yarn(2.0, original_max_position_embeddings=n),
        lambda n: Llama3(8.0, 1.0, 4.0, original_max_position_embeddings=n),
    ],
    ids=["DynamicNTK", "Yarn", "Llama3"],
)
def test_scaling_lengths_take_numpy_integers(build: Callable[[Any], Any]) -> None:
    """A length read from a numpy config array: the scheme equals the one built from the Python int (the field is
    stored as an int, so equality and hashing agree); a bool stays refused."""
    got = build(np.int64(4096))
    assert got == build(4096) and hash(got) == hash(build(4096))
    with pytest.raises(ValueError, match="must be a positive int, got True"):
        build(True)
