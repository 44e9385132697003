"""Seed 004 section 7: the worked numerical examples, to the printed digits."""

from __future__ import annotations

import math

import pytest
import torch

from ropekit import RopeSpec, apply_rope
from ropekit.scaling import Linear


def _rotate_one(vec: list[float], pos: int, spec: RopeSpec) -> torch.Tensor:
    x = torch.tensor(vec, dtype=torch.float64).view(1, 1, 1, -1)
    out, _ = apply_rope(x, None, torch.tensor([pos]), spec)
    return out.view(-1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_7_1_single_band(dtype: torch.dtype) -> None:
    # q = (2, 1), k = (1.5, -0.5), theta = 0.2, p = 3, m = 8.
    spec = RopeSpec(head_dim=2, freqs=(0.2,), layout="interleaved")
    q = torch.tensor([[[[2.0, 1.0]]]], dtype=dtype)
    k = torch.tensor([[[[1.5, -0.5]]]], dtype=dtype)
    qr, _ = apply_rope(q, None, torch.tensor([3]), spec)
    kr, _ = apply_rope(k, None, torch.tensor([8]), spec)
    assert [round(v, 4) for v in qr.view(-1).tolist()] == [1.0860, 1.9546]
    assert [round(v, 4) for v in kr.view(-1).tolist()] == [0.4560, 1.5140]
    score = float((qr * kr).sum())
    assert round(score, 4) == 3.4544
    # the relative form: 2.5 cos 1.0 + 2.5 sin 1.0
    assert round(2.5 * math.cos(1.0) + 2.5 * math.sin(1.0), 4) == 3.4544


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_7_2_multi_band_head(layout: str) -> None:
    spec = RopeSpec(head_dim=8, base=10_000.0, layout=layout)
    assert [round(t, 12) for t in spec.inv_freq(dtype=torch.float64).tolist()] == [1.0, 0.1, 0.01, 0.001]
    q = [1.0, 2.0, 0.0, 1.0, 2.0, 0.0, 1.0, -1.0]  # the seed's vectors, in its (2i, 2i+1) pairing
    k = [2.0, 1.0, 1.0, 0.0, 0.0, 1.0, -1.0, 2.0]
    if layout == "half":  # same vectors expressed in the half-split channel order
        q = q[0::2] + q[1::2]
        k = k[0::2] + k[1::2]
    qr, kr = _rotate_one(q, 2, spec), _rotate_one(k, 5, spec)
    pairs = spec.pairs()
    bands = [float(qr[x] * kr[x] + qr[y] * kr[y]) for x, y in zip(*pairs)]
    assert [round(b, 4) for b in bands] == [-3.5366, 0.2955, -0.0600, -3.0030]
    score = float((qr * kr).sum())
    assert round(score, 4) == -6.3041
    assert round(score / math.sqrt(8), 4) == round(-6.3041 / math.sqrt(8), 4)


def test_7_3_phase_differences_raw_and_linearly_scaled() -> None:
    spec = RopeSpec(head_dim=8)
    raw = (4096 * spec.inv_freq(dtype=torch.float64)).tolist()
    assert [round(v, 6) for v in raw] == [4096.0, 409.6, 40.96, 4.096]
    scaled_spec = RopeSpec(head_dim=8, scaling=Linear(8.0))
    scaled = (4096 * scaled_spec.inv_freq(dtype=torch.float64)).tolist()
    assert [round(v, 6) for v in scaled] == [512.0, 51.2, 5.12, 0.512]


def test_7_3_linear_scaling_equals_dividing_positions() -> None:
    # g(p) = p / 8: rotating at p with the scaled spec equals rotating at p / 8 with the raw one.
    x = torch.randn(1, 5, 2, 8, dtype=torch.float64)
    pos = torch.tensor([0, 8, 4096, 12345, 99999])
    a, _ = apply_rope(x, None, pos, RopeSpec(head_dim=8, scaling=Linear(8.0)))
    b, _ = apply_rope(x, None, pos.double() / 8, RopeSpec(head_dim=8))
    torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_7_4_near_and_far_single_band() -> None:
    # f(D) = cos(D theta): theta = 1 -> 1, 0.5403, -0.4161; theta = 0.01 -> 1, 0.99995, 0.99980, f(628) = 0.999995
    for t, expect in ((1.0, [1.0, 0.5403, -0.4161]), (0.01, [1.0, 0.99995, 0.9998])):
        spec = RopeSpec(head_dim=2, freqs=(t,), layout="interleaved")
        one = torch.tensor([[[[1.0, 0.0]]]], dtype=torch.float64)
        vals = []
        for d in (0, 1, 2):
            kr, _ = apply_rope(one, None, torch.tensor([d]), spec)
            vals.append(float(kr.view(-1)[0]))  # <e_0, R(d theta) e_0> = cos(d theta)
        digits = 4 if t == 1.0 else 5
        assert [round(v, digits) for v in vals] == expect
    spec = RopeSpec(head_dim=2, freqs=(0.01,), layout="interleaved")
    kr, _ = apply_rope(torch.tensor([[[[1.0, 0.0]]]], dtype=torch.float64), None, torch.tensor([628]), spec)
    assert round(float(kr.view(-1)[0]), 6) == 0.999995
