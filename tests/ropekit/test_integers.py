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
from ropekit.cache import rerotate_keys
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


def _dynamic_theta(base: float, d: int, factor: float, max_len: int, length: int) -> list[float]:
    """Oracle: dynamic NTK frequencies written from the formula (Python float64): b' = b * (s l / L - (s - 1))^(d /
    (d - 2)) with l = max(length, L), theta_i = b'^(-2i / d)."""
    ln = max(length, max_len)
    b = base * (factor * ln / max_len - (factor - 1)) ** (d / (d - 2))
    return [b ** (-2.0 * i / d) for i in range(d // 2)]


def test_keys_stale_and_rerotate_take_numpy_lengths() -> None:
    """keys_stale / rerotate_keys refused np.int64 lengths with a TypeError (the trial) while rope_tables took them.
    The re-rotated keys equal a fresh rotation at the frequencies of the new length (oracle: the dynamic NTK
    formula, rotation in Python float64)."""
    spec = RopeSpec(8, scaling=DynamicNTK(2.0, 4))
    assert spec.keys_stale(np.int64(6), np.int32(9)) is spec.keys_stale(6, 9) is True
    assert not spec.keys_stale(np.int64(2), np.uint8(3))
    raw = torch.randn(1, 5, 1, 8, dtype=torch.float64)
    pos = torch.arange(5)

    def rotate(thetas: list[float]) -> torch.Tensor:
        out = raw.clone()
        for s in range(5):
            for i, th in enumerate(thetas):
                c, sn = math.cos(s * th), math.sin(s * th)
                x, y = raw[0, s, 0, i].item(), raw[0, s, 0, i + 4].item()
                out[0, s, 0, i], out[0, s, 0, i + 4] = x * c - y * sn, y * c + x * sn
        return out

    k = rotate(_dynamic_theta(10_000.0, 8, 2.0, 4, 6))
    got = rerotate_keys(k, pos, spec, from_len=np.int64(6), to_len=np.int64(9))
    assert (got - rotate(_dynamic_theta(10_000.0, 8, 2.0, 4, 9))).abs().max().item() < 1e-14
    with pytest.raises(
        TypeError, match=r"^to_len must be an int >= 1 \(a sequence length\), got np.float64\(9.0\)$"
    ):
        rerotate_keys(k, pos, spec, from_len=6, to_len=np.float64(9.0))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("rope_theta", np.float32(500_000.0)),
        ("rope_theta", np.int64(500_000)),
        ("partial_rotary_factor", np.float32(0.5)),
    ],
)
def test_from_hf_reads_numpy_numbers(field: str, value: object) -> None:
    """from_hf refused rope_theta=np.float32 ('must be a finite number') while it took head_dim=np.int64. The spec
    equals the one from the Python number (oracle: the base formula in Python float64)."""
    cfg = {"model_type": "llama", "head_dim": np.int64(64), "rope_theta": 500_000.0, field: value}
    got = RopeSpec.from_hf(cfg)
    want = RopeSpec.from_hf({**cfg, "head_dim": 64, field: value.item()})  # type: ignore[attr-defined]
    assert got == want and type(got.base) is float
    rd = int(got.rotary_dim)  # type: ignore[arg-type]
    assert got.frequencies().tolist() == [
        float(np.float64(500_000.0)) ** (-2.0 * i / rd) for i in range(rd // 2)
    ]


def test_from_hf_refuses_numpy_bools_and_huge_ints_naming_the_key() -> None:
    with pytest.raises(ValueError, match=r"^rope parameter rope_theta must be a finite number, got np.True_"):
        RopeSpec.from_hf({"head_dim": 8, "rope_theta": np.bool_(True)})
    with pytest.raises(
        ValueError,
        match=r"^rope parameter rope_theta must be a finite number \(beyond the float64 range, ~1\.8e308\), got "
        r"10000000\.\.\.0000 \(401 digits\)$",
    ):
        RopeSpec.from_hf({"head_dim": 8, "rope_theta": 10**400})  # a 400-digit integer in a config.json
    cfg = {
        "head_dim": 8,
        "max_position_embeddings": 2**70,
        "rope_scaling": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 10**400},
    }
    with pytest.raises(
        ValueError, match=r"original_max_position_embeddings must be a positive integer of at most 2\*\*63"
    ):
        RopeSpec.from_hf(cfg)
