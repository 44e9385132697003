# SPDX-License-Identifier: MIT
"""The fused KV-cache write called with positions (given, or the default ``offsets[b] + s``): after the first,
validated call of a geometry the kernel reads the exact shared-cache rows at the positions itself (table modes 1
and 2 of ``kernels/rope_cache_write.h``). Checked bit for bit against the same write with the tables given
(``rope_tables`` at those positions) and against the float64 RoFormer rotation (``kv_oracle.rope64``); a spy on the
prepared plans proves the in-kernel reads ran, so a silent fallback cannot pass for them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from ropekit import RopeSpec, rope_cache_write, rope_paged_cache_write, rope_tables
from ropekit.kernels import cpu_build
from ropekit.rotation import kv_cache_kernel as kk
from tests.ropekit.rotation.kv_oracle import BASE, close, rope64

pytestmark = pytest.mark.skipif(cpu_build.load() is None, reason="needs the C kernel (a C compiler)")

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture
def modes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The table mode of every prepared call that wrote (0 tables given, 1 default positions, 2 positions)."""
    seen: list[int] = []
    real = kk.fast_write

    def spy(args: tuple[object, ...]) -> bool:
        key = kk._key(args)
        plan = kk._PLANS.get(key) if key is not None else None
        done = real(args)
        if done and plan is not None:
            seen.append(int(plan.params[28]))
        return done

    monkeypatch.setattr("ropekit.rotation.kv_cache.fast_write", spy)
    kk._PLANS.clear()
    yield seen
    kk._PLANS.clear()


