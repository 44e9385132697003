"""Float positions on the CPU take ropekit's C tables (``kernels/rope_phase.h``): exact against mpmath.

The oracle reduces ``x * theta mod 2 pi`` in 60-digit mpmath for the value the position's dtype holds and the
spec's float64 frequency theta, then takes cos and sin there (times the attention factor); it shares no code with
ropekit. The C path must keep the guarantees the PyTorch path documents (ropekit.phases, ropekit.reduction): float64
tables within 5e-15, float32 tables within one float32 rounding, for every float position below 2^63.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from unittest import mock

import mpmath
import pytest
import torch

from ropekit import RopeSpec, apply_rope, rope_tables
from ropekit.kernels import cpu_build
from ropekit.presets import preset_spec

pytestmark = pytest.mark.skipif(
    cpu_build.load() is None, reason="no C compiler: the CPU kernel is unavailable"
)

mpmath.mp.dps = 60
LLAMA3 = RopeSpec(head_dim=128, base=500_000.0)
YARN = preset_spec("qwen2.5-7b-yarn")  # attention factor 1.1386...
WIDE = RopeSpec(head_dim=1024, base=10_000.0)  # 512 bands: more than the kernel's 256-band block
SPECIAL = [0.0, 0.5, -0.5, -3.75, 1234.5678, 1e15 + 0.5, 2.0**53 - 1, 2.0**62, -(2.0**62) - 2048.0]
SPECIAL += [2.0**63 - 1024.0]


@pytest.fixture(autouse=True)
def _kernel_only() -> Iterator[None]:
    """torch.cos / torch.sin raise in every test here: the tables come from the kernel, never from the PyTorch
    path (its float64 cos and sin of the reduced angle; float positions took it before the kernel)."""
    err = AssertionError("the PyTorch phase path ran")
    with mock.patch.object(torch, "cos", side_effect=err), mock.patch.object(torch, "sin", side_effect=err):
        yield


def _oracle(x: float, th: float, factor: float) -> tuple[mpmath.mpf, mpmath.mpf]:
    a = mpmath.mpf(x) * mpmath.mpf(th)
    a -= 2 * mpmath.pi * mpmath.nint(a / (2 * mpmath.pi))
    return factor * mpmath.cos(a), factor * mpmath.sin(a)


def _worst(pos: torch.Tensor, spec: RopeSpec, dtype: torch.dtype, bands: list[int] | None = None) -> float:
    """Largest |table - oracle| over the positions and bands (all bands by default)."""
    cos, sin = rope_tables(pos, spec, dtype=dtype)
    ths = spec.frequencies().tolist()
    idx = range(len(ths)) if bands is None else bands
    worst = 0.0
    flat_c, flat_s = cos.reshape(-1, len(ths)).tolist(), sin.reshape(-1, len(ths)).tolist()
    for row, x in enumerate(pos.reshape(-1).tolist()):  # the value the dtype holds, taken exactly
        for j in idx:
            rc, rs = _oracle(x, ths[j], spec.attention_factor)
            worst = max(worst, float(abs(flat_c[row][j] - rc)), float(abs(flat_s[row][j] - rs)))
    return worst


@pytest.mark.parametrize("spec", [LLAMA3, YARN], ids=["llama3-base", "yarn-factor"])
def test_float64_positions_exact_without_the_pytorch_path(spec: RopeSpec) -> None:
    """Every band at special and random positions up to 2^63: float64 tables to 5e-15, float32 tables to one
    float32 rounding, times the attention factor."""
    rng = random.Random(3)
    xs = SPECIAL + [rng.uniform(-1, 1) * 2.0 ** rng.randrange(0, 63) for _ in range(12)]
    pos = torch.tensor(xs, dtype=torch.float64)
    worst64 = _worst(pos, spec, torch.float64)
    worst32 = _worst(pos, spec, torch.float32)
    assert worst64 < 5e-15, worst64
    assert worst32 < 6.5e-8 * max(spec.attention_factor, 1.0), worst32


def test_float32_positions_exact_and_shaped() -> None:
    """float32 positions [b, s] below 2^24 (their exact float32 values), float32 tables [b, s, n]."""
    g = torch.Generator().manual_seed(0)
    pos = (torch.rand(3, 5, generator=g) - 0.5) * 2.0**25
    pos[0, :3] = torch.tensor([0.25, -0.0, 16777215.0])
    cos, _ = rope_tables(pos, LLAMA3)
    assert cos.shape == (3, 5, 64) and cos.dtype == torch.float32 and cos.is_contiguous()
    assert _worst(pos, LLAMA3, torch.float64) < 5e-15
    assert _worst(pos, LLAMA3, torch.float32) < 6.5e-8


def test_more_bands_than_one_block() -> None:
    """512 bands (the float32 output is rounded in blocks of 256): every band of both blocks is right."""
    pos = torch.tensor([[3.5, -1e6 - 0.125], [2.0**40 + 0.5, 77.0]], dtype=torch.float64)
    bands = list(range(0, 512, 7)) + [255, 256, 257, 511]
    assert _worst(pos, WIDE, torch.float32, bands) < 6.5e-8
    assert _worst(pos, WIDE, torch.float64, bands) < 5e-15


def test_every_quadrant_of_the_angle() -> None:
    """theta = 1 (band 0 of base-16 head_dim 4 is exactly 1): angles x mod 2 pi in every quadrant and at its edges
    (x = k pi / 4 rounded), the sin/cos kernel's reduction by quarter turns."""
    spec = RopeSpec(head_dim=4, base=16.0)
    xs = [k * math.pi / 4 + d for k in range(-9, 10) for d in (-1e-9, 0.0, 1e-9)]
    xs += [0.1 * k for k in range(-70, 70)]
    pos = torch.tensor(xs, dtype=torch.float64)
    assert _worst(pos, spec, torch.float64) < 5e-15


