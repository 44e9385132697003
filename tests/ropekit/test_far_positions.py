"""Far integer positions (seconds of a day, a resumed offset): a call at position p never builds the cache's rows
0 .. p (2^18 rows: seconds and ~640 MB on the first call, was the case); they are read from a bounded window of
far positions or computed for that call alone, and stay exact. Oracles: cos/sin written from the formula in
float64 (one Python float per entry) and the float64 reference rotation (tests.oracles)."""

from __future__ import annotations

import pytest
import torch

import ropekit.table_cache as tc
from ropekit import RopeSpec, Rotary, apply_rope, rope_tables
from ropekit.table_cache import TableCache, shared_cache
from tests.oracles import reference_rope
from tests.ropekit.test_table_cache import _exact_tables  # cos/sin from the formula, float64

CPU = torch.device("cpu")


def _spec() -> RopeSpec:
    """A fresh spec object: its shared cache (keyed by the spec's identity) starts at 4096 rows."""
    return RopeSpec(head_dim=64, base=10_000.0)


def _assert_exact(cos: torch.Tensor, sin: torch.Tensor, values: list[int], spec: RopeSpec) -> None:
    want_cos, want_sin = _exact_tables(values, spec)
    torch.testing.assert_close(cos.double().reshape(want_cos.shape), want_cos, rtol=0, atol=1e-6)
    torch.testing.assert_close(sin.double().reshape(want_sin.shape), want_sin, rtol=0, atol=1e-6)


