"""Multi-axis positions in the Triton position kernels: band j turned at its own axis's position, read on the device.

Oracles: the float64 angles written from the families' letter maps (tests/ropekit/test_axis_tables.py's CASES,
never ropekit's AxisMap) for positions where a float64 product is exact enough; the 1-D position kernel's rows
(mpmath-tested in test_triton_positions.py) band by band at each band's axis position, bit for bit, everywhere else
(negative, past the device table, near 2^40). On CPU-only machines the kernels run under TRITON_INTERPRET=1; on a
CUDA machine the public entry points are checked too: no host sync, CUDA graph capture, decoding with equal axes.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ropekit import Rotary, apply_rope_axes, axis_tables
from tests.ropekit.rotation.triton_device import CUDA, DEVICE, triton_backend, triton_positions
from tests.ropekit.test_axis_tables import CASES, _oracle_angles

L = triton_positions.DEVICE_ROWS


def _rotate64(x: torch.Tensor, ang: torch.Tensor, spec: object) -> torch.Tensor:
    """x [..., d] rotated by float64 angles [..., n] (broadcast over heads), pairs of the spec's layout."""
    n = ang.shape[-1]
    r = 2 * n
    y = x.double().clone()
    if spec.layout == "half":  # type: ignore[attr-defined]
        a, b = x.double()[..., :n], x.double()[..., n:r]
        y[..., :n], y[..., n:r] = a * ang.cos() - b * ang.sin(), b * ang.cos() + a * ang.sin()
    else:
        a, b = x.double()[..., 0:r:2], x.double()[..., 1:r:2]
        y[..., 0:r:2], y[..., 1:r:2] = a * ang.cos() - b * ang.sin(), b * ang.cos() + a * ang.sin()
    return y


