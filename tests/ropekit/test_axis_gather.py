# SPDX-License-Identifier: MIT
"""The multi-axis table gather (``ropekit.axis_gather.gather_bands``: C on the CPU, ``index_select`` elsewhere) against
an independent oracle: entry (t, j) is the exact 1-D cache row at axis ``slots[j]``'s position of token t, read
with plain Python indexing; and against :func:`ropekit.axis_tables` (tables built per axis, then selected)."""

from __future__ import annotations

import sys

import pytest
import torch

from ropekit.axes import AxisMap
from ropekit.axis_tables import axis_tables
from ropekit.presets_vl import qwen2_vl_spec
from ropekit.spec import RopeSpec
from ropekit.table_cache import TableCache

at = sys.modules["ropekit.axis_tables"]  # the package exports a function of the same name
import ropekit.axis_gather as ag

MAPS = {
    "contiguous": AxisMap.contiguous((2, 3, 3)),
    "interleaved": AxisMap.interleaved((4, 2, 2)),
    "lta": AxisMap.lta((2, 3, 3)),
    "explicit 4 axes": AxisMap("explicit", (3, 0, 1, 2, 2, 1, 0, 3), ("a", "b", "c", "d")),
    "2-d": AxisMap.halves(8, ("row", "col")),
}


def _spec(m: AxisMap) -> RopeSpec:
    return RopeSpec(head_dim=16, base=1e4, axes=m)


def _oracle(cache: TableCache, pos: torch.Tensor, spec: RopeSpec) -> tuple[torch.Tensor, torch.Tensor]:
    assert spec.axes is not None
    flat = pos.reshape(pos.shape[0], -1).tolist()
    n = spec.n_bands
    out = torch.empty(2, len(flat[0]), n)
    for t in range(len(flat[0])):
        for j, a in enumerate(spec.axes.slots):
            out[:, t, j] = cache.rows[flat[a][t], :, j]  # rows [L, 2, n]: (cos, sin) of one position
    shape = (*pos.shape[1:], n)
    return out[0].view(shape), out[1].view(shape)


@pytest.mark.parametrize("path", ["c", "torch"])
@pytest.mark.parametrize("name", sorted(MAPS))
def test_gather_reads_each_band_at_its_axis_position(
    name: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if path == "torch":
        monkeypatch.setattr(ag, "_gather_c", lambda *a: False)  # as without a C compiler
    spec = _spec(MAPS[name])
    a = spec.axes.n_axes  # type: ignore[union-attr]
    cache = TableCache(at._one_axis(spec), torch.device("cpu"), 64, 1 << 12)
    pos = torch.randint(0, 300, (a, 2, 5))  # past the cache's 64 rows: it grows, then reads
    got = ag.gather_bands(cache, pos, spec)
    assert got is not None and cache.length >= 300
    want = _oracle(cache, pos, spec)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    # the exact per-axis builder (float64 tables per axis, selected, rounded once to float32 here; axis_tables'
    # float32 result for integer positions is this gather itself): the same values bit for bit
    built = [t.float() for t in axis_tables(pos, spec, dtype=torch.float64)]
    assert torch.equal(got[0], built[0]) and torch.equal(got[1], built[1])
    public = axis_tables(pos, spec)
    assert torch.equal(public[0], built[0]) and torch.equal(public[1], built[1])
    assert got[0].is_contiguous() and got[0].dtype == torch.float32


@pytest.mark.parametrize("path", ["c", "torch"])
def test_gather_refuses_what_the_cache_cannot_serve(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative positions and positions past the cache's limit give None (the caller then computes exact tables),
    never a clamped or wrapped row; an empty positions tensor gives empty tables."""
    if path == "torch":
        monkeypatch.setattr(ag, "_gather_c", lambda *a: False)
    spec = _spec(MAPS["contiguous"])
    cache = TableCache(at._one_axis(spec), torch.device("cpu"), 16, 100)
    ok = torch.tensor([[1, 2], [3, 4], [5, 6]])
    assert ag.gather_bands(cache, ok, spec) is not None
    assert ag.gather_bands(cache, ok - 2, spec) is None
    assert ag.gather_bands(cache, ok + 95, spec) is None  # 101 >= limit 100
    assert cache.length <= 100
    empty = ag.gather_bands(cache, torch.zeros(3, 0, dtype=torch.int64), spec)
    assert empty is not None and empty[0].shape == (0, spec.n_bands)


def test_c_gather_is_used_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the kernel built, the CPU gather is the C pass: the torch fallback (which alone reads the band
    offsets) is not taken."""
    from ropekit.kernels import cpu_build

    if cpu_build.load() is None:
        pytest.skip("no C compiler")
    spec = _spec(MAPS["interleaved"])
    cache = TableCache(at._one_axis(spec), torch.device("cpu"), 64, 1 << 12)

    def refuse(*a: object) -> None:
        raise AssertionError("the torch fallback ran")

    monkeypatch.setattr(ag, "_band_offsets", refuse)
    pos = torch.randint(0, 60, (3, 7))
    got = ag.gather_bands(cache, pos, spec)
    assert got is not None and torch.equal(got[0], _oracle(cache, pos, spec)[0])


@pytest.mark.parametrize("name", ["contiguous", "interleaved", "explicit 4 axes"])
def test_c_gather_split_over_threads_is_exact(name: str) -> None:
    """A gather large enough for two threads (9,003 tokens: chunks of 256 that do not divide it) reads every entry
    at its axis's position: compared with advanced indexing of the cache rows, band by band."""
    from ropekit.rotation.cpu_backend import threads_for

    spec = _spec(MAPS[name])
    assert spec.axes is not None
    a, n = spec.axes.n_axes, spec.n_bands
    cache = TableCache(at._one_axis(spec), torch.device("cpu"), 4096, 1 << 14)
    pos = torch.randint(0, 4096, (a, 3, 3001), generator=torch.Generator().manual_seed(0))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert threads_for(3 * 3001 * n * 2 * (a + 1)) == 2
        got = ag.gather_bands(cache, pos, spec)
    finally:
        torch.set_num_threads(threads)
    assert got is not None
    flat = pos.reshape(a, -1)
    for j, axis in enumerate(spec.axes.slots):
        rows = cache.rows[flat[axis], :, j]  # [N, 2]: (cos, sin) of band j at its axis's positions
        assert torch.equal(got[0].reshape(-1, n)[:, j], rows[:, 0]), (name, j)
        assert torch.equal(got[1].reshape(-1, n)[:, j], rows[:, 1]), (name, j)


def test_public_axis_tables_gathers_integer_positions(monkeypatch: pytest.MonkeyPatch) -> None:
    """ropekit.axis_tables (what users and the patched VL rotaries call) reads integer positions from the exact
    cache in one gather; float positions, float64 tables and positions past the cache's limit take the per-axis
    builder. Every result equals the per-axis float64 builder rounded once to float32."""
    spec = qwen2_vl_spec(16, 1e4, (2, 3, 3))
    gathers: list[int] = []
    real = at._gather_bands
    monkeypatch.setattr(at, "_gather_bands", lambda *a: gathers.append(1) or real(*a))
    cases = [
        (torch.randint(0, 5000, (3, 2, 9)), 1),
        (torch.randint(0, 5000, (3, 2, 9)).double() + 0.5, 0),
        (torch.tensor([[2**40], [3], [4]]), 1),  # past the cache's limit: the gather declines, the builder runs
    ]
    for pos, n in cases:
        gathers.clear()
        got = axis_tables(pos, spec)
        assert len(gathers) == n
        want = [t.float() for t in axis_tables(pos, spec, dtype=torch.float64)]
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
