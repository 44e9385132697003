"""The position kernels: exact rows read from the device table or computed in float64 on the fly, no host sync.

Oracles: 60-digit mpmath reduction of p * theta (tests/ropekit/test_reduction.py's) for the rows, the float64
reference rotation for the rotated tensors. On CPU-only machines the kernels run under TRITON_INTERPRET=1
(conftest), called directly (the public entry points route only CUDA tensors to them); on a CUDA machine the
same tests run on the GPU, and the public entry points are checked too.
"""

from __future__ import annotations

import math

import mpmath
import pytest
import torch

from ropekit import RopeSpec, apply_rope, rope_tables
from tests.oracles import TOL, reference_rope
from tests.ropekit.rotation.triton_device import CUDA, DEVICE, triton_positions
from tests.ropekit.test_reduction import SPECIAL, SPECS, _oracle_angle, _random_positions

L = triton_positions.DEVICE_ROWS


@pytest.mark.parametrize("name", list(SPECS))
def test_device_rows_are_exact_across_int64(name: str) -> None:
    """Rows from the table (0 <= p < L) and computed on the fly (elsewhere, any int64) are within one float32
    rounding of the mpmath value, attention factor included."""
    spec = SPECS[name]
    positions = [0, 1, L - 1, L, L + 1, *SPECIAL, *_random_positions(6, seed=7)]
    cos, sin = triton_positions.exact_tables(torch.tensor(positions, device=DEVICE), spec)
    ths, f = spec.frequencies().tolist(), spec.attention_factor
    worst = 0.0
    for row, p in enumerate(positions):
        for band, th in enumerate(ths):
            a = _oracle_angle(p, th)
            worst = max(
                worst,
                float(abs(float(cos[row, band]) - f * mpmath.cos(a))),
                float(abs(float(sin[row, band]) - f * mpmath.sin(a))),
            )
    assert worst < 6.5e-8 * max(f, 1.0), f"{name}: {worst:.3g}"


def test_device_rows_match_the_host_tables_bit_for_bit_in_the_table_range() -> None:
    spec = SPECS["llama-3.1 (llama3 scaling)"]
    pos = torch.randint(0, L, (2, 300))
    cos, sin = triton_positions.exact_tables(pos.to(DEVICE), spec)
    hc, hs = rope_tables(pos, spec)  # CPU: the shared cache's rows
    assert cos.shape == (2, 300, spec.n_bands)
    assert torch.equal(cos.cpu(), hc) and torch.equal(sin.cpu(), hs)


@pytest.mark.parametrize("layout,rot", [("half", None), ("interleaved", 48)])
@pytest.mark.parametrize("pos_kind", ["batch", "shared", "shared-1d", "thd"])
@pytest.mark.parametrize("inplace", [False, True])
def test_rotation_at_positions_matches_the_reference(
    layout: str, rot: int | None, pos_kind: str, inplace: bool
) -> None:
    """Positions [b, s], [1, s] and [s] (shared by the batch) and [t] (packed), on both sides of the table's end."""
    spec = RopeSpec(64, base=10_000.0, rotary_dim=rot, layout=layout)
    b, s = (1, 9) if pos_kind == "thd" else (2, 9)
    hq, hk = 6, 2
    if pos_kind == "thd":
        q, k = torch.randn(s, hq, 64), torch.randn(s, hk, 64)
        pos = torch.randint(L - 5, L + 5, (s,))
        fmt = "thd"
    else:
        q, k = torch.randn(b, s, hq, 64), torch.randn(b, s, hk, 64)
        pos = torch.randint(L - 5, L + 5, (b if pos_kind == "batch" else 1, s))
        if pos_kind == "shared-1d":  # [s]: read with a zero batch stride
            pos = pos[0]
        fmt = "bshd"
    q0, k0 = q.clone(), k.clone()
    qd, kd = q.to(DEVICE), k.to(DEVICE)
    qo, ko = triton_positions.rotate_qk_positions(qd, kd, pos.to(DEVICE), spec, inplace)
    assert (qo is qd) == inplace and (ko is kd) == inplace
    ref_pos = pos.expand(b, s) if pos_kind.startswith("shared") else pos
    for got, x in ((qo, q0), (ko, k0)):
        want = reference_rope(x, ref_pos, spec, format=fmt)
        torch.testing.assert_close(got.double().cpu(), want, rtol=0, atol=TOL[torch.float32])


