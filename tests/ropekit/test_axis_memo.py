"""Reuse of gathered multi-axis tables across a model's layers (same unchanged positions tensor), checked
against tables rebuilt from scratch by axis_tables."""

from __future__ import annotations

import pytest
import torch

from ropekit import RopeSpec, Rotary, apply_rope_tables
from ropekit.axis_tables import apply_rope_axes, axis_tables
from ropekit.presets_vl import qwen2_vl_spec, qwen3_vl_spec
from ropekit.rotation import axis_plan


def _scratch(p: torch.Tensor, spec: RopeSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Tables built from scratch (exact float64 phases per axis, rounded once), not from any cache: axis_tables'
    float32 result for integer positions is itself a gather from the cache, this is its per-axis builder."""
    cos, sin = axis_tables(p, spec, dtype=torch.float64)
    return cos.float(), sin.float()


def test_rotary_reuses_the_gathered_tables_of_the_same_positions_tensor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model's layers call one Rotary with the same positions tensor: the first call gathers the per-token
    tables, later calls reuse them -- only while it is the same, unchanged tensor. Every result is checked against
    tables built from scratch by axis_tables; an in-place change, another tensor with other values, an
    inference tensor and a new q shape are all rotated correctly."""
    import ropekit.axis_rotary as ar  # Rotary's multi-axis side: its gather from the module's cache

    spec = qwen2_vl_spec(16, 1e4, (2, 3, 3))
    rot = Rotary(spec, max_seq_len=64)
    pos = torch.tensor(
        [[[0, 1, 2, 2, 2, 2, 5]], [[0, 1, 2, 2, 3, 3, 5]], [[0, 1, 2, 3, 2, 3, 5]]]
    )  # [3, 1, 7]
    gathers: list[int] = []
    real = ar._gather_bands
    monkeypatch.setattr(ar, "_gather_bands", lambda *a: gathers.append(1) or real(*a))

    def check(q: torch.Tensor, p: torch.Tensor) -> None:
        got, _ = rot(q, None, positions=p)
        cos, sin = _scratch(p, spec)
        want, _ = apply_rope_tables(q, None, cos, sin, spec)
        assert torch.equal(got, want)

    for _ in range(3):  # three "layers"
        check(torch.randn(1, 7, 2, 16), pos)
    assert len(gathers) == 1
    check(torch.randn(2, 7, 4, 16), pos)  # another batch / head count: same tables, still validated
    assert len(gathers) == 1
    with pytest.raises(ValueError):
        rot(torch.randn(1, 6, 2, 16), None, positions=pos)  # 6 tokens against 7 positions
    pos[2, 0, 6] = 40  # in place: the version counter changes, the tables are gathered again
    check(torch.randn(1, 7, 2, 16), pos)
    assert len(gathers) == 2
    other = pos.clone()
    other[1, 0, 3] = 9
    check(torch.randn(1, 7, 2, 16), other)
    assert len(gathers) == 3
    with torch.inference_mode():
        frozen = pos + 1
        for _ in range(2):
            check(torch.randn(1, 7, 2, 16), frozen)
    assert len(gathers) == 5  # inference tensors have no version counter: never reused


def test_rotary_remembers_equal_axes_only_for_the_same_unchanged_tensor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Decoding: every axis equal, so the 1-D path runs; the equality check (a host sync) runs once per positions
    tensor, and an in-place change that makes the axes differ is noticed (checked against axis_tables)."""
    import sys

    at = sys.modules["ropekit.axis_tables"]
    spec = qwen3_vl_spec(16, 1e4, (4, 2, 2))
    rot = Rotary(spec, max_seq_len=64)
    pos = torch.tensor([[[40], [41]]] * 3)  # [3, b=2, s=1]
    checks: list[int] = []
    real = at.equal_axes_row
    monkeypatch.setattr(at, "equal_axes_row", lambda *a: checks.append(1) or real(*a))

    def check(p: torch.Tensor) -> None:
        q = torch.randn(2, 1, 4, 16)
        got, _ = rot(q, None, positions=p)
        cos, sin = _scratch(p, spec)
        assert torch.equal(got, apply_rope_tables(q, None, cos, sin, spec)[0])

    for _ in range(3):
        check(pos)
    assert len(checks) == 1
    pos[1, 0, 0] = 7  # now the axes differ
    check(pos)
    assert len(checks) == 2


def test_apply_rope_axes_reuses_the_tables_of_the_same_positions_tensor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """apply_rope_axes called by every layer with one positions tensor gathers once; another spec, a float64 q, an
    in-place change or another tensor gather again -- every result checked against tables from axis_tables."""
    import sys

    at = sys.modules["ropekit.axis_tables"]

    spec = qwen2_vl_spec(16, 1e4, (2, 3, 3))
    other_spec = qwen3_vl_spec(16, 1e4, (4, 2, 2))
    pos = torch.tensor([[0, 1, 2, 2, 2, 2, 5], [0, 1, 2, 2, 3, 3, 5], [0, 1, 2, 3, 2, 3, 5]])  # [3, 7]
    gathers: list[int] = []
    real = at._gather_bands
    monkeypatch.setattr(at, "_gather_bands", lambda *a: gathers.append(1) or real(*a))
    # the memory serves the calls the planned CPU path (rotation/axis_plan.py) does not take: CUDA, no C compiler
    monkeypatch.setattr(axis_plan, "run_planned", lambda *a: None)

    def check(p: torch.Tensor, sp: RopeSpec = spec, dtype: torch.dtype = torch.float32) -> None:
        q, k = torch.randn(2, 7, 4, 16, dtype=dtype), torch.randn(2, 7, 2, 16, dtype=dtype)
        got = apply_rope_axes(q, k, p, sp)
        cos, sin = _scratch(p, sp) if dtype == torch.float32 else axis_tables(p, sp, dtype=dtype)
        want = apply_rope_tables(q, k, cos, sin, sp)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])  # type: ignore[arg-type]

    for _ in range(3):
        check(pos)
    assert len(gathers) == 1
    check(pos, other_spec)
    assert len(gathers) == 2
    check(pos, other_spec, torch.float64)  # float64 q: exact float64 tables, not the float32 cache
    check(pos, other_spec)
    assert len(gathers) == 3
    pos[1, 4] = 6
    check(pos, other_spec)
    assert len(gathers) == 4
    with pytest.raises(ValueError, match="format"):
        apply_rope_axes(torch.randn(2, 7, 4, 16), None, pos, other_spec, format="nope")  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float64])
def test_equal_axes_row_compares_every_entry(dtype: torch.dtype) -> None:
    """equal_axes_row against Python's own comparison of the nested lists: equal axes give row 0 (also for a
    non-contiguous view), one differing entry anywhere (first, middle, last) gives None."""
    import sys

    at = sys.modules["ropekit.axis_tables"]
    spec = qwen2_vl_spec()
    base = (torch.arange(24, dtype=torch.int64).reshape(1, 4, 6) * 7 + 3).to(dtype)
    pos = base.expand(3, 4, 6).clone()
    row = at.equal_axes_row(pos, spec)
    assert row is not None and row.tolist() == pos[0].tolist()
    view = pos.transpose(1, 2)  # non-contiguous [3, 6, 4]
    assert at.equal_axes_row(view, spec) is not None
    for a, b, s in ((1, 0, 0), (2, 1, 3), (2, 3, 5), (1, 3, 5)):
        bad = pos.clone()
        bad[a, b, s] += 1
        lists = bad.tolist()
        assert (lists[1] == lists[0] and lists[2] == lists[0]) is False
        assert at.equal_axes_row(bad, spec) is None, (a, b, s)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float64])
@pytest.mark.parametrize("write", ["numpy", "data"])
def test_writes_that_skip_the_version_counter_are_seen(dtype: torch.dtype, write: str) -> None:
    """A positions tensor refilled through memory it shares (a NumPy buffer behind ``torch.from_numpy``, or
    ``.data``) keeps its version counter: every memory (Rotary's tables and equal-axes row, apply_rope_axes' last
    call) still sees the new values. Each step is checked against tables built from scratch for a fresh tensor."""
    spec = qwen2_vl_spec(16, 1e4, (2, 3, 3))
    buf = torch.zeros(3, 1, 7, dtype=dtype).numpy()
    pos = torch.from_numpy(buf)
    rot = Rotary(spec, max_seq_len=256)
    q = torch.randn(1, 7, 2, 16, dtype=torch.float32)
    steps = [
        [[0, 1, 2, 3, 4, 5, 6]] * 3,  # every axis equal: the equal-row memory
        [[0, 1, 2, 2, 2, 2, 5], [0, 1, 2, 2, 3, 3, 5], [0, 1, 2, 3, 2, 3, 5]],
        [[9, 10, 11, 11, 11, 11, 14], [9, 10, 11, 11, 12, 12, 14], [9, 10, 11, 12, 11, 12, 14]],
        [[20, 21, 22, 23, 24, 25, 26]] * 3,
    ]
    version = pos._version
    for rows in steps:
        new = torch.tensor(rows, dtype=dtype).unsqueeze(1)
        if write == "numpy":
            buf[...] = new.numpy()
        else:
            pos.data.copy_(new)
        assert pos._version == version  # the point of the test: the counter did not move
        cos, sin = _scratch(new.clone(), spec)
        want, _ = apply_rope_tables(q, None, cos, sin, spec)
        for _ in range(2):  # two "layers" each: the second reads the memories
            assert torch.allclose(rot(q, None, positions=pos)[0], want, rtol=0, atol=1e-6)
            assert torch.allclose(apply_rope_axes(q, None, pos, spec)[0], want, rtol=0, atol=1e-6)
