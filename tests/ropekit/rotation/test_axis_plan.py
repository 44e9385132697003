# SPDX-License-Identifier: MIT
"""The planned multi-axis CPU path (``ropekit.rotation.axis_plan``: one C call, each token's row read from the exact
1-D cache, or blended from its axes' rows) against two oracles: the tables path of the first, validated call
(:func:`ropekit.axis_tables.axis_tables` tables, built per axis and selected, then
:func:`ropekit.apply_rope_tables`) bit for bit, and a float64 rotation by angles written from the frequencies.

Every test checks that the planned C call was actually taken (a spy on ``Plan.call_axes``), so a silent fallback
to the tables path cannot pass for the planned path."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator

import pytest
import torch

from ropekit import RopeSpec, apply_rope_tables
from ropekit.axes import AxisMap
from ropekit.axis_tables import _one_axis, apply_rope_axes, axis_tables
from ropekit.kernels import cpu_build
from ropekit.rotation import axis_plan, cpu_backend
from ropekit.table_cache import shared_cache

pytestmark = pytest.mark.skipif(cpu_build.load() is None, reason="needs the C kernel (a C compiler)")

MAPS = {
    "contiguous": AxisMap.contiguous((2, 3, 3)),
    "interleaved": AxisMap.interleaved((4, 2, 2)),
    "explicit 4 axes": AxisMap("explicit", (3, 0, 1, 2, 2, 1, 0, 3), ("a", "b", "c", "d")),
    "2-d": AxisMap.halves(8, ("row", "col")),
}
SHAPES = {
    "bshd": lambda b, s, h: (b, s, h, 16),
    "bhsd": lambda b, s, h: (b, h, s, 16),
    "thd": lambda b, s, h: (s, h, 16),
}


@pytest.fixture
def codes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """What each planned C call returned: "ok" (rotated), or the kernel's code (nothing written)."""
    seen: list[object] = []
    real = cpu_backend.Plan.call_axes

    def spy(self: cpu_backend.Plan, *a: object) -> object:
        got = real(self, *a)  # type: ignore[arg-type]
        seen.append(got if isinstance(got, int) else "ok")
        return got

    monkeypatch.setattr(cpu_backend.Plan, "call_axes", spy)
    axis_plan._PLANS.clear()
    yield seen
    axis_plan._PLANS.clear()


def _positions(a: int, b: int, s: int, fmt: str, start: int = 3) -> torch.Tensor:
    """[A, b, s] ([A, s] for thd): text tokens (every axis at one position) around a block whose axes differ."""
    g = torch.Generator().manual_seed(a * 100 + s)
    pos = (start + torch.arange(s)).expand(a, b, s).clone()
    lo, hi = s // 4, s // 4 + max(1, s // 2)
    pos[:, :, lo:hi] = torch.randint(0, 4 * s + 50, (a, b, hi - lo), generator=g)
    return pos[:, 0].contiguous() if fmt == "thd" else pos


def _tables_path(q, k, pos, spec, fmt):  # type: ignore[no-untyped-def]
    cos, sin = axis_tables(pos, spec)
    return apply_rope_tables(q.clone(), None if k is None else k.clone(), cos, sin, spec, format=fmt)