def test_non_contiguous_positions() -> None:
    """A transposed view and an expanded row: the values read are the view's."""
    base = torch.tensor([[0.5, 10.25], [-7.0, 3e9 + 0.5]], dtype=torch.float64)
    for pos in (base.t(), base[:1].expand(3, 2)):
        assert not pos.is_contiguous()
        assert _worst(pos, LLAMA3, torch.float64, [0, 1, 31, 63]) < 5e-15


def test_threads_give_the_same_tables() -> None:
    """A table large enough to be split over threads is the same bits with one thread, and exact (sampled)."""
    g = torch.Generator().manual_seed(1)
    pos = torch.rand(4096, dtype=torch.float64, generator=g) * 2.0**40
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = rope_tables(pos, LLAMA3)
        torch.set_num_threads(max(2, before))
        many = rope_tables(pos, LLAMA3)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one[0], many[0]) and torch.equal(one[1], many[1])
    assert _worst(pos[::512], LLAMA3, torch.float32) < 6.5e-8


def test_apply_rope_float_positions_rotate_by_the_oracle_angle() -> None:
    """The decode call the kernel serves: q [b, 1, h, d] at float32 positions [b, 1], against the float64 rotation
    by the mpmath angle ("half" layout: channel j with j + 64)."""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(4, 1, 2, 128, generator=g)
    pos = torch.rand(4, 1, generator=g) * 4000
    out, _ = apply_rope(q, None, pos, LLAMA3)
    ths = LLAMA3.frequencies().tolist()
    c = torch.tensor([[float(_oracle(x, th, 1.0)[0]) for th in ths] for x in pos.reshape(-1).tolist()])
    s = torch.tensor([[float(_oracle(x, th, 1.0)[1]) for th in ths] for x in pos.reshape(-1).tolist()])
    c, s = c.double()[:, None, None], s.double()[:, None, None]
    a, b = q.double()[..., :64], q.double()[..., 64:]
    want = torch.cat((a * c - b * s, b * c + a * s), dim=-1)
    torch.testing.assert_close(out.double(), want, rtol=0, atol=2e-6)


def test_lazily_negated_positions_are_read_as_their_values() -> None:
    """A contiguous negative view (torch's neg bit: storage holds x, the tensor is -x) is read as -x."""
    x = torch.tensor([2.5, 1e6 + 0.25], dtype=torch.float64)
    pos = torch._neg_view(x)
    assert pos.is_neg() and pos.is_contiguous()
    assert _worst(pos, LLAMA3, torch.float64, [0, 5, 63]) < 5e-15