def _caches(B: int, H: int, rows: int, D: int, dt: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros(B, H, rows, D, dtype=dt), torch.zeros(B, H, rows, D, dtype=dt)


@pytest.mark.parametrize("given", [False, True])
@pytest.mark.parametrize("S", [1, 5])
@pytest.mark.parametrize("dt", DTYPES)
def test_contiguous_positions_read_in_the_kernel(
    dt: torch.dtype, S: int, given: bool, modes: list[int]
) -> None:
    spec = RopeSpec(32, base=BASE)
    B, H, Hq, rows = 3, 2, 4, 64
    g = torch.Generator().manual_seed(S)
    for call in range(
        3
    ):  # call 0 is validated and plans; calls 1, 2 take the plan with new offsets and values
        k, v = (torch.randn(B, H, S, 32, generator=g).to(dt) for _ in range(2))
        q = torch.randn(B, Hq, S, 32, generator=g).to(dt)
        off = torch.randint(0, rows - S + 1, (B,), generator=g)
        pos = off[:, None] + torch.arange(S) + (7 * call if given else 0)  # given: not the default positions
        ck, cv = _caches(B, H, rows, 32, dt)
        ck2, cv2, q2 = ck.clone(), cv.clone(), q.clone()
        kw = {"positions": pos} if given else {}
        rope_cache_write(k, v, ck, cv, off, spec, q=q, format="bhsd", cache_format="bhsd", **kw)  # type: ignore[arg-type]
        rope_cache_write(
            k, v, ck2, cv2, off, spec, q=q2, tables=rope_tables(pos, spec), format="bhsd", cache_format="bhsd"
        )
        assert torch.equal(ck, ck2) and torch.equal(cv, cv2) and torch.equal(q, q2), call
        for b in range(B):
            o = int(off[b])
            close(ck[b, :, o : o + S].transpose(0, 1), rope64(k[b].transpose(0, 1), pos[b], 32, "half"))
            assert torch.equal(cv[b, :, o : o + S], v[b])
    assert modes.count(2 if given else 1) == 2


@pytest.mark.parametrize("dt", DTYPES)
def test_paged_positions_read_in_the_kernel(dt: torch.dtype, modes: list[int]) -> None:
    spec = RopeSpec(32, base=BASE, layout="interleaved")
    nb, bs, H, T = 8, 16, 2, 20
    g = torch.Generator().manual_seed(3)
    for call in range(3):
        k, v = (torch.randn(T, H, 32, generator=g).to(dt) for _ in range(2))
        slots = torch.randperm(nb * bs, generator=g)[:T]
        # each call past the rows the shared cache had (4096, then 8192): the kernel says so, the cache grows
        pos = torch.randint(0, 4000 * 2**call, (T,), generator=g)
        pos[0] = 4000 * 2**call - 1
        ck, cv = torch.zeros(nb, bs, H, 32, dtype=dt), torch.zeros(nb, bs, H, 32, dtype=dt)
        ck2, cv2 = ck.clone(), cv.clone()
        rope_paged_cache_write(k, v, ck, cv, slots, spec, positions=pos)
        rope_paged_cache_write(k, v, ck2, cv2, slots, spec, tables=rope_tables(pos, spec))
        assert torch.equal(ck, ck2) and torch.equal(cv, cv2), call
        got = ck.view(nb * bs, H, 32)[slots]
        close(got, rope64(k, pos, 32, "interleaved"))
    assert modes.count(2) == 2  # calls 1 and 2 with positions (the tables-given calls are mode 0)


def test_positions_the_kernel_cannot_read_take_the_exact_path(modes: list[int]) -> None:
    """Negative positions (valid: the exact tables rotate backwards) make the kernel write nothing and the full
    path rotate; int32 positions and float positions never get an in-kernel plan -- all exact."""
    spec = RopeSpec(32, base=BASE)
    B, H, S, rows = 2, 2, 3, 32
    k, v = torch.randn(B, H, S, 32), torch.randn(B, H, S, 32)
    off = torch.tensor([4, 9])
    base = off[:, None] + torch.arange(S)
    for pos in (
        base,
        base - 20,
        base.to(torch.int32),
        base.to(torch.int32),
        base.double() + 0.5,
        base.double(),
    ):
        ck, cv = _caches(B, H, rows, 32, torch.float32)
        rope_cache_write(k, v, ck, cv, off, spec, positions=pos, format="bhsd", cache_format="bhsd")
        for b in range(B):
            o = int(off[b])
            close(ck[b, :, o : o + S].transpose(0, 1), rope64(k[b].transpose(0, 1), pos[b], 32, "half"))
    assert modes == []  # the only int64 geometry was called with base, then base - 20 (refused by the kernel)


def test_bad_offsets_on_a_planned_geometry_raise_and_write_nothing(modes: list[int]) -> None:
    spec = RopeSpec(32, base=BASE)
    B, H, S, rows = 2, 2, 4, 16
    k, v = torch.randn(B, H, S, 32), torch.randn(B, H, S, 32)
    ck, cv = _caches(B, H, rows, 32, torch.float32)
    rope_cache_write(k, v, ck, cv, torch.tensor([0, 3]), spec, format="bhsd", cache_format="bhsd")
    rope_cache_write(k, v, ck, cv, torch.tensor([1, 2]), spec, format="bhsd", cache_format="bhsd")
    assert modes == [1]
    before = ck.clone(), cv.clone()
    with pytest.raises(ValueError, match="offsets"):
        rope_cache_write(
            k, v, ck, cv, torch.tensor([0, rows - S + 1]), spec, format="bhsd", cache_format="bhsd"
        )
    assert torch.equal(ck, before[0]) and torch.equal(cv, before[1]) and modes == [1]


def test_threads_sharing_a_plan_while_the_cache_grows(modes: list[int]) -> None:
    """Four Python threads on one paged geometry (ctypes releases the GIL during the write), each with its own
    caches and positions that keep passing the shared cache's rows: every write equals the tables-given one."""
    import threading

    spec = RopeSpec(32, base=BASE)
    nb, bs, H, T = 4, 16, 2, 24
    g = torch.Generator().manual_seed(5)
    k, v = torch.randn(T, H, 32, generator=g), torch.randn(T, H, 32, generator=g)
    slots = torch.randperm(nb * bs, generator=g)[:T]
    ck0, cv0 = torch.zeros(nb, bs, H, 32), torch.zeros(nb, bs, H, 32)
    rope_paged_cache_write(k, v, ck0, cv0, slots, spec, positions=torch.arange(T))  # validated: the plan
    jobs = [[torch.randint(0, 3000 * 2**j, (T,), generator=g) + i for j in range(6)] for i in range(4)]
    bad: list[tuple[int, int]] = []

    def work(i: int) -> None:
        for j, pos in enumerate(jobs[i]):
            ck, cv = torch.zeros(nb, bs, H, 32), torch.zeros(nb, bs, H, 32)
            rope_paged_cache_write(k, v, ck, cv, slots, spec, positions=pos)
            ck2, cv2 = torch.zeros(nb, bs, H, 32), torch.zeros(nb, bs, H, 32)
            rope_paged_cache_write(k, v, ck2, cv2, slots, spec, tables=rope_tables(pos, spec))
            if not (torch.equal(ck, ck2) and torch.equal(cv, cv2)):
                bad.append((i, j))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == [] and modes.count(2) == 24  # every positions write read the rows in the kernel
