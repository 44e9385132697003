"""Per-band norms, positional scores and the precision curve, against explicit loops and known values."""

from __future__ import annotations

import math

import pytest
import torch

from ropekit import RopeSpec
from ropekit.analysis.precision_curve import precision_curve
from ropekit.analysis.weights import WeightAnalysis, band_norms, positional_scores


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_band_norms_match_an_explicit_loop(layout: str) -> None:
    spec = RopeSpec(8, layout=layout)  # type: ignore[arg-type]
    x = torch.randn(2, 3, 2, 8, generator=torch.Generator().manual_seed(0))
    got = band_norms(x, spec).tolist()
    pairs = [(i, i + 4) for i in range(4)] if layout == "half" else [(2 * i, 2 * i + 1) for i in range(4)]
    for band, (a, b) in enumerate(pairs):
        vals = [
            math.hypot(x[i, j, h, a].item(), x[i, j, h, b].item())
            for i in range(2)
            for j in range(3)
            for h in range(2)
        ]
        assert got[band] == pytest.approx(sum(vals) / len(vals), rel=1e-6)


def test_positional_scores_of_known_patterns() -> None:
    s = 6
    prev = torch.zeros(s, s)
    prev[0, 0] = 1.0
    for i in range(1, s):
        prev[i, i - 1] = 1.0  # a previous-token head
    causal = torch.tril(torch.ones(s, s))
    uniform = causal / causal.sum(
        -1, keepdim=True
    )  # uniform causal attention: row i gives 1/(i+1) to each key
    attn = torch.stack([prev, uniform]).unsqueeze(0)  # (b 1, h 2, s, s)
    p, d = positional_scores(attn)
    assert p.tolist() == pytest.approx([1.0, sum(1 / (i + 1) for i in range(1, s)) / (s - 1)])
    assert d.tolist() == pytest.approx([1 / s, sum(1 / (i + 1) for i in range(s)) / s])
    w = WeightAnalysis(torch.zeros(1, 4), torch.zeros(1, 4), p.unsqueeze(0), d.unsqueeze(0), "test")
    assert w.positional_heads() == [{"layer": 0, "head": 0, "kind": "previous-token", "score": 1.0}]


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match=r"x must be \[b, s, h, head_dim=8\], got \(2, 8\)"):
        band_norms(torch.zeros(2, 8), RopeSpec(8))
    with pytest.raises(ValueError, match=r"attn must be \[b, h, s, s\]"):
        positional_scores(torch.zeros(1, 1, 3, 4))


def test_precision_curve_float32_recipe_breaks_and_ropekit_does_not() -> None:
    """At 10^7 the float32 product p * theta is off by ~p * 2^-24 ~ 0.6 rad; ropekit stays at float32 rounding."""
    c = precision_curve(RopeSpec(64, base=5e5), (100, 10_000_000, 100_000_000), window=64)
    assert c.position.tolist() == [100, 10_000_000, 100_000_000]
    assert (c.ropekit < 2.0**-23).all()
    assert c.common_fp32[0] < 1e-4 and c.common_fp32[1] > 0.1 and c.common_fp32[2] > 0.1
    with pytest.raises(ValueError, match="positions must be non-negative ints"):
        precision_curve(RopeSpec(8), (-1,))
