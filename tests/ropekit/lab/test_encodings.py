"""The lab's positional encodings against their papers' formulas."""

from __future__ import annotations

import math

import pytest
import torch

from ropekit import RopeSpec, apply_rope
from ropekit.lab.encodings import ALiBi, Learned, RoPE, Sinusoidal, T5Bias, build_encoding
from ropekit.lab.encodings.alibi import alibi_slopes
from ropekit.lab.encodings.t5 import t5_bucket


def test_alibi_slopes_and_bias() -> None:
    assert alibi_slopes(8) == [2 ** -(i + 1) for i in range(8)]  # Press et al.: 1/2 ... 1/256 for 8 heads
    assert alibi_slopes(4) == [2 ** -(2 * (i + 1)) for i in range(4)]
    assert len(alibi_slopes(6)) == 6
    enc = ALiBi(16, 4, 4)
    pos = torch.arange(5).view(1, 5)
    bias = enc.bias(pos, pos)
    assert bias.shape == (1, 4, 5, 5)
    assert bias[0, 0, 4, 1].item() == pytest.approx(-0.25 * 3)  # -m_1 * (4 - 1), m_1 = 1/4
    assert bias[0, 2, 1, 3].item() == 0.0  # future keys get no bias (they are masked anyway)


def test_t5_buckets() -> None:
    d = torch.arange(0, 400)
    b = t5_bucket(d, 32, 128)
    assert torch.equal(b[:16], torch.arange(16))  # exact buckets below num_buckets / 2
    assert bool((b[1:] >= b[:-1]).all()) and int(b.max()) == 31 and int(b[128:].min()) == 31
    enc = T5Bias(16, 2, 8)
    assert enc.bias(torch.arange(3).view(1, 3), torch.arange(3).view(1, 3)).shape == (1, 2, 3, 3)


def test_sinusoidal_formula() -> None:
    enc = Sinusoidal(8, 2, 4)
    x = torch.randn(1, 3, 8)
    out = enc.embed(x, torch.tensor([[0, 1, 1000]])) - x * math.sqrt(
        8
    )  # embeddings scaled by sqrt(d) (section 3.4)
    for j, p in enumerate((0, 1, 1000)):
        for i in range(4):
            w = 1 / 10000 ** (2 * i / 8)
            assert out[0, j, 2 * i].item() == pytest.approx(math.sin(p * w), abs=1e-6)
            assert out[0, j, 2 * i + 1].item() == pytest.approx(math.cos(p * w), abs=1e-6)


def test_learned_table_beyond_its_length() -> None:
    enc = Learned(8, 2, 4, max_positions=4)
    x = torch.zeros(1, 2, 8)
    assert torch.equal(
        enc.embed(x, torch.tensor([[3, 9]]))[0, 1], enc.table.weight[3]
    )  # clamped to the last row
    strict = Learned(8, 2, 4, max_positions=4, beyond="error")
    with pytest.raises(ValueError, match="past the learned table"):
        strict.embed(x, torch.tensor([[3, 9]]))


def test_rope_encoding_is_ropekit() -> None:
    spec = RopeSpec(8, p=0.5)
    enc = RoPE(16, 2, 8, spec=spec)
    q, k = torch.randn(1, 3, 2, 8), torch.randn(1, 3, 1, 8)
    pos = torch.tensor([[5, 6, 7]])
    a = enc.rotate(q, k, pos)
    b = apply_rope(q, k, pos, spec)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    with pytest.raises(ValueError, match="head_dim"):
        RoPE(16, 2, 8, spec=RopeSpec(16))
    with pytest.raises(ValueError, match="unknown encoding"):
        build_encoding("xpos2", 16, 2, 8)
