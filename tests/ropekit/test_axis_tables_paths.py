"""Multi-axis rotation through its entry points: the paths a call takes and the errors it raises.

The Rotary module and apply_rope_axes read integer positions from the exact caches (no table rebuild), take
the 1-D path when every axis is equal and the C plan after a validated call, each bit-identical to rotating by
the tables axis_tables builds; wrong shapes, dtypes and values are refused naming the argument. The oracle
tests of the tables themselves are in tests/ropekit/test_axis_tables.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from ropekit import RopeSpec, Rotary, apply_rope_tables
from ropekit.axis_tables import apply_rope_axes, axis_tables
from ropekit.kernels import cpu_build
from ropekit.presets_vl import qwen2_vl_spec, qwen3_vl_spec
from ropekit.rotation import axis_plan, cpu_backend


def test_rotary_module_takes_axis_positions_and_matches_function() -> None:
    spec = qwen2_vl_spec(16, 1e4, (2, 3, 3))
    rot = Rotary(spec, max_seq_len=64)
    q, k = torch.randn(2, 7, 4, 16), torch.randn(2, 7, 2, 16)
    pos = torch.randint(0, 200, (3, 2, 7))  # beyond the cache: it grows, still exact
    got = rot(q, k, positions=pos)
    want = apply_rope_axes(q, k, pos, spec)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"n_axes=3"):
        rot(q, k, positions=torch.arange(7))


def test_shape_error_names_the_multi_axis_shapes() -> None:
    """A wrong token count is reported with the axis dimension, as passed: [A, s] / [A, b, s] ([A, t] for thd),
    on the first call, on a call that reuses the remembered positions and through a multi-axis Rotary."""
    spec = qwen2_vl_spec(16, 1e4, (2, 3, 3))
    cases = [
        (torch.randn(1, 5, 2, 16), torch.arange(6).expand(3, 6), "bshd", "(3, 5) or (3, 1, 5)", "(3, 6)"),
        (
            torch.randn(1, 2, 5, 16),
            torch.arange(6).expand(3, 1, 6),
            "bhsd",
            "(3, 5) or (3, 1, 5)",
            "(3, 1, 6)",
        ),
        (
            torch.randn(2, 5, 2, 16),
            torch.arange(5).expand(3, 3, 5),
            "bshd",
            "(3, 5) or (3, 2, 5)",
            "(3, 3, 5)",
        ),
        (torch.randn(5, 2, 16), torch.arange(5).expand(3, 1, 5), "thd", "(3, 5)", "(3, 1, 5)"),
    ]
    for q, pos, fmt, want, got in cases:
        msg = f"positions must have shape {want} for q of shape {tuple(q.shape)}, got {got}"
        with pytest.raises(ValueError) as e:
            apply_rope_axes(q, None, pos, spec, format=fmt)  # type: ignore[arg-type]
        assert str(e.value) == msg
    # axes differ: the first call builds tables and remembers them for the next call with this very tensor
    pos = torch.tensor([[0, 1, 2, 3, 4], [0, 0, 1, 1, 2], [0, 1, 0, 1, 0]])
    apply_rope_axes(torch.randn(1, 5, 2, 16), None, pos, spec)
    q6 = torch.randn(1, 6, 2, 16)
    msg = "positions must have shape (3, 6) or (3, 1, 6) for q of shape (1, 6, 2, 16), got (3, 5)"
    with pytest.raises(ValueError) as e:
        apply_rope_axes(q6, None, pos, spec)
    assert str(e.value) == msg
    with pytest.raises(ValueError) as e:
        Rotary(spec)(q6, None, positions=pos)
    assert str(e.value) == msg
    # Rotary with every axis equal (it rotates by the 1-D row): the message still names the shape given
    with pytest.raises(ValueError) as e:
        Rotary(spec)(q6, None, positions=torch.arange(5).expand(3, 5))
    assert str(e.value) == msg


def test_errors_name_the_argument() -> None:
    spec = qwen2_vl_spec(16, 1e4, (2, 3, 3))
    q = torch.randn(2, 7, 4, 16)
    with pytest.raises(ValueError, match=r"positions must have shape \[n_axes=3"):
        apply_rope_axes(q, None, torch.zeros(2, 2, 7, dtype=torch.int64), spec)
    with pytest.raises(ValueError, match="spec has no axes"):
        apply_rope_axes(q, None, torch.zeros(3, 7, dtype=torch.int64), RopeSpec(16))
    with pytest.raises(ValueError) as e:
        apply_rope_axes(q, None, torch.zeros(3, 5, dtype=torch.int64), spec)
    assert (
        str(e.value)
        == "positions must have shape (3, 7) or (3, 2, 7) for q of shape (2, 7, 4, 16), got (3, 5)"
    )
    with pytest.raises(ValueError, match="float32/float64"):
        apply_rope_axes(q, None, torch.zeros(3, 7, dtype=torch.bfloat16), spec)
    with pytest.raises(ValueError, match="must be finite"):
        apply_rope_axes(q, None, torch.full((3, 7), math.inf), spec)


def test_rotary_module_exact_for_float_and_negative_positions() -> None:
    spec = qwen3_vl_spec(16, 1e4, (4, 2, 2))
    rot = Rotary(spec, max_seq_len=8, cache_limit=64)
    q = torch.randn(1, 5, 2, 16)
    for pos in (
        torch.tensor([[0.5, 1.25, 2.0, 3.0, 1e6 + 0.5]] * 3, dtype=torch.float64),
        torch.tensor([[-3, 0, 2, 5, 7], [1, 1, 1, 1, 1], [100, 0, 0, 0, 0]]),  # negative and beyond the limit
    ):
        got, _ = rot(q, None, positions=pos)
        want, _ = apply_rope_axes(q, None, pos, spec)
        assert torch.equal(got, want)


def test_rotary_module_reads_integer_axis_positions_from_its_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decode path gathers from the module's exact cache; it never rebuilds tables (a regression at
    integration made every call rebuild them, ~10x slower at decode) and stays bit-identical to the function."""
    import sys

    at = sys.modules["ropekit.axis_tables"]  # the package exports a function of the same name
    spec = qwen2_vl_spec(16, 1e4, (2, 3, 3))
    rot = Rotary(spec, max_seq_len=16)
    q = torch.randn(2, 1, 4, 16)
    pos = torch.tensor([[[3000], [7]], [[3001], [9]], [[2999], [8]]])  # decode: beyond the cache, it grows
    want, _ = apply_rope_axes(q, None, pos, spec)

    def refuse(*a: object, **k: object) -> None:
        raise AssertionError("axis_tables rebuilt the tables instead of reading the cache")

    monkeypatch.setattr(at, "axis_tables", refuse)
    got, _ = rot(q, None, positions=pos)
    assert torch.equal(got, want)