@pytest.fixture
def computed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Positions whose exact rows the table cache computes (one entry per row build)."""
    seen: list[int] = []
    real = tc._rope_tables

    def counting(pos: torch.Tensor, spec: RopeSpec, **kw: object) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append(pos.numel())
        return real(pos, spec, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(tc, "_rope_tables", counting)
    return seen


def _held(cache: TableCache) -> int:
    return cache.length + (0 if cache.far is None else int(cache.far[1].shape[0]))


def test_rotary_far_first_call_computes_a_window_not_every_row_below(computed: list[int]) -> None:
    spec = _spec()
    rope = Rotary(spec)  # 4096 rows up front, limit 2^18
    computed.clear()
    q = torch.randn(1, 1, 8, 64)
    pos = torch.tensor([[140_000]])
    out, _ = rope(q, None, positions=pos)
    torch.testing.assert_close(out.double(), reference_rope(q, pos, spec), rtol=0, atol=1e-6)
    assert rope.cached_len == 4096  # was 2^18: every row up to 140000 built on this call
    assert sum(computed) <= 256 and _held(rope._cache) <= 4096 + 256  # type: ignore[arg-type]
    cos, sin = rope.tables(torch.tensor([140_000, 140_001, 139_990]))
    _assert_exact(cos, sin, [140_000, 140_001, 139_990], spec)


@pytest.mark.parametrize("entry", ["apply_rope", "rope_tables"])
def test_shared_cache_far_position_builds_no_rows_up_to_it(entry: str, computed: list[int]) -> None:
    spec = _spec()
    rope_tables(torch.arange(8), spec)  # the shared cache exists (4096 rows)
    computed.clear()
    if entry == "rope_tables":
        cos, sin = rope_tables(torch.tensor([[86_399], [86_000]]), spec)
        _assert_exact(cos, sin, [86_399, 86_000], spec)
    else:
        q, k = torch.randn(2, 1, 4, 64), torch.randn(2, 1, 2, 64)
        pos = torch.tensor(
            [[86_399], [250_000]]
        )  # two sequences, far apart: rows computed for this call only
        qo, ko = apply_rope(q, k, pos, spec)
        torch.testing.assert_close(qo.double(), reference_rope(q, pos, spec), rtol=0, atol=1e-6)
        torch.testing.assert_close(ko.double(), reference_rope(k, pos, spec), rtol=0, atol=1e-6)  # type: ignore[union-attr]
    cache = shared_cache(spec, CPU)
    assert cache is not None and cache.length == 4096 and sum(computed) <= 1024


@pytest.mark.parametrize("entry", ["Rotary", "apply_rope"])
def test_far_decode_reads_a_window_that_grows_by_doubling(entry: str, computed: list[int]) -> None:
    """Decode from a far offset, through the stored plans: every step exact; rows built amortized (the window
    doubles), never the rows below the offset."""
    spec = _spec()
    rope = Rotary(spec)
    shared_cache(spec, CPU)  # both caches exist (4096 rows each) before counting
    computed.clear()
    start, steps = 150_000, 700
    q = torch.randn(steps, 1, 4, 64, dtype=torch.float64).float()
    with torch.no_grad():
        outs = []
        for t in range(steps):
            pos = torch.tensor([[start + t]])
            if entry == "Rotary":
                outs.append(rope(q[t : t + 1], None, positions=pos)[0])
            else:
                outs.append(apply_rope(q[t : t + 1], None, pos, spec)[0])
    want = reference_rope(q.transpose(0, 1), torch.arange(start, start + steps), spec).transpose(0, 1)
    torch.testing.assert_close(torch.cat(outs).double(), want, rtol=0, atol=1e-6)
    cache = rope._cache if entry == "Rotary" else shared_cache(spec, CPU)
    assert cache is not None and cache.length == 4096
    assert sum(computed) <= 4 * steps and cache.far is not None and cache.far[1].shape[0] <= 4 * steps


def test_one_call_with_cached_and_far_positions() -> None:
    spec = _spec()
    cache = TableCache(spec, CPU, 4096, 1 << 18)
    values = [5, 140_000, 4095, 140_003, 0, 4096 + 200_000]
    hit = cache.lookup(torch.tensor(values).reshape(2, 3))
    assert hit is not None and hit[0].shape == (2, 3, 32)
    _assert_exact(hit[0], hit[1], values, spec)
    assert cache.length == 4096


def test_window_is_replaced_not_accumulated_and_sparse_calls_cache_nothing() -> None:
    spec = _spec()
    cache = TableCache(spec, CPU, 64, 1 << 18)
    sparse = [100_000, 250_000]  # two positions 150000 apart: computed for this call, no window
    hit = cache.lookup(torch.tensor(sparse))
    assert hit is not None and cache.far is None and cache.length == 64
    _assert_exact(*hit, sparse, spec)
    for p in (100_000, 99_000, 250_000):  # a window; extended back by 1000 rows; replaced far away
        hit = cache.lookup(torch.tensor([p]))
        assert hit is not None and cache.far is not None
        _assert_exact(*hit, [p], spec)
        start, rows = cache.far
        assert start <= p < start + rows.shape[0] <= start + 2048
    assert cache.far[0] == 250_000 - 250_000 % 256  # the window at 100000 was dropped, not kept beside


def test_prefill_and_decode_past_the_rows_still_grow_them() -> None:
    """The usual case: positions 0 .. N-1 (a prefill) and the next position (decode) grow the cache itself."""
    spec = _spec()
    cache = TableCache(spec, CPU, 64, 1 << 18)
    hit = cache.lookup(torch.arange(10_000))
    assert hit is not None and cache.length == 16_384 and cache.far is None
    _assert_exact(hit[0][::997], hit[1][::997], list(range(0, 10_000, 997)), spec)
    hit = cache.lookup(torch.tensor([16_384]))
    assert hit is not None and cache.length == 32_768  # doubled
    _assert_exact(*hit, [16_384], spec)
    values = [0, 777, 9_999, 32_767]
    _assert_exact(*cache.lookup(torch.tensor(values)), values, spec)  # type: ignore[misc]


def test_prefix_growth_drops_a_window_it_covers() -> None:
    cache = TableCache(_spec(), CPU, 4096, 1 << 18)
    assert cache.lookup(torch.tensor([20_000])) is not None and cache.far is not None
    assert cache.lookup(torch.arange(30_000)) is not None  # a prefill over the window's positions
    assert cache.length == 32_768 and cache.far is None


def test_rows_built_in_chunks_equal_the_formula() -> None:
    """Rows are built a chunk of positions at a time (1024 at 64 bands): values across chunk boundaries."""
    spec = RopeSpec(head_dim=128, base=500_000.0)
    cache = TableCache(spec, CPU, 5000, 5000)
    values = [0, 1, 1023, 1024, 1025, 2047, 2048, 4095, 4096, 4999]
    rows = cache.rows[torch.tensor(values)]
    _assert_exact(rows[:, 0], rows[:, 1], values, spec)


def test_grown_call_declines_far_growth() -> None:
    """A kernel reporting a far position gets its code back (the caller's exact path serves it), nothing grown;
    the next position (decode) still grows the rows."""
    cache = TableCache(_spec(), CPU, 64, 1 << 18)

    def kernel(wants: int) -> int:
        return cache.grown_call(lambda rows: wants if wants >= rows.shape[0] else 0)

    assert kernel(100_000) == 100_000 and cache.length == 64
    assert kernel(64) == 0 and cache.length == 128


def test_single_positions_of_any_integer_dtype_read_exact_rows() -> None:
    """One position (decode) is read as a slice of the rows or of the window, whatever its integer dtype."""
    spec = _spec()
    cache = TableCache(spec, CPU, 256, 1 << 18)
    for dtype, value in (
        (torch.uint8, 200),
        (torch.int16, 255),
        (torch.int32, 140_000),
        (torch.int64, 70_000),
    ):
        hit = cache.lookup(torch.tensor([value], dtype=dtype))
        assert hit is not None
        _assert_exact(*hit, [value], spec)
    assert cache.lookup(torch.tensor([-1])) is None and cache.lookup(torch.tensor([1 << 18])) is None


def test_move_drops_the_window_and_reads_stay_exact() -> None:
    spec = _spec()
    rope = Rotary(spec)
    rope.tables(torch.tensor([140_000]))
    assert rope._cache is not None and rope._cache.far is not None
    rope.to("meta")
    assert rope._cache.far is None
    rope.to_empty(device="cpu")
    cos, sin = rope.tables(torch.tensor([140_000, 3]))
    _assert_exact(cos, sin, [140_000, 3], spec)
