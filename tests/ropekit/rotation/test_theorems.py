"""Seed 004's theorems as property tests, against the literal block-diagonal float64 reference (section 10.3)."""

from __future__ import annotations

import itertools
import math

import torch
from hypothesis import given
from hypothesis import strategies as st

from ropekit import RopeSpec, apply_rope
from ropekit.rotation.reference import rotation_matrix
from tests.oracles import TOL, atomic_score, reference_rope, theta, to_interleaved

DTYPES = [torch.float64, torch.float32, torch.bfloat16, torch.float16]


@st.composite
def specs(draw: st.DrawFn, max_head_dim: int = 24, layout: str | None = None) -> RopeSpec:
    head_dim = 2 * draw(st.integers(1, max_head_dim // 2))
    rotary_dim = 2 * draw(st.integers(1, head_dim // 2))
    base = 10 ** draw(st.floats(0.2, 6.5))
    n = rotary_dim // 2
    p = draw(st.sampled_from([1.0, 1.0, 0.75, 0.5]))
    if math.floor(p * n + 1e-9) == 0:
        p = 1.0
    lay = layout or draw(st.sampled_from(["half", "interleaved"]))
    return RopeSpec(head_dim=head_dim, base=base, rotary_dim=rotary_dim, layout=lay, p=p)


positions_int = st.integers(-(10**5), 2**24)
positions_any = st.one_of(positions_int, st.floats(-1e5, 1e6, allow_nan=False, allow_infinity=False))


def _vec(d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(d, generator=g, dtype=torch.float64) * 2 - 1  # unit scale


def _rot(x: torch.Tensor, pos: float, spec: RopeSpec) -> torch.Tensor:
    """Rotate one [d] vector at one position with ropekit (float64)."""
    ptensor = torch.tensor([pos], dtype=torch.float64 if isinstance(pos, float) else torch.int64)
    out, _ = apply_rope(x.view(1, 1, 1, -1), None, ptensor, spec)
    return out.view(-1)


@given(
    spec=specs(),
    fmt=st.sampled_from(["bshd", "bhsd", "thd"]),
    dtype=st.sampled_from(DTYPES),
    batch=st.integers(1, 2),
    seq=st.integers(1, 5),
    heads=st.tuples(st.integers(1, 4), st.integers(1, 2)),
    per_row=st.booleans(),
    data=st.data(),
)
def test_matches_block_diagonal_reference(spec, fmt, dtype, batch, seq, heads, per_row, data) -> None:
    """apply_rope equals R_{Theta,p} x for every token, GQA head counts, every format and dtype."""
    hq, hk = heads[0] * heads[1], heads[1]
    if fmt == "thd":
        batch, per_row = 1, False
    pos_list = data.draw(st.lists(positions_any, min_size=batch * seq, max_size=batch * seq))
    pos = torch.tensor(
        pos_list, dtype=torch.float64 if any(isinstance(v, float) for v in pos_list) else torch.int64
    )
    pos = pos.view(batch, seq) if per_row else pos[:seq]
    shape = {
        "bshd": (batch, seq, hq, spec.head_dim),
        "bhsd": (batch, hq, seq, spec.head_dim),
        "thd": (seq, hq, spec.head_dim),
    }
    kshape = list(shape[fmt])
    kshape[-2 if fmt != "bhsd" else 1] = hk
    q = (torch.rand(shape[fmt], dtype=torch.float64) * 2 - 1).to(dtype)
    k = (torch.rand(kshape, dtype=torch.float64) * 2 - 1).to(dtype)
    qr, kr = apply_rope(q, k, pos, spec, format=fmt)
    # float64: both sides round the angle p * theta (|error| <= |p| 2^-53 each), so allow that on top.
    tol = TOL[dtype] + (4 * float(pos.abs().max()) * 2.0**-53 if dtype == torch.float64 else 0.0)
    assert qr.dtype == dtype and kr.dtype == dtype and qr.shape == q.shape and kr.shape == k.shape
    torch.testing.assert_close(qr.double(), reference_rope(q, pos, spec, format=fmt), rtol=0, atol=tol)
    torch.testing.assert_close(kr.double(), reference_rope(k, pos, spec, format=fmt), rtol=0, atol=tol)


@given(spec=specs(), p=positions_any, m=positions_any, seed=st.integers(0, 2**16))
def test_relative_displacement_theorem_13_1(spec: RopeSpec, p: float, m: float, seed: int) -> None:
    """<R_p q, R_m k> = <q, R_{m-p} k> = sum_i a_i cos(D theta_i) + b_i sin(D theta_i)."""
    q, k = _vec(spec.head_dim, seed), _vec(spec.head_dim, seed + 1)
    lhs = float(_rot(q, p, spec) @ _rot(k, m, spec))
    rhs = float(q @ _rot(k, m - p, spec))
    atomic = atomic_score(q, k, p, m, spec)
    scale = (
        spec.head_dim * 1e-9 * (1 + abs(p) + abs(m)) ** 0.5
    )  # float64 angle rounding grows with |position|
    assert abs(lhs - rhs) < 1e-9 + scale
    assert abs(lhs - atomic) < 1e-9 + scale


@given(spec=specs(), pos=positions_any, dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_orthogonality_theorem_13_4(spec: RopeSpec, pos: float, dtype: torch.dtype, seed: int) -> None:
    """||R_p x|| = ||x|| and <R_p x, R_p y> = <x, y> (same position)."""
    x, y = _vec(spec.head_dim, seed).to(dtype), _vec(spec.head_dim, seed + 7).to(dtype)
    rx, ry = _rot(x, pos, spec).double(), _rot(y, pos, spec).double()
    x64, y64 = x.double(), y.double()
    tol = TOL[dtype] * spec.head_dim * 2
    assert abs(float(rx.norm() - x64.norm())) < tol
    assert abs(float(rx @ ry - x64 @ y64)) < tol


@given(spec=specs(max_head_dim=12), a=positions_int, b=positions_int)
def test_group_law_on_matrices(spec: RopeSpec, a: int, b: int) -> None:
    """R(a)^T R(b) = R(b - a) and R(a)^T R(a) = I for the literal block-diagonal matrices (lemma 12.1)."""
    ra, rb = rotation_matrix(spec, a), rotation_matrix(spec, b)
    torch.testing.assert_close(ra.T @ rb, rotation_matrix(spec, b - a), rtol=0, atol=1e-8)
    torch.testing.assert_close(ra.T @ ra, torch.eye(spec.head_dim, dtype=torch.float64), rtol=0, atol=1e-12)


@given(spec=specs(), a=positions_int, b=positions_int, seed=st.integers(0, 2**16))
def test_group_law_through_apply_rope(spec: RopeSpec, a: int, b: int, seed: int) -> None:
    """Rotating by b then by -a equals rotating by b - a: R(a)^T = R(-a) composes with R(b)."""
    x = _vec(spec.head_dim, seed)
    torch.testing.assert_close(_rot(_rot(x, b, spec), -a, spec), _rot(x, b - a, spec), rtol=0, atol=1e-8)


@given(spec=specs(), p=positions_any, m=positions_any, seed=st.integers(0, 2**16))
def test_complex_form_note_10_4(spec: RopeSpec, p: float, m: float, seed: int) -> None:
    """With z_i = q_2i + i q_2i+1 and w_i = k_2i + i k_2i+1 the score is sum_i Re(z_i conj(w_i) e^{-i D theta_i}).

    Note 10.4 prints e^{+i D theta_i}; expanding z conj(w) = a_i + i b_i shows that the +sign gives
    a cos - b sin, contradicting Theorem 13.1 (a cos + b sin), so the seed's sign holds with D = p - m instead.
    Both statements are checked.
    """
    q, k = _vec(spec.head_dim, seed), _vec(spec.head_dim, seed + 3)
    qi, ki = to_interleaved(q, spec), to_interleaved(k, spec)
    r = int(spec.rotary_dim)
    z = torch.complex(qi[0:r:2], qi[1:r:2])
    w = torch.complex(ki[0:r:2], ki[1:r:2])
    th = torch.tensor(theta(spec), dtype=torch.float64)
    passthrough = float(qi[r:] @ ki[r:])
    score = float(_rot(q, p, spec) @ _rot(k, m, spec))
    minus = float(torch.real(z * w.conj() * torch.exp(-1j * (m - p) * th)).sum()) + passthrough
    seed_form_swapped = float(torch.real(z * w.conj() * torch.exp(1j * (p - m) * th)).sum()) + passthrough
    tol = 1e-9 + spec.head_dim * 1e-9 * (1 + abs(p) + abs(m)) ** 0.5
    assert abs(score - minus) < tol
    assert abs(score - seed_form_swapped) < tol


@given(
    spec=specs(layout="half"), pos=st.lists(positions_any, min_size=1, max_size=6), seed=st.integers(0, 2**16)
)
def test_layout_equivalence(spec: RopeSpec, pos: list[float], seed: int) -> None:
    """half and interleaved agree up to the channel permutation."""
    inter = RopeSpec(
        spec.head_dim, base=spec.base, rotary_dim=spec.rotary_dim, layout="interleaved", p=spec.p
    )
    s = len(pos)
    ptensor = torch.tensor(pos, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    x_half = torch.randn(2, s, 3, spec.head_dim, dtype=torch.float64, generator=g)
    rot_half, _ = apply_rope(x_half, None, ptensor, spec)
    rot_inter, _ = apply_rope(to_interleaved(x_half, spec), None, ptensor, inter)
    torch.testing.assert_close(to_interleaved(rot_half, spec), rot_inter, rtol=0, atol=1e-12)


@given(spec=specs(), seed=st.integers(0, 2**16))
def test_formats_agree(spec: RopeSpec, seed: int) -> None:
    """bshd, bhsd and thd are the same rotation of the same tokens."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 7, 3, spec.head_dim, dtype=torch.float64, generator=g)
    pos = torch.randint(0, 10**6, (7,), generator=g)
    a, _ = apply_rope(x, None, pos, spec, format="bshd")
    b, _ = apply_rope(x.transpose(1, 2), None, pos, spec, format="bhsd")
    c, _ = apply_rope(x[0], None, pos, spec, format="thd")
    torch.testing.assert_close(b.transpose(1, 2), a, rtol=0, atol=0)
    torch.testing.assert_close(c, a[0], rtol=0, atol=0)


def test_multi_scale_theorem_13_2_periods_span_orders_of_magnitude() -> None:
    """Band periods 2*pi/theta_i span base^((r-2)/r): d 128, base 1e4 -> 6.28 to ~5.4e4 tokens."""
    spec = RopeSpec(head_dim=128)
    periods = [2 * math.pi / t for t in spec.inv_freq(dtype=torch.float64).tolist()]
    assert math.isclose(periods[0], 2 * math.pi)
    assert math.isclose(periods[-1], 2 * math.pi * 10_000 ** (126 / 128), rel_tol=1e-12)
    assert all(b > a for a, b in itertools.pairwise(periods))