def test_apply_rope_axes_reads_integer_positions_from_the_shared_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """apply_rope_axes gathers every band from the exact shared 1-D cache (as apply_rope does for 1-D): no table
    rebuild for integer positions in range, bit-identical to the tables axis_tables builds; float positions and
    negative ones still take the exact builder."""
    import sys

    import ropekit.axis_rotary  # noqa: F401 (loaded, so sys.modules holds it)

    at = sys.modules["ropekit.axis_tables"]
    spec = qwen3_vl_spec(16, 1e4, (4, 2, 2))
    q, k = torch.randn(2, 4, 3, 16), torch.randn(2, 4, 1, 16)
    pos = torch.randint(0, 5000, (3, 2, 4))
    cos, sin = axis_tables(pos, spec)
    want = apply_rope_tables(q, k, cos, sin, spec)
    real = at.rope_tables  # the per-axis builder inside axis_tables: one 1-D table per axis
    calls: list[int] = []

    def counting(*a: object, **kw: object) -> object:
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(at, "rope_tables", counting)
    got = apply_rope_axes(q, k, pos, spec)
    assert calls == [] and torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])  # type: ignore[arg-type]
    apply_rope_axes(q, k, pos - 4000, spec)  # negative positions: the exact builder
    apply_rope_axes(q, k, pos.double() + 0.5, spec)  # continuous positions: the exact builder
    assert len(calls) == 2 * 3  # two builds of three axes


