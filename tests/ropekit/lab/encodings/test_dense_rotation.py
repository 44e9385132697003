"""Seed 004 section 8.3: a dense rotation family is relative only when it is a one-parameter group."""

from __future__ import annotations

import cmath

import torch

from ropekit.lab.encodings import DenseRotation


def rope_logit_in_basis(q: torch.Tensor, k: torch.Tensor, basis: torch.Tensor, delta: int) -> float:
    """(Q R(n) Q^T q) . (Q R(m) Q^T k) = RoPE logit of Q^T q and Q^T k at distance n - m, by complex numbers."""
    a, b = basis.T @ q.double(), basis.T @ k.double()
    d = a.numel()
    total = 0.0
    for i in range(d // 2):
        theta = 10_000.0 ** (-2 * i / d)
        za, zb = complex(a[2 * i], a[2 * i + 1]), complex(b[2 * i], b[2 * i + 1])
        total += (za * zb.conjugate() * cmath.exp(1j * delta * theta)).real
    return total


def test_dense_matrices_are_rotations() -> None:
    enc = DenseRotation(64, 4, 16)
    u = enc.matrices(torch.tensor([0, 5, 1000]))
    eye = torch.eye(16, dtype=torch.float64)
    torch.testing.assert_close(u.transpose(-1, -2) @ u, eye.expand(3, 16, 16), rtol=0, atol=1e-12)
    torch.testing.assert_close(u[0], eye, rtol=0, atol=1e-12)
    assert (
        float((u[1] - torch.block_diag(*[u[1][i : i + 2, i : i + 2] for i in range(0, 16, 2)])).abs().max())
        > 0.1
    )


def test_one_generator_is_rope_in_another_basis() -> None:
    torch.manual_seed(0)
    enc = DenseRotation(64, 4, 16, generators=1)
    q, k = torch.randn(16), torch.randn(16)
    pos = torch.tensor([[3, 250]])
    a, b = enc.rotate(q.expand(1, 2, 1, 16), k.expand(1, 2, 1, 16), pos)
    got = float(a[0, 1, 0].double() @ b[0, 0, 0].double())
    assert abs(got - rope_logit_in_basis(q, k, enc.bases[0], 247)) < 1e-4


def test_two_generators_break_relative_position() -> None:
    """The counter-example: the same q, k and distance give different logits at different absolute positions."""
    torch.manual_seed(0)
    enc, control = DenseRotation(64, 4, 16), DenseRotation(64, 4, 16, generators=1)
    q, k = torch.randn(16), torch.randn(16)
    changes = {}
    for name, e in (("dense", enc), ("group", control)):
        logits = []
        for shift in (0, 100, 1000):
            a, b = e.rotate(q.expand(1, 2, 1, 16), k.expand(1, 2, 1, 16), torch.tensor([[shift, shift + 10]]))
            logits.append(float(a[0, 1, 0] @ b[0, 0, 0]))
        changes[name] = max(logits) - min(logits)
    scale = float(q.norm() * k.norm())
    assert changes["group"] < 1e-5 * scale
    assert changes["dense"] > 0.05 * scale
