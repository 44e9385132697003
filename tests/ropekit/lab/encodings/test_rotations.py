"""p-RoPE and the single-frequency counter-example against direct float64 rotations of each band."""

from __future__ import annotations

import math

import pytest
import torch

from ropekit.lab.encodings import PRoPE, SingleFrequency


def rotate_half_pairs(x: torch.Tensor, p: int, freqs: list[float]) -> torch.Tensor:
    """Band i = channels (i, i + d/2) rotated by p * freqs[i], in float64 (the seed's R(phi) per band)."""
    x = x.double()
    h = x.shape[-1] // 2
    out = x.clone()
    for i, f in enumerate(freqs):
        c, s = math.cos(p * f), math.sin(p * f)
        out[..., i] = c * x[..., i] - s * x[..., i + h]
        out[..., i + h] = s * x[..., i] + c * x[..., i + h]
    return out


@pytest.mark.parametrize("p", [0.25, 0.75])
def test_p_rope_rotates_only_the_highest_frequencies(p: float) -> None:
    d, n = 16, 8
    enc = PRoPE(64, 4, d, p=p)
    kept = int(p * n)
    freqs = [10_000.0 ** (-2 * i / d) if i < kept else 0.0 for i in range(n)]
    q = torch.randn(1, 3, 2, d)
    pos = torch.tensor([[0, 17, 4000]])
    qr, _ = enc.rotate(q, q[:, :, :1], pos)
    for j in range(3):
        want = rotate_half_pairs(q[0, j], int(pos[0, j]), freqs)
        torch.testing.assert_close(qr[0, j].double(), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="0 < p <= 1"):
        PRoPE(64, 4, d, p=0.0)


def test_single_frequency_rotates_every_band_alike_and_aliases_at_its_period() -> None:
    theta = 2 * math.pi / 100  # period T = 100 positions exactly
    enc = SingleFrequency(64, 4, 16, theta=theta)
    q = torch.randn(1, 1, 1, 16)
    qr, _ = enc.rotate(q, q, torch.tensor([[37]]))
    torch.testing.assert_close(
        qr[0, 0].double(), rotate_half_pairs(q[0, 0], 37, [theta] * 8), rtol=1e-5, atol=1e-5
    )
    # the seed's point: distances D and D + T give the same logit for every q, k (one scale only); RoPE's differ
    torch.manual_seed(1)
    qv, kv = torch.randn(16), torch.randn(16)
    qs, ks = qv.expand(1, 3, 1, 16), kv.expand(1, 3, 1, 16)
    pos = torch.tensor([[0, 13, 113]])
    for e, aliased in ((enc, True), (PRoPE(64, 4, 16, p=1.0), False)):
        a, b = e.rotate(qs, ks, pos)
        near, far = float(a[0, 1, 0] @ b[0, 0, 0]), float(a[0, 2, 0] @ b[0, 0, 0])
        assert (abs(near - far) < 1e-4 * (1 + abs(near))) == aliased
