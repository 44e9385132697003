"""The exact-table cache and the decode fast paths built on it: same values as the direct exact tables, never
stale, never an unrotated position, and the fast paths skip nothing that could change between calls."""

from __future__ import annotations

import math

import pytest
import torch

from ropekit import RopeSpec, Rotary, apply_rope, rope_tables
from ropekit.phases import _rope_tables
from ropekit.rotation import fastpath
from ropekit.table_cache import TableCache, is_row_view
from tests.oracles import reference_rope

SPEC = RopeSpec(head_dim=32, rotary_dim=24, base=500_000.0)
CPU = torch.device("cpu")


def _direct(pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _rope_tables(pos, SPEC)  # computed directly, no cache


def test_runs_are_zero_copy_slices_and_equal_direct_tables() -> None:
    cache = TableCache(SPEC, CPU, 256, 1024)
    pos = torch.arange(100, 200)
    cos, sin = cache.lookup(pos)  # type: ignore[misc]
    assert cos.untyped_storage().data_ptr() == cache.rows.untyped_storage().data_ptr()  # no copy
    want = _direct(pos)
    assert torch.equal(cos, want[0]) and torch.equal(sin, want[1])


def test_gathers_grow_and_refuse_out_of_range() -> None:
    cache = TableCache(SPEC, CPU, 16, 1024)
    pos = torch.tensor([[3, 700, 40], [0, 15, 1]])
    cos, sin = cache.lookup(pos)  # type: ignore[misc]
    assert cache.length == 1024 and cos.shape == (2, 3, 12)
    want = _direct(pos)
    assert torch.equal(cos, want[0]) and torch.equal(sin, want[1])
    assert cache.lookup(torch.tensor([5, -1])) is None  # negative: the caller computes it exactly
    assert cache.lookup(torch.tensor([5, 1024])) is None  # past the limit
    assert cache.length == 1024


def test_device_side_select_equals_direct_everywhere() -> None:
    """The traceable read: cached rows inside the table, direct exact rows outside, bit-identical to direct."""
    cache = TableCache(SPEC, CPU, 64, 64)
    pos = torch.tensor([[0, 63, 64, -1], [2**62, -(2**63), 5, 10_000_000]])
    cos, sin = cache.select(pos)
    want = _direct(pos)
    assert torch.equal(cos, want[0]) and torch.equal(sin, want[1])


def test_dynamic_spec_refused() -> None:
    from ropekit.scaling.ntk import DynamicNTK

    spec = RopeSpec(head_dim=32, scaling=DynamicNTK(factor=2.0, max_position_embeddings=128))
    with pytest.raises(ValueError, match="static spec"):
        TableCache(spec, CPU, 16, 16)


@pytest.mark.parametrize("entry", ["apply_rope", "Rotary"])
def test_fast_path_follows_new_positions_and_values(entry: str) -> None:
    """Decode: same geometry every step, new positions (in the cache, past its end, negative, past its limit)."""
    rope = Rotary(SPEC, max_seq_len=16, format="bhsd", cache_limit=512)

    def call(q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor):
        if entry == "Rotary":
            return rope(q, k, positions=pos, inplace=True)
        return apply_rope(q, k, pos, SPEC, format="bhsd", inplace=True)

    with torch.no_grad():
        for step, col in enumerate(([3, 9, 14], [4, 10, 15], [40, 300, 2], [-5, 7, 1], [600, 700_000, 0])):
            pos = torch.tensor(col).unsqueeze(1)  # [b, 1]: each sequence at its own offset
            q, k = torch.randn(3, 4, 1, 32), torch.randn(3, 2, 1, 32)
            want_q = reference_rope(q.transpose(1, 2), pos, SPEC).transpose(1, 2)
            want_k = reference_rope(k.transpose(1, 2), pos, SPEC).transpose(1, 2)
            qo, ko = call(q, k, pos)
            assert qo is q and ko is k
            torch.testing.assert_close(q.double(), want_q, rtol=0, atol=1e-6, msg=f"step {step}")
            torch.testing.assert_close(k.double(), want_k, rtol=0, atol=1e-6, msg=f"step {step}")
    key = fastpath.apply_key(q, k, pos, SPEC, "bhsd", True, "auto")
    assert fastpath.apply_lookup(key, SPEC) is not None  # the fast path was really armed


def test_fast_path_does_not_skip_checks_that_depend_on_values_or_grad() -> None:
    q, k = torch.randn(2, 4, 1, 32), torch.randn(2, 2, 1, 32)
    pos = torch.tensor([[5], [9]])
    with torch.no_grad():
        apply_rope(q, k, pos, SPEC, format="bhsd", inplace=True)
        apply_rope(q, k, pos, SPEC, format="bhsd", inplace=True)
    before = q.clone()
    with pytest.raises(ValueError, match="inf"), torch.no_grad():
        apply_rope(q, k, torch.tensor([[5.0], [float("inf")]]), SPEC, format="bhsd", inplace=True)
    assert torch.equal(q, before)
    qg = torch.randn(2, 4, 1, 32, requires_grad=True)
    out, _ = apply_rope(qg, None, pos, SPEC, format="bhsd")
    (g,) = torch.autograd.grad(out.square().sum(), qg)
    torch.testing.assert_close(g, 2 * qg.detach(), rtol=1e-5, atol=1e-5)  # rotations preserve norms


def test_public_tables_are_copies() -> None:
    rope = Rotary(SPEC, max_seq_len=128)
    cos, _ = rope.tables(torch.arange(100))
    assert cos.is_contiguous()
    cos.zero_()
    again, _ = rope.tables(torch.arange(100))
    assert torch.equal(again, _direct(torch.arange(100))[0])


def test_rope_tables_reads_the_shared_cache_and_hands_out_fresh_tensors() -> None:
    for pos in (torch.arange(10, 300), torch.tensor([[7, 3], [9, 1000]])):  # a run (slice), a gather
        cos, sin = rope_tables(pos, SPEC)
        want = _direct(pos)
        assert torch.equal(cos, want[0]) and torch.equal(sin, want[1])
        assert cos.is_contiguous() and sin.is_contiguous()  # plain tables, not views of the packed cache
        cos.zero_()
        sin.zero_()
        again = rope_tables(pos, SPEC)
        assert torch.equal(again[0], want[0]) and torch.equal(again[1], want[1])


def test_cache_reads_share_one_row_stream_and_plans_match_them() -> None:
    """Packed rows [L, 2, n]: every read (a consecutive slice or a gather) hands out row views whose sin row sits n
    floats after the cos row, so a plan stored on one kind of read rotates correctly with the other."""
    n = SPEC.n_bands
    cache = TableCache(SPEC, CPU, 512, 512)
    run = cache.lookup_flat(torch.arange(100, 200))
    gather = cache.lookup_flat(torch.randperm(400)[:100])
    for cos, sin in (run, gather):  # type: ignore[misc]
        assert cos.stride() == (2 * n, 1) and sin.stride() == (2 * n, 1) and is_row_view(cos)
        assert sin.data_ptr() - cos.data_ptr() == n * cos.element_size()
    assert not is_row_view(torch.zeros(100, n)) and is_row_view(torch.zeros(1, n))
    assert is_row_view(torch.zeros(3, 5, 2, n)[:, :, 0]) and not is_row_view(torch.zeros(3, 2, 5, n)[:, 0])
    with torch.no_grad():
        for step, pos in enumerate(
            (torch.arange(100, 200), torch.arange(100, 200), torch.randperm(400)[:100])
        ):
            q, k = torch.randn(1, 4, 100, 32), torch.randn(1, 2, 100, 32)
            want_q = reference_rope(q.transpose(1, 2), pos, SPEC).transpose(1, 2)
            want_k = reference_rope(k.transpose(1, 2), pos, SPEC).transpose(1, 2)
            apply_rope(q, k, pos, SPEC, format="bhsd", inplace=True)  # step 1 stores the plan, step 2 gathers
            torch.testing.assert_close(q.double(), want_q, rtol=0, atol=1e-6, msg=f"step {step}")
            torch.testing.assert_close(k.double(), want_k, rtol=0, atol=1e-6, msg=f"step {step}")
    key = fastpath.apply_key(q, k, pos, SPEC, "bhsd", True, "auto")
    assert fastpath.apply_lookup(key, SPEC) is not None  # the last call went through the stored plan


def _count_gathers(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the plan calls in which the kernel read the cache rows itself (the in-kernel gather ran)."""
    from ropekit.rotation import cpu_backend

    calls = {"gather": 0}
    real = cpu_backend.Plan.call_gather

    def counting(self, *a):  # type: ignore[no-untyped-def]
        got = real(self, *a)
        calls["gather"] += got is not None
        return got

    monkeypatch.setattr(cpu_backend.Plan, "call_gather", counting)
    return calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("entry", ["apply_rope", "Rotary"])
def test_kernel_reads_cache_rows_in_place_bit_identical_to_given_tables(
    entry: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The armed decode path hands the kernel the packed cache and the positions (no gathered copy). Oracle: the
    exact tables computed directly (no cache) rotated by the pure-PyTorch backend (no plan, no C kernel; the kernel
    is bit-identical to it by design, no FMA): equal bit for bit, for
    positions inside the cache, past its end (it grows), negative or past its limit (exact slow path), int32 and
    non-contiguous positions (the gathered-rows path), k absent, out of place, and every format."""
    from ropekit import apply_rope_tables

    calls = _count_gathers(monkeypatch)
    spec = RopeSpec(head_dim=32, rotary_dim=24, base=10_000.0)
    rope = Rotary(spec, max_seq_len=16, format="bhsd", cache_limit=4096)
    shapes = {"bhsd": ((3, 4, 1, 32), (3, 2, 1, 32)), "bshd": ((3, 1, 4, 32), (3, 1, 2, 32))}
    steps = ([3, 9, 14], [5, 1000, 7], [-5, 7, 1], [3, 10_000, 2], [4, 10, 15])
    for fmt, (qs, ks) in shapes.items():
        rope.format = fmt  # type: ignore[assignment]
        for inplace in (True, False):
            for with_k in (True, False):
                for step, col in enumerate(steps):
                    for make in (
                        lambda c: torch.tensor(c).unsqueeze(1),
                        lambda c: torch.tensor(c, dtype=torch.int32).unsqueeze(1),
                        lambda c: torch.tensor([c, c]).t()[:, :1],  # [b, 1] view with strides (1, 3)
                    ):
                        pos = make(col)
                        g = torch.Generator().manual_seed(step)
                        q = torch.randn(qs, generator=g).to(dtype)
                        k = torch.randn(ks, generator=g).to(dtype) if with_k else None
                        cos, sin = _rope_tables(pos, spec)  # computed directly: no cache
                        want = apply_rope_tables(  # the pure-PyTorch backend: no plan, no C kernel
                            q.clone(),
                            None if k is None else k.clone(),
                            cos,
                            sin,
                            spec,
                            format=fmt,
                            backend="torch",
                        )
                        qa, ka = q.clone(), None if k is None else k.clone()
                        with torch.no_grad():
                            if entry == "Rotary":
                                got = rope(qa, ka, positions=pos, inplace=inplace)
                            else:
                                got = apply_rope(qa, ka, pos, spec, format=fmt, inplace=inplace)
                        assert torch.equal(got[0], want[0]), (fmt, inplace, step, pos.dtype)
                        assert (got[1] is None) == (k is None)
                        if k is not None:
                            assert torch.equal(got[1], want[1])  # type: ignore[arg-type]
    assert calls["gather"] > 20  # the in-place read really ran (not only the fallbacks)


@pytest.mark.parametrize("fmt", ["bshd", "bhsd"])
def test_kernel_cache_read_split_across_threads_bit_identical(
    fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prefill-sized repeated call takes the same in-kernel cache read on two threads, in chunks that start in
    the middle of a sequence, with every row's position different from the row before (shuffled): the kernel
    loads each row's cache offset a row ahead, so a wrong look-ahead (stale, skipped, or read past a chunk) shows
    here; in bhsd the rows run as head groups (a full group of 8 and a partial one of 4, chunks of tokens). Oracle: exact tables computed directly, rotated by the pure-PyTorch backend, bit for bit."""
    from ropekit import apply_rope_tables
    from ropekit.kernels import cpu_build
    from ropekit.rotation import cpu_backend

    if cpu_build.load() is None:
        pytest.skip("no C compiler: the fused CPU kernel is unavailable")
    calls = _count_gathers(monkeypatch)
    spec = RopeSpec(head_dim=64, base=10_000.0)
    b, s, hq, hk = 2, 600, 12, 2  # bhsd: 12 q heads run as head groups of 8 and 4
    shape = {"bshd": lambda h: (b, s, h, 64), "bhsd": lambda h: (b, h, s, 64)}[fmt]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert cpu_backend.threads_for(b * s * (hq + hk) * 64) == 2
        for seed in range(3):
            g = torch.Generator().manual_seed(seed)
            pos = torch.randperm(2 * s, generator=g)[: b * s].reshape(b, s)
            q, k = torch.randn(shape(hq), generator=g), torch.randn(shape(hk), generator=g)
            cos, sin = _rope_tables(pos, spec)
            want = apply_rope_tables(q.clone(), k.clone(), cos, sin, spec, format=fmt, backend="torch")
            with torch.no_grad():
                got = apply_rope(q.clone(), k.clone(), pos, spec, format=fmt, inplace=True)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), seed  # type: ignore[arg-type]
    finally:
        torch.set_num_threads(threads)
    assert calls["gather"] >= 2  # the second and third calls read the cache in the kernel


def test_grown_call_grows_once_for_a_position_past_the_rows() -> None:
    """A kernel call that reports a position past the rows gets the cache grown to cover it and is called again;
    a refusal (negative code) and a position past the limit are returned as they are, nothing grown."""
    cache = TableCache(RopeSpec(16, base=1e4), torch.device("cpu"), 64, 1 << 12)
    seen: list[int] = []

    def kernel(wants: int) -> int:
        def call(rows: torch.Tensor) -> int:
            seen.append(rows.shape[0])
            if wants < 0:
                return wants  # refused (a negative position)
            return wants if wants >= rows.shape[0] else 0  # writes only when its position is covered

        return cache.grown_call(call)

    assert kernel(100) == 0 and seen == [64, 128] and cache.length == 128
    seen.clear()
    assert kernel(-1) == -1 and seen == [128] and cache.length == 128
    seen.clear()
    assert kernel(5000) == 5000 and seen == [128] and cache.length == 128  # past the limit (4096): not grown


# ---------------------------------------------------------------- narrow integer positions that wrap
#: (dtype, first value) of 64 consecutive values that pass the dtype's maximum: the tensor holds the wrapped values
#: (uint8 200..255, 0..7; int8 100..127, -128..-93; int16 32740..32767, -32768..-32733)
NARROW_WRAPS = [(torch.uint8, 200), (torch.int8, 100), (torch.int16, 32_740)]


def _wrapped(dtype: torch.dtype, first: int) -> torch.Tensor:
    return torch.arange(first, first + 64).to(dtype)  # wraps modulo 2^bits, as a user's narrow buffer would


def _grow_shared_past_int16() -> None:
    """Grow SPEC's shared cache past 32767 + 64 (int16's wrap point): a wrapped int16 run would pass as a slice.
    (One far position no longer grows it: it is read from a window of far rows, tests/ropekit/test_far_positions.)"""
    rope_tables(torch.arange(40_000), SPEC)  # a prefill: grows the rows themselves
    cache = fastpath.shared_cache(SPEC, CPU)
    assert cache is not None and cache.length > 32_767 + 64


def _exact_tables(values: list[int], spec: RopeSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Oracle from the math: cos/sin(p * base ** (-2i / rotary_dim)) in float64, one Python float per entry."""
    r = int(spec.rotary_dim)  # type: ignore[arg-type]
    th = [spec.base ** (-2.0 * i / r) for i in range(r // 2)]
    cos = torch.tensor([[math.cos(p * t) for t in th] for p in values], dtype=torch.float64)
    sin = torch.tensor([[math.sin(p * t) for t in th] for p in values], dtype=torch.float64)
    return cos, sin


@pytest.mark.parametrize(("dtype", "first"), NARROW_WRAPS, ids=["uint8", "int8", "int16"])
@pytest.mark.parametrize("entry", ["TableCache.lookup", "rope_tables", "Rotary.tables"])
def test_wrapped_narrow_positions_read_the_rows_of_the_values_they_hold(
    entry: str, dtype: torch.dtype, first: int
) -> None:
    """A run of 64 narrow-integer positions that is consecutive only modulo 2^bits is not a run of values: each
    token gets the rows of the value its element holds (before the fix, the rows of first .. first + 63: a wrapped
    arange in the same dtype passed the consecutive-run check). Oracle: float64 math on the held values."""
    pos = _wrapped(dtype, first)
    values = pos.tolist()  # what the tensor holds, as Python ints
    assert values != list(range(first, first + 64))  # it really wraps
    if entry == "TableCache.lookup":
        hit = TableCache(SPEC, CPU, 1 << 16, 1 << 16).lookup(pos)  # rows past 32767: int16's wrap is covered
        assert hit is not None or min(values) < 0  # negative values: None, the caller computes them exactly
        if hit is None:
            return
        cos, sin = hit
    elif entry == "rope_tables":
        _grow_shared_past_int16()
        cos, sin = rope_tables(pos, SPEC)
    else:
        cos, sin = Rotary(SPEC, max_seq_len=1 << 16).tables(pos)
    want_cos, want_sin = _exact_tables(values, SPEC)
    torch.testing.assert_close(cos.double(), want_cos, rtol=0, atol=1e-6)
    torch.testing.assert_close(sin.double(), want_sin, rtol=0, atol=1e-6)


def test_wrapped_uint8_run_is_gathered_not_sliced() -> None:
    """uint8 200..255, 0..7 reads rows 200..255 then 0..7 (a gather), never the slice 200..263."""
    cache = TableCache(SPEC, CPU, 512, 512)
    packed = cache.packed_rows(_wrapped(torch.uint8, 200))
    assert packed is not None
    held = torch.tensor(_wrapped(torch.uint8, 200).tolist())
    assert torch.equal(packed, cache.rows.index_select(0, held))
    run = cache.packed_rows(torch.arange(100, 164, dtype=torch.uint8))  # a true run of values: still a slice
    assert run is not None and run.data_ptr() == cache.rows[100].data_ptr()


@pytest.mark.parametrize(("dtype", "first"), NARROW_WRAPS, ids=["uint8", "int8", "int16"])
@pytest.mark.parametrize("entry", ["apply_rope", "Rotary"])
def test_wrapped_narrow_positions_rotate_at_the_values_they_hold(
    entry: str, dtype: torch.dtype, first: int
) -> None:
    """apply_rope and Rotary with wrapped narrow positions rotate each token at the value its element holds, on the
    validated first call and on the second (the stored plan's fast path). Oracle: the float64 reference at those
    values as int64."""
    _grow_shared_past_int16()
    rope = Rotary(SPEC, max_seq_len=1 << 16)
    pos = _wrapped(dtype, first)
    held = torch.tensor(pos.tolist(), dtype=torch.int64)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 64, 1, 32, generator=g), torch.randn(1, 64, 1, 32, generator=g)
    want_q, want_k = reference_rope(q, held, SPEC), reference_rope(k, held, SPEC)
    for step in range(2):
        if entry == "Rotary":
            qo, ko = rope(q, k, positions=pos)
        else:
            qo, ko = apply_rope(q, k, pos, SPEC)
        assert ko is not None
        torch.testing.assert_close(qo.double(), want_q, rtol=0, atol=1e-5, msg=f"step {step}")
        torch.testing.assert_close(ko.double(), want_k, rtol=0, atol=1e-5, msg=f"step {step}")
    if dtype == torch.uint8:  # every value cached (int8/int16 wrap to negatives: computed exactly, no plan)
        key = fastpath.apply_key(q, k, pos, SPEC, "bshd", False, "auto")
        assert fastpath.apply_lookup(key, SPEC) is not None  # the second call really went through the plan