def _same(got, want) -> bool:  # type: ignore[no-untyped-def]
    return all((g is None and w is None) or torch.equal(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("fmt", sorted(SHAPES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", sorted(MAPS))
def test_planned_call_is_bit_identical_to_the_tables_path(
    name: str, dtype: torch.dtype, fmt: str, inplace: bool, codes: list[object]
) -> None:
    spec = RopeSpec(head_dim=16, base=1e4, axes=MAPS[name])
    a = MAPS[name].n_axes
    b, s = (1, 40) if fmt == "thd" else (2, 40)
    g = torch.Generator().manual_seed(7)
    q = torch.randn(*SHAPES[fmt](b, s, 4), generator=g).to(dtype)
    k = torch.randn(*SHAPES[fmt](b, s, 2), generator=g).to(dtype)
    for call in range(3):  # the first call is validated and stores the plan; the next two take it
        pos = _positions(a, b, s, fmt, start=3 + 1000 * call)  # new values each call: the plan reads them
        want = _tables_path(q, k, pos, spec, fmt)
        qi, ki = q.clone(), k.clone()
        got = apply_rope_axes(qi, ki, pos, spec, format=fmt, inplace=inplace)
        assert _same(got, want), call
        if inplace:
            assert got[0] is qi and got[1] is ki
        else:
            assert torch.equal(qi, q) and torch.equal(ki, k)  # inputs untouched
    assert codes == ["ok", "ok"]


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_planned_call_matches_float64_rotation_by_angles(layout: str, codes: list[object]) -> None:
    """q rotated pair by pair by angle pos[slot(j)] * theta_j, theta_j = base^(-2j/d), computed in float64."""
    m = MAPS["interleaved"]
    spec = RopeSpec(head_dim=16, base=1e4, axes=m, layout=layout)
    pos = _positions(3, 1, 64, "bshd", start=90_000)[:, 0]  # [A, s], large positions: exact phases matter
    q = torch.randn(1, 64, 2, 16)
    # the shared rows cover 90000+ (one far call alone no longer builds every row below it: a window serves it)
    shared_cache(_one_axis(spec), torch.device("cpu")).grow(1 << 17)  # type: ignore[union-attr]
    apply_rope_axes(q, None, pos, spec)  # stores the plan
    got, _ = apply_rope_axes(q, None, pos, spec)
    assert codes == ["ok"]
    theta = [1e4 ** (-2 * j / 16) for j in range(8)]
    ang = torch.tensor(
        [[pos[m.slots[j], t].item() * theta[j] for j in range(8)] for t in range(64)], dtype=torch.float64
    )
    x = q.double()
    i1, i2 = (
        (list(range(8)), list(range(8, 16)))
        if layout == "half"
        else (list(range(0, 16, 2)), list(range(1, 16, 2)))
    )
    c, s = torch.cos(ang)[None, :, None], torch.sin(ang)[None, :, None]
    want = x.clone()
    want[..., i1] = x[..., i1] * c - x[..., i2] * s
    want[..., i2] = x[..., i2] * c + x[..., i1] * s
    torch.testing.assert_close(got.double(), want, atol=3e-6, rtol=0)


@pytest.mark.parametrize(
    "tokens", [20, 700]
)  # 20 x 16 floats of rows on the kernel's stack; 700 x 16 a scratch
def test_stack_and_scratch_rows(tokens: int, codes: list[object]) -> None:
    spec = RopeSpec(head_dim=16, base=1e4, axes=MAPS["2-d"])
    assert (tokens * 16 <= axis_plan.STACK_FLOATS) == (tokens == 20)
    pos = _positions(2, 1, tokens, "bshd")
    q, k = torch.randn(1, tokens, 3, 16), torch.randn(1, tokens, 3, 16)
    apply_rope_axes(q, k, pos, spec)
    assert _same(apply_rope_axes(q, k, pos, spec), _tables_path(q, k, pos, spec, "bshd"))
    assert codes == ["ok"]


def test_positions_just_past_the_cache_grow_it_far_and_negative_ones_take_the_exact_path(
    codes: list[object],
) -> None:
    spec = RopeSpec(head_dim=16, base=1e4, axes=MAPS["contiguous"])
    q = torch.randn(1, 30, 2, 16)
    pos = _positions(3, 1, 30, "bshd")
    apply_rope_axes(q, None, pos, spec)
    near = (
        pos + 5_000
    )  # past the shared cache's first 4096 rows: it grows (by doubling), then the kernel reads
    assert _same(apply_rope_axes(q, None, near, spec), _tables_path(q, None, near, spec, "bshd"))
    far = pos + 50_000  # far past them: not grown for 30 tokens, the exact tables path (a window of far rows)
    assert _same(apply_rope_axes(q, None, far, spec), _tables_path(q, None, far, spec, "bshd"))
    neg = pos - 60  # negative positions: nothing written by the kernel, the exact tables instead
    assert _same(apply_rope_axes(q, None, neg, spec), _tables_path(q, None, neg, spec, "bshd"))
    assert codes[0] > 5_000 and codes[1] == "ok" and codes[2] > 50_000 and codes[3:] == [-1]  # type: ignore[operator]


def test_kernel_limits_fall_back_exactly(codes: list[object]) -> None:
    """Nine axes (the kernel holds eight): never planned; the tables path rotates, exactly."""
    m = AxisMap("explicit", tuple(range(9)) + (0,) * 7, tuple(f"a{i}" for i in range(9)))
    spec = RopeSpec(head_dim=32, base=1e4, axes=m)
    pos = torch.randint(0, 500, (9, 1, 12))
    q = torch.randn(1, 12, 2, 32)
    apply_rope_axes(q, None, pos, spec)
    assert _same(apply_rope_axes(q, None, pos, spec), _tables_path(q, None, pos, spec, "bshd"))
    assert codes == [] and spec.axes.n_axes > axis_plan.MAX_AXES  # type: ignore[union-attr]


def test_autograd_torch_backend_and_strided_positions_are_never_planned(codes: list[object]) -> None:
    spec = RopeSpec(head_dim=16, base=1e4, axes=MAPS["interleaved"])
    pos = _positions(3, 2, 24, "bshd")
    q, k = torch.randn(2, 24, 2, 16), torch.randn(2, 24, 1, 16)
    apply_rope_axes(q, k, pos, spec)  # a plan for this geometry exists from here on
    qg = q.clone().requires_grad_(True)
    out, _ = apply_rope_axes(qg, k, pos, spec)
    out.sum().backward()
    cos, sin = axis_tables(pos, spec)
    qr = q.clone().requires_grad_(True)
    apply_rope_tables(qr, None, cos, sin, spec)[0].sum().backward()
    assert qg.grad is not None and torch.equal(qg.grad, qr.grad)  # type: ignore[arg-type]
    assert _same(apply_rope_axes(q, k, pos, spec, backend="torch"), _tables_path(q, k, pos, spec, "bshd"))
    strided = pos.transpose(1, 2).contiguous().transpose(1, 2)  # same values, other strides
    assert _same(apply_rope_axes(q, k, strided, spec), _tables_path(q, k, pos, spec, "bshd"))
    assert codes == []


def test_concurrent_callers_get_their_own_rows(codes: list[object]) -> None:
    """Four Python threads on one plan (ctypes releases the GIL during the call), each with its own positions:
    blended rows are per call (scratch or stack), so no thread reads another's."""
    spec = RopeSpec(head_dim=16, base=1e4, axes=MAPS["contiguous"])
    q = torch.randn(1, 900, 4, 16)
    apply_rope_axes(q, None, _positions(3, 1, 900, "bshd"), spec)
    jobs = [_positions(3, 1, 900, "bshd", start=1 + 7 * i) + 13 * i for i in range(4)]
    wants = [_tables_path(q, None, p, spec, "bshd")[0] for p in jobs]
    bad: list[int] = []

    def work(i: int) -> None:
        for _ in range(30):
            got, _ = apply_rope_axes(q, None, jobs[i], spec)
            if not torch.equal(got, wants[i]):
                bad.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == [] and codes.count("ok") == 120 and math.isfinite(float(q.sum()))


@pytest.mark.parametrize("fmt", ["bshd", "bhsd"])
def test_positions_shared_by_the_batch(fmt: str, codes: list[object]) -> None:
    """Positions [A, s] broadcast over a batch of 2: the plan reads token s's positions for every sequence."""
    spec = RopeSpec(head_dim=16, base=1e4, axes=MAPS["interleaved"])
    g = torch.Generator().manual_seed(11)
    q = torch.randn(*SHAPES[fmt](2, 9, 4), generator=g)
    k = torch.randn(*SHAPES[fmt](2, 9, 2), generator=g)
    for call in range(3):
        pos = torch.randint(0, 500, (3, 9), generator=g)
        pos[:, :3] = pos[0, :3]  # three text tokens, then tokens whose axes differ
        assert _same(apply_rope_axes(q, k, pos, spec, format=fmt), _tables_path(q, k, pos, spec, fmt)), call
    assert codes == ["ok", "ok"]
