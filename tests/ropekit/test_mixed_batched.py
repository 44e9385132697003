"""MixedRotary with per-sequence positions [2, b, s] (padded batches of different grids) and with float positions
that require grad. Oracle: the RoPE-Mixed formula in float64 (band j of head h turns by x f_x + y f_y, interleaved
pairs), written here from the paper, and its derivative d angle / dx = f_x, d angle / dy = f_y."""

from __future__ import annotations

import pytest
import torch

from ropekit.mixed import MixedRotary


def _oracle(x: torch.Tensor, pos: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """x [b, s, h, D] (bshd), pos [2, b, s], freqs [2, h, n] -> rotated x in float64."""
    x = x.double()
    b, s, h, d = x.shape
    out = torch.empty_like(x)
    for bi in range(b):
        for si in range(s):
            for hi in range(h):
                for j in range(d // 2):
                    a = float(pos[0, bi, si]) * float(freqs[0, hi, j]) + float(pos[1, bi, si]) * float(
                        freqs[1, hi, j]
                    )
                    c, sn = (
                        torch.cos(torch.tensor(a, dtype=torch.float64)),
                        torch.sin(torch.tensor(a, dtype=torch.float64)),
                    )
                    x1, x2 = x[bi, si, hi, 2 * j], x[bi, si, hi, 2 * j + 1]
                    out[bi, si, hi, 2 * j] = x1 * c - x2 * sn
                    out[bi, si, hi, 2 * j + 1] = x2 * c + x1 * sn
    return out


@pytest.mark.parametrize("fmt", ["bshd", "bhsd"])
def test_per_sequence_positions_match_the_formula(fmt: str) -> None:
    """[2, b, s] was refused ("positions must have shape [2, tokens]")."""
    g = torch.Generator().manual_seed(0)
    m = MixedRotary(8, 2, dtype=torch.float64, format=fmt, generator=g)  # type: ignore[arg-type]
    q = torch.randn(3, 5, 2, 8, dtype=torch.float64, generator=g)
    k = torch.randn(3, 5, 2, 8, dtype=torch.float64, generator=g)
    pos = torch.randint(0, 7, (2, 3, 5), generator=g)
    qi, ki = (q, k) if fmt == "bshd" else (q.transpose(1, 2), k.transpose(1, 2))
    q_rot, k_rot = m(qi, ki, positions=pos)
    assert k_rot is not None
    if fmt == "bhsd":
        q_rot, k_rot = q_rot.transpose(1, 2), k_rot.transpose(1, 2)
    f = m.freqs.detach()
    torch.testing.assert_close(q_rot, _oracle(q, pos, f), atol=1e-12, rtol=0)
    torch.testing.assert_close(k_rot, _oracle(k, pos, f), atol=1e-12, rtol=0)
    # [2, 1, s] is the shared form
    shared = pos[:, :1].expand(2, 3, 5)
    torch.testing.assert_close(m(qi, None, positions=pos[:, :1])[0], m(qi, None, positions=shared)[0])


def test_per_sequence_positions_are_checked_against_the_batch() -> None:
    m = MixedRotary(8, 2)
    q = torch.randn(3, 5, 2, 8)
    with pytest.raises(ValueError, match=r"batch 1 or q's batch 3, got \(2, 2, 5\)"):
        m(q, positions=torch.zeros(2, 2, 5))
    with pytest.raises(ValueError, match="positions cover 4 tokens but q has 5"):
        m(q, positions=torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match=r"\[2, tokens\] or \[2, batch, tokens\]"):
        m(q, positions=torch.zeros(2, 1, 3, 5))


def test_gradient_with_respect_to_float_positions() -> None:
    """Float positions that require grad were refused; the derivative of the angle is (f_x, f_y)."""
    g = torch.Generator().manual_seed(1)
    m = MixedRotary(8, 2, dtype=torch.float64, generator=g)
    q = torch.randn(2, 4, 2, 8, dtype=torch.float64, generator=g)
    pos = (torch.rand(2, 2, 4, dtype=torch.float64, generator=g) * 9).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda p: m(q, None, positions=p)[0], (pos,))
    # analytic: d/dx sum(w * R q) with the oracle's derivative per band
    w = torch.randn(2, 4, 2, 8, dtype=torch.float64, generator=g)
    (m(q, None, positions=pos)[0] * w).sum().backward()
    assert pos.grad is not None
    f = m.freqs.detach()
    p = pos.detach()
    ang = p[0][..., None, None] * f[0] + p[1][..., None, None] * f[1]  # [b, s, h, n]
    x1, x2, w1, w2 = q[..., 0::2], q[..., 1::2], w[..., 0::2], w[..., 1::2]
    # d/da of w1 (x1 cos - x2 sin) + w2 (x2 cos + x1 sin)
    dda = w1 * (-x1 * torch.sin(ang) - x2 * torch.cos(ang)) + w2 * (
        -x2 * torch.sin(ang) + x1 * torch.cos(ang)
    )
    want = torch.stack([(dda * f[0]).sum((-2, -1)), (dda * f[1]).sum((-2, -1))])
    torch.testing.assert_close(pos.grad, want, atol=1e-10, rtol=1e-10)