def test_rotation_at_2_40_against_mpmath() -> None:
    """Far past the table: the on-the-fly rows; a float64-product oracle would itself be ~1e-5 off here."""
    spec = RopeSpec(32, base=500_000.0)
    pos = [2**40 + 3, -(2**50), 2**62 + 12345]
    x = torch.randn(1, 3, 2, 32, dtype=torch.float64)
    out, _ = triton_positions.rotate_qk_positions(
        x.float().to(DEVICE), None, torch.tensor([pos], device=DEVICE), spec, False
    )
    xf = x.float().double()
    ths = spec.frequencies().tolist()
    worst = 0.0
    for si, p in enumerate(pos):
        for band, th in enumerate(ths):
            a = _oracle_angle(p, th)
            c, s = float(mpmath.cos(a)), float(mpmath.sin(a))
            for h in range(2):
                x1, x2 = float(xf[0, si, h, band]), float(xf[0, si, h, band + 16])
                worst = max(
                    worst,
                    abs(float(out[0, si, h, band]) - (x1 * c - x2 * s)),
                    abs(float(out[0, si, h, band + 16]) - (x2 * c + x1 * s)),
                )
    assert worst < 2e-6 * max(1.0, float(xf.abs().max())), worst
    assert math.isfinite(worst)


@pytest.mark.skipif(
    not CUDA, reason="the public entry points route only CUDA tensors to the position kernels"
)
def test_apply_rope_and_rope_tables_on_cuda_use_the_position_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """No host sync: apply_rope and rope_tables on CUDA int positions never read a position on the host."""
    spec = RopeSpec(128, base=500_000.0)
    pos = torch.randint(0, 2**40, (2, 8), device="cuda")
    q, k = torch.randn(2, 8, 8, 128, device="cuda"), torch.randn(2, 8, 2, 128, device="cuda")

    def no_sync(*a: object, **kw: object) -> None:
        raise AssertionError("host sync")

    monkeypatch.setattr(torch.Tensor, "item", no_sync)
    monkeypatch.setattr(torch.Tensor, "__int__", no_sync)
    qo, ko = apply_rope(q, k, pos, spec)
    cos, sin = rope_tables(pos, spec)
    monkeypatch.undo()
    c2, s2 = triton_positions.exact_tables(pos, spec)
    assert torch.equal(cos, c2) and torch.equal(sin, s2)
    q_host, k_host = apply_rope(q, k, pos, spec, backend="torch")  # the host tables (mpmath-tested elsewhere)
    torch.testing.assert_close(qo, q_host, rtol=0, atol=2e-6)
    torch.testing.assert_close(ko, k_host, rtol=0, atol=2e-6)


def test_device_tables_are_shared_by_equal_specs_and_outlive_the_id_cache() -> None:
    """One table per distinct spec and device, kept for the process: a launch captured in a CUDA graph keeps
    pointing at live memory even after the per-object cache is cleared."""
    a, b = RopeSpec(64, base=12_345.0), RopeSpec(64, base=12_345.0)
    rows_a, consts_a = triton_positions.device_rows(a, torch.device(DEVICE))
    triton_positions._BY_ID.clear()
    rows_b, consts_b = triton_positions.device_rows(b, torch.device(DEVICE))
    assert rows_b is rows_a and consts_b is consts_a
    assert rows_a.shape == (L, 2, 32) and consts_a.shape == (9, 32)