@pytest.mark.parametrize("kind", ["function", "module"])
def test_equal_axes_take_the_one_d_path_bit_identically(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Text tokens and decoding steps have t = h = w: the rotation is then exactly 1-D (the 1-D path and its decode
    fast path are taken), bit-identical to the multi-axis tables axis_tables builds; any unequal row goes back to
    the multi-axis path."""
    import sys

    import ropekit.axis_rotary  # noqa: F401 (loaded, so sys.modules holds it)

    at = sys.modules["ropekit.axis_tables"]
    spec = qwen3_vl_spec(16, 1e4, (4, 2, 2))
    rot = Rotary(spec, max_seq_len=16)
    q, k = torch.randn(4, 1, 3, 16), torch.randn(4, 1, 1, 16)
    pos = (3000 + torch.arange(4)).view(1, 4, 1).expand(3, 4, 1).contiguous()  # a decode step of 4 sequences
    cos, sin = axis_tables(pos, spec)  # the builder, at multi-axis positions
    want = apply_rope_tables(q, k, cos, sin, spec)
    call = (
        (lambda p: apply_rope_axes(q, k, p, spec))
        if kind == "function"
        else (lambda p: rot(q, k, positions=p))
    )
    taken: list[str] = []
    ar = sys.modules["ropekit.axis_rotary"]
    real_fwd, real_gather = ar.rotary_forward_axes, at._gather_bands
    monkeypatch.setattr(ar, "rotary_forward_axes", lambda *a: taken.append("multi") or real_fwd(*a))
    monkeypatch.setattr(at, "_gather_bands", lambda *a: taken.append("multi") or real_gather(*a))
    monkeypatch.setattr(ar, "_gather_bands", lambda *a: taken.append("multi") or real_gather(*a))
    real_planned = cpu_backend.Plan.call_axes
    monkeypatch.setattr(cpu_backend.Plan, "call_axes", lambda *a: taken.append("planned") or real_planned(*a))
    axis_plan._PLANS.clear()  # no plan for this geometry yet: the first call is validated
    got = call(pos)
    assert taken == [] and torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])  # type: ignore[arg-type]
    pos[2, 1, 0] += 1  # one token's w differs: the multi-axis path
    got = call(pos)
    taken_by_call = set(taken)  # before the oracle below, which gathers too
    cos, sin = axis_tables(pos, spec)
    want = apply_rope_tables(q, k, cos, sin, spec)
    # the function's second call takes the plan its first, validated call stored (the C kernel blends the one
    # token's row from its axes' rows, tests/ropekit/rotation/test_axis_plan.py); the module gathers its tables
    expected = {"planned"} if kind == "function" and cpu_build.load() is not None else {"multi"}
    assert taken_by_call == expected and torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "match"),
    [
        ((2, 35, 4, 32), None, r"head_dim|last dimension|rotary_dim"),  # q's head_dim is not the spec's
        ((2, 35, 4, 64), (2, 34, 2, 64), r"k"),  # k has 34 tokens, q 35
        ((2, 35, 4, 64), (1, 35, 2, 64), r"k"),  # k's batch is not q's
        ((2, 35, 4, 64), (2, 35, 2, 128), r"k"),  # k's head_dim is not q's
    ],
)
def test_a_refused_call_is_refused_again_with_nothing_modified(
    q_shape: tuple[int, ...], k_shape: tuple[int, ...] | None, match: str
) -> None:
    """A call refused once is refused every time (the user trial: the C plan of the geometry was stored before q
    and k were checked, so the same bad call went unchecked the second time, rotating in place or reading past q's
    memory), and an in-place call modifies nothing."""
    from ropekit.positions.grid import grid_positions
    from ropekit.presets_vl import rope_vit_axial_spec

    spec, pos = rope_vit_axial_spec(64), grid_positions((5, 7))
    q = torch.randn(q_shape)
    k = None if k_shape is None else torch.randn(k_shape)
    q0, k0 = q.clone(), None if k is None else k.clone()
    for _ in range(3):
        with pytest.raises(ValueError, match=match):
            apply_rope_axes(q, k, pos, spec, inplace=True)
        assert torch.equal(q, q0) and (k is None or torch.equal(k, k0))