def _positions(kind: str, a: int, b: int, s: int, lo: int, hi: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    if kind == "batch":
        return torch.randint(lo, hi, (a, b, s), generator=g)
    if kind == "shared":
        return torch.randint(lo, hi, (a, 1, s), generator=g)
    if kind == "shared-2d":
        return torch.randint(lo, hi, (a, s), generator=g)
    if kind == "strided":  # [b, A, s] storage read as [A, b, s]: the axis stride is not the largest
        return torch.randint(lo, hi, (b, a, s), generator=g).transpose(0, 1)
    return torch.randint(lo, hi, (a, b * s), generator=g)  # thd: [A, t]


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("kind", ["batch", "shared", "shared-2d", "strided", "thd"])
def test_rotation_matches_the_float64_oracle(name: str, kind: str) -> None:
    """Positions on both sides of the device table's end and negative: rows read and rows computed on the fly."""
    spec, letters, names, freqs = CASES[name]
    a, b, s, d = len(names), 2, 7, spec.head_dim
    pos = _positions(kind, a, b, s, -40, 2 * L)
    pos[0, ..., 0] = L - 1  # one band at the table's last row, the others wherever they fall
    q = torch.randn(b * s, 5, d) if kind == "thd" else torch.randn(b, s, 5, d)
    k = torch.randn(b * s, 2, d) if kind == "thd" else torch.randn(b, s, 2, d)
    qo, ko = triton_positions.rotate_qk_positions(q.to(DEVICE), k.to(DEVICE), pos.to(DEVICE), spec, False)
    per_token = pos  # [A, b, s] or [A, t]: one position per token and axis
    if kind == "shared":
        per_token = pos.expand(a, b, s)
    elif kind == "shared-2d":
        per_token = pos[:, None].expand(a, b, s)
    flat = per_token.reshape(a, -1).double().tolist()
    ang = _oracle_angles(flat, letters, names, freqs)  # [tokens, n]
    ang = ang.reshape(*q.shape[:-2], 1, -1)
    for got, x in ((qo, q), (ko, k)):
        want = _rotate64(x, ang, spec)
        torch.testing.assert_close(got.double().cpu(), want, rtol=0, atol=2e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_tables_are_the_one_axis_rows_band_by_band(name: str) -> None:
    """Each band's row is bit for bit the 1-D kernel's row at that band's axis position, over the whole int64
    range (huge and negative positions take the on-the-fly exact rows)."""
    spec, letters, names, _ = CASES[name]
    a = len(names)
    pos = torch.randint(-(2**45), 2**45, (a, 3, 11))
    pos[:, 0] = torch.randint(0, L, (a, 11))  # a row of table reads
    cos, sin = triton_positions.exact_tables(pos.to(DEVICE), spec)
    assert cos.shape == (3, 11, spec.n_bands)
    one = dataclasses.replace(spec, axes=None)
    for j, letter in enumerate(letters):
        c1, s1 = triton_positions.exact_tables(pos[names.index(letter)].to(DEVICE), one)
        assert torch.equal(cos[..., j], c1[..., j]) and torch.equal(sin[..., j], s1[..., j]), (name, j)


def test_rotation_at_huge_positions_equals_the_tables_path_bit_for_bit() -> None:
    """Far from the table (where a float64-product oracle is itself off): the positions launch computes exactly
    what the tables launch computes with the exact per-token tables."""
    spec = CASES["qwen3_vl"][0]
    pos = torch.randint(-(2**50), 2**50, (3, 2, 6))
    q, k = torch.randn(2, 6, 4, spec.head_dim), torch.randn(2, 6, 2, spec.head_dim)
    got_q, got_k = triton_positions.rotate_qk_positions(
        q.to(DEVICE), k.to(DEVICE), pos.to(DEVICE), spec, False
    )
    cos, sin = triton_positions.exact_tables(pos.to(DEVICE), spec)
    want_q, want_k = triton_backend.rotate_qk(
        q.to(DEVICE), k.to(DEVICE), cos, sin, spec.rotary_dim, spec.layout, False
    )
    assert want_k is not None and got_k is not None
    assert torch.equal(got_q, want_q) and torch.equal(got_k, want_k)


def test_in_place_and_plan_repeat_read_new_positions() -> None:
    """The stored launch (a repeated geometry) reads the positions tensor it is given, in place."""
    spec = CASES["qwen2_vl"][0]
    q = torch.randn(2, 5, 3, spec.head_dim)
    pos = torch.randint(0, 100, (3, 2, 5))
    qd = q.clone().to(DEVICE)
    (_, _), plan = triton_positions.positions_plan(qd, None, pos.to(DEVICE), spec, True)
    assert plan is not None and plan.from_pos
    pos2 = torch.randint(0, 100, (3, 2, 5))
    qd2 = q.clone().to(DEVICE)
    out, _ = plan(qd2, None, pos2.to(DEVICE), pos2.to(DEVICE))
    assert out is qd2
    want, _ = apply_rope_axes(q.double(), None, pos2, spec)
    torch.testing.assert_close(out.double().cpu(), want, rtol=0, atol=2e-6)


# ---------------------------------------------------------------------------------------------- CUDA entry points
cuda = pytest.mark.skipif(not CUDA, reason="the public entry points route only CUDA tensors to the kernels")


@cuda
@pytest.mark.parametrize("name", sorted(CASES))
def test_entry_points_on_cuda_never_sync_and_match_the_host(name: str) -> None:
    spec = CASES[name][0]
    a = spec.axes.n_axes
    pos = torch.randint(0, 3 * L, (a, 2, 9), device="cuda")
    q = torch.randn(2, 9, 4, spec.head_dim, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 9, 2, spec.head_dim, device="cuda", dtype=torch.bfloat16)
    rot = Rotary(spec).to("cuda")
    want_q, want_k = apply_rope_axes(q.cpu().double(), k.cpu().double(), pos.cpu(), spec)
    shared = pos[
        :, :1
    ].clone()  # [A, 1, s]: a geometry never called before (the checked path, not a stored one)
    want_qs, _ = apply_rope_axes(q.cpu().double(), None, shared.cpu(), spec)
    apply_rope_axes(
        q[:, :1].clone(), None, pos[:, :, :1].clone(), spec
    )  # builds the spec's device table once
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any synchronizing CUDA call raises from here on
    try:
        outs = [
            apply_rope_axes(q, k, pos, spec),
            apply_rope_axes(q, k, pos, spec),  # the stored launch
            rot(q, k, positions=pos),
        ]
        got_qs, _ = apply_rope_axes(q, None, shared, spec)
        cos, sin = axis_tables(pos, spec)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(got_qs.cpu().double(), want_qs, rtol=0, atol=0.02)
    for got_q, got_k in outs:
        assert got_k is not None
        torch.testing.assert_close(got_q.cpu().double(), want_q, rtol=0, atol=0.02)
        torch.testing.assert_close(got_k.cpu().double(), want_k, rtol=0, atol=0.02)
    c64, s64 = axis_tables(pos.cpu(), spec, dtype=torch.float64)
    torch.testing.assert_close(cos.cpu().double(), c64, rtol=0, atol=6e-8)
    torch.testing.assert_close(sin.cpu().double(), s64, rtol=0, atol=6e-8)


@cuda
@pytest.mark.parametrize("fmt", ["bhsd", "thd"])
@pytest.mark.parametrize("inplace", [False, True])
def test_cuda_formats_in_place_and_int32_positions(fmt: str, inplace: bool) -> None:
    """The launch reads q and k in every format, in place or not, and int32 positions, as the host path does."""
    spec = CASES["glm4v"][0]  # partial rotary: the channels past rotary_dim pass through
    a, b, s, d = 3, 2, 7, spec.head_dim
    if fmt == "thd":
        q, k = torch.randn(b * s, 4, d), torch.randn(b * s, 2, d)
        pos = torch.randint(-5, 2 * L, (a, b * s), dtype=torch.int32)
    else:
        q, k = torch.randn(b, 4, s, d), torch.randn(b, 2, s, d)
        pos = torch.randint(-5, 2 * L, (a, b, s), dtype=torch.int32)
    want_q, want_k = apply_rope_axes(q.double(), k.double(), pos.long(), spec, format=fmt)
    qd, kd = q.cuda(), k.cuda()
    for call in (apply_rope_axes, Rotary(spec, format=fmt).cuda()):
        qi, ki = qd.clone(), kd.clone()
        if call is apply_rope_axes:
            got_q, got_k = apply_rope_axes(qi, ki, pos.cuda(), spec, format=fmt, inplace=inplace)
        else:
            got_q, got_k = call(qi, ki, positions=pos.cuda(), inplace=inplace)
        assert got_k is not None and (got_q is qi) == inplace and (got_k is ki) == inplace
        torch.testing.assert_close(got_q.cpu().double(), want_q, rtol=0, atol=2e-6)
        torch.testing.assert_close(got_k.cpu().double(), want_k, rtol=0, atol=2e-6)


@cuda
def test_rotary_decoding_with_equal_axes_on_cuda() -> None:
    """Text tokens while generating: every axis at the same position (the bench found Rotary refusing these on
    CUDA: the equal-axes shortcut handed the multi-axis spec a 1-D row)."""
    spec = CASES["qwen2_vl"][0]
    pos = torch.full((3, 4, 1), 3000, device="cuda") + torch.arange(4, device="cuda")[:, None]
    q = torch.randn(4, 1, 6, spec.head_dim, device="cuda")
    k = torch.randn(4, 1, 2, spec.head_dim, device="cuda")
    rot = Rotary(spec).to("cuda")
    want_q, want_k = apply_rope_axes(q.cpu().double(), k.cpu().double(), pos.cpu(), spec)
    got_q, got_k = rot(q.clone(), k.clone(), positions=pos, inplace=True)
    assert got_k is not None
    torch.testing.assert_close(got_q.cpu().double(), want_q, rtol=0, atol=2e-6)
    torch.testing.assert_close(got_k.cpu().double(), want_k, rtol=0, atol=2e-6)


@cuda
def test_cuda_graph_capture_and_replay_with_new_positions() -> None:
    """Decoding under a CUDA graph (as serving engines run it): captured once, replayed after the positions
    buffer is refilled, the rotation follows the new positions."""
    spec = CASES["qwen3_vl"][0]
    pos = torch.zeros(3, 4, 1, dtype=torch.int64, device="cuda")
    q = torch.zeros(4, 1, 6, spec.head_dim, device="cuda")
    k = torch.zeros(4, 1, 2, spec.head_dim, device="cuda")
    rot = Rotary(spec).to("cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm up: compile, store the launch
            apply_rope_axes(q, k, pos, spec, inplace=True)
            rot(q, k, positions=pos, inplace=True)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        apply_rope_axes(q, k, pos, spec, inplace=True)
        rot(q, k, positions=pos, inplace=True)
    for step in range(3):
        new_pos = torch.randint(0, 2 * L, (3, 4, 1))
        q0, k0 = torch.randn(4, 1, 6, spec.head_dim), torch.randn(4, 1, 2, spec.head_dim)
        pos.copy_(new_pos)
        q.copy_(q0)
        k.copy_(k0)
        graph.replay()
        want_q, want_k = apply_rope_axes(q0.double(), k0.double(), 2 * new_pos, spec)  # rotated twice
        assert want_k is not None
        torch.testing.assert_close(q.cpu().double(), want_q, rtol=0, atol=1e-5, msg=f"step {step}")
        torch.testing.assert_close(k.cpu().double(), want_k, rtol=0, atol=1e-5, msg=f"step {step}")
