"""RoPE fused with the paged KV-cache write (a block table like vLLM's), against an independent composition:
rotate in float64 from the RoFormer formula, then index into a copy of the cache by slot. Half and interleaved
pairs, partial rotary, float32/bfloat16, GQA, the C kernel and the PyTorch path, threads; and the validation
(nothing is written when an argument is bad)."""

from __future__ import annotations

import re

import pytest
import torch

from ropekit.kernels import cpu_build
from ropekit.phases import rope_tables
from ropekit.rotation import kv_cache
from ropekit.rotation.kv_cache import rope_paged_cache_write
from ropekit.spec import RopeSpec
from tests.ropekit.rotation.kv_oracle import BASE, close, rope64


@pytest.mark.parametrize(
    ("dt", "layout", "r"), [(torch.float32, "half", 16), (torch.bfloat16, "interleaved", 8)]
)
def test_paged_against_float64_composition(backend: str, dt: torch.dtype, layout: str, r: int) -> None:
    g = torch.Generator().manual_seed(1)
    T, Hk, Hq, D, Dv, NB, BS = 7, 2, 6, 16, 8, 5, 4
    spec = RopeSpec(D, base=BASE, rotary_dim=r, layout=layout)  # type: ignore[arg-type]
    k, v, q = (torch.randn(T, h, d, generator=g).to(dt) for h, d in ((Hk, D), (Hk, Dv), (Hq, D)))
    kv = torch.randn(2, NB, BS, Hk, D, generator=g).to(dt)  # one buffer for both caches, as in vLLM
    ck, cv0 = kv[0], torch.randn(NB, BS, Hk, Dv, generator=g).to(dt)
    cv = cv0.clone()
    slots = torch.tensor([19, 0, 5, 6, 7, 12, 3])
    pos = torch.tensor([3, 100, 4096, 5, 6, 70000, 2])
    ref_k, ref_v = ck.double().clone(), cv0.double().clone()
    ck_before, q0 = ck.clone(), q.clone()
    rope_paged_cache_write(k, v, ck, cv, slots, spec, positions=pos, q=q)
    rk = rope64(k, pos, r, layout)
    for t in range(T):
        blk, row = divmod(int(slots[t]), BS)
        ref_k[blk, row], ref_v[blk, row] = rk[t], v[t].double()
    close(ck, ref_k)
    assert torch.equal(cv.double(), ref_v)
    untouched = torch.ones(NB * BS, dtype=torch.bool)
    untouched[slots] = False
    assert torch.equal(ck.reshape(NB * BS, Hk, D)[untouched], ck_before.reshape(NB * BS, Hk, D)[untouched])
    close(q, rope64(q0, pos, r, layout))


@pytest.mark.parametrize(
    ("slots", "positions", "match"),
    [
        (torch.tensor([0, 20, 1]), torch.arange(3), r"slots\[1\] = 20 is outside"),
        (torch.tensor([0, -1, 1]), torch.arange(3), r"slots\[1\] = -1"),
        (
            torch.tensor([4, 2, 4]),
            torch.arange(3),
            r"slots must be distinct: slot 4 is given to tokens \[0, 2\]",
        ),
        (torch.tensor([0, 1, 2]), None, "needs positions"),
        (torch.tensor([0, 1]), torch.arange(3), r"slots must have shape \(3,\)"),
        (torch.tensor([0, 1, 2]), torch.tensor([0.5, float("nan"), 1.0]), "finite"),
    ],
)
def test_paged_validation_writes_nothing(
    slots: torch.Tensor, positions: torch.Tensor | None, match: str
) -> None:
    k, v = torch.randn(3, 2, 8), torch.randn(3, 2, 8)
    ck, cv = torch.zeros(5, 4, 2, 8), torch.zeros(5, 4, 2, 8)
    with pytest.raises(ValueError, match=match):
        rope_paged_cache_write(k, v, ck, cv, slots, RopeSpec(8, base=BASE), positions=positions)
    assert not ck.any() and not cv.any()


@pytest.mark.parametrize(
    ("name", "tensor"),
    [
        ("cache_k", torch.zeros(1, 4, 2, 8).expand(5, 4, 2, 8)),
        ("cache_v", torch.zeros(5, 1, 2, 8).expand(5, 4, 2, 8)),
        ("q", torch.randn(3, 1, 8).expand(3, 4, 8)),
    ],
)
def test_paged_written_tensors_must_not_alias_themselves(name: str, tensor: torch.Tensor) -> None:
    """Before the check an expanded cache silently kept only the last token, and an expanded q was rotated once
    per aliased head."""
    k, v = torch.randn(3, 2, 8), torch.randn(3, 2, 8)
    kw: dict[str, torch.Tensor] = {
        "cache_k": torch.zeros(5, 4, 2, 8),
        "cache_v": torch.zeros(5, 4, 2, 8),
        name: tensor,
    }
    before = {n: t.clone() for n, t in kw.items()}
    with pytest.raises(ValueError, match=f"{name} has overlapping memory"):
        rope_paged_cache_write(
            k, v, slots=torch.tensor([0, 5, 9]), spec=RopeSpec(8, base=BASE), positions=torch.arange(3), **kw
        )  # type: ignore[arg-type]
    assert all(torch.equal(kw[n], before[n]) for n in kw)


def test_repeated_slot_among_many_tokens(backend: str) -> None:
    T = 200  # above the quadratic check: the sorted one
    slots = torch.randperm(800, generator=torch.Generator().manual_seed(5))[:T]
    slots[150] = slots[17]
    k = torch.randn(T, 1, 8)
    ck, cv = torch.zeros(100, 8, 1, 8), torch.zeros(100, 8, 1, 8)
    with pytest.raises(ValueError, match="distinct"):
        rope_paged_cache_write(k, k, ck, cv, slots, RopeSpec(8, base=BASE), positions=torch.arange(T))
    assert not ck.any() and not cv.any()


def test_multithreaded_write_matches_the_torch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Enough tokens for the kernel's thread pool (torch's thread setting permitting): same bits as PyTorch."""
    if cpu_build.load() is None:
        pytest.skip("no C compiler")
    g = torch.Generator().manual_seed(6)
    T, NB, BS = 601, 80, 16
    spec = RopeSpec(128, base=BASE, layout="interleaved")
    k, v, q = (torch.randn(T, h, 128, generator=g).to(torch.bfloat16) for h in (8, 8, 16))
    slots = torch.randperm(NB * BS, generator=g)[:T]
    pos = torch.randint(0, 50_000, (T,), generator=g)
    outs = []
    for use in (True, False):
        monkeypatch.setattr(kv_cache, "use_kernel", lambda *xs, u=use: u)
        ck, cv = (
            torch.zeros(NB, BS, 8, 128, dtype=torch.bfloat16),
            torch.zeros(NB, BS, 8, 128, dtype=torch.bfloat16),
        )
        qq = q.clone()
        rope_paged_cache_write(k, v, ck, cv, slots, spec, positions=pos, q=qq)
        outs.append((ck, cv, qq))
    for a, b in zip(*outs, strict=True):
        assert torch.equal(a, b)


def test_prepared_plan_repeats_the_full_path_and_still_checks_values() -> None:
    """Decoding: the second call with the same geometry takes the prepared plan. It writes what the full path
    writes (float64 oracle), and a bad slot, a repeated slot or an overlapping cache is still refused before any
    write (the plan falls back to the full validation, which names the problem)."""
    if cpu_build.load() is None:
        pytest.skip("no C compiler")
    from ropekit.rotation import kv_cache_kernel

    g = torch.Generator().manual_seed(8)
    spec = RopeSpec(16, base=BASE)
    T, NB, BS = 4, 6, 4
    ck, cv = torch.zeros(NB, BS, 2, 16), torch.zeros(NB, BS, 2, 16)
    ref_k = ck.double().clone()
    for step in range(3):
        k, v = torch.randn(T, 2, 16, generator=g), torch.randn(T, 2, 16, generator=g)
        slots = torch.tensor([step, 4 + step, 8 + step, 12 + step])
        pos = torch.tensor([10, 20, 30, 40]) + step
        rope_paged_cache_write(k, v, ck, cv, slots, spec, tables=rope_tables(pos, spec))
        rk = rope64(k, pos, 16, "half")
        for t in range(T):
            ref_k[divmod(int(slots[t]), BS)] = rk[t]
    assert kv_cache_kernel._PLANS  # the later calls had a plan
    close(ck, ref_k)
    k = torch.randn(T, 2, 16, generator=g)
    tables = rope_tables(torch.arange(T), spec)
    before = ck.clone()
    with pytest.raises(ValueError, match=r"slots\[2\] = 24 is outside"):
        rope_paged_cache_write(k, k, ck, cv, torch.tensor([0, 1, 24, 3]), spec, tables=tables)
    with pytest.raises(ValueError, match="distinct"):
        rope_paged_cache_write(k, k, ck, cv, torch.tensor([0, 1, 1, 3]), spec, tables=tables)
    with pytest.raises(ValueError, match="overlap"):
        rope_paged_cache_write(ck[0], k, ck, cv, torch.tensor([0, 1, 2, 3]), spec, tables=tables)
    assert torch.equal(ck, before)


def test_k_and_v_interleaved_per_block_are_accepted() -> None:
    """FlashInfer's paged layout holds K and V of a block side by side, [blocks, 2, block, H, D]: kv[:, 0] and
    kv[:, 1] have interleaved byte spans but no element in common (refused as "overlapping" before: the check
    compared spans). The write lands at the slots (float64 oracle), nothing else changes; a cache that really shares
    elements with the other is still refused."""
    spec = RopeSpec(head_dim=16, base=BASE)
    kv = torch.zeros(4, 2, 4, 2, 16)
    ck, cv = kv[:, 0], kv[:, 1]
    k, v = torch.randn(3, 2, 16), torch.randn(3, 2, 16)
    slots, pos = torch.tensor([0, 5, 9]), torch.tensor([0, 1, 2])
    rope_paged_cache_write(k, v, ck, cv, slots, spec, positions=pos)
    flat_k, flat_v = ck.reshape(16, 2, 16), cv.reshape(16, 2, 16)
    close(flat_k[slots], rope64(k, pos, 16, "half"))
    assert torch.equal(flat_v[slots], v)
    others = torch.ones(16, dtype=torch.bool)
    others[slots] = False
    assert not flat_k[others].any() and not flat_v[others].any()
    with pytest.raises(ValueError, match="overlap in memory"):
        rope_paged_cache_write(k, v, kv[:, 0], kv[:, 0, :, :, :], slots, spec, positions=pos)


@pytest.mark.parametrize("mode", ["tables", "positions"])
def test_paged_written_tensors_bump_their_version_counters(backend: str, mode: str) -> None:
    """cache_k, cache_v and q are written in place: a tensor saved by another node and then written makes backward
    raise, as with torch's in-place ops (the PyTorch path, ``backend="torch"``, is the oracle), on the validated
    call and on the prepared-plan calls after it."""
    from ropekit.rotation import kv_cache_kernel

    kv_cache_kernel._PLANS.clear()
    spec = RopeSpec(8, base=BASE)
    ck, cv = torch.zeros(4, 4, 2, 8), torch.zeros(4, 4, 2, 8)
    for step in range(3):
        k, v, q = torch.randn(3, 2, 8), torch.randn(3, 2, 8), torch.randn(3, 4, 8)
        slots, pos = torch.tensor([step, 5 + step, 10 + step]), torch.tensor([4, 9, 14]) + step
        kw: dict[str, object] = {"tables": rope_tables(pos, spec)} if mode == "tables" else {"positions": pos}
        ws = [torch.randn_like(t, requires_grad=True) for t in (ck, cv, q)]
        losses = [(w * t).sum() for w, t in zip(ws, (ck, cv, q), strict=True)]
        rope_paged_cache_write(k, v, ck, cv, slots, spec, q=q, **kw)  # type: ignore[arg-type]
        for name, loss in zip(("cache_k", "cache_v", "q"), losses, strict=True):
            try:
                loss.backward()
            except RuntimeError as e:
                assert "modified by an inplace operation" in str(e), name
            else:
                pytest.fail(
                    f"call {step}: backward ran on {name} written in place (its saved value is stale)"
                )
    if backend == "kernel":
        assert kv_cache_kernel._PLANS  # the later calls had a plan


def test_paged_q_in_an_autograd_graph_is_refused_also_after_a_plan() -> None:
    """As for the contiguous write: after a no_grad call leaves a plan, q in an autograd graph is still refused
    with the full path's ValueError (the oracle: a fresh call's), and nothing is written."""
    from ropekit.rotation import kv_cache_kernel

    kv_cache_kernel._PLANS.clear()
    spec = RopeSpec(8, base=BASE)
    k, v = torch.randn(3, 2, 8), torch.randn(3, 2, 8)
    ck, cv = torch.zeros(4, 4, 2, 8), torch.zeros(4, 4, 2, 8)
    slots, pos = torch.tensor([0, 5, 10]), torch.tensor([4, 9, 14])
    x = torch.randn(3, 4, 8, requires_grad=True)
    with pytest.raises(ValueError, match="q requires grad") as fresh:
        rope_paged_cache_write(k, v, ck, cv, slots, spec, positions=pos, q=x * 1.0)
    with torch.no_grad():
        rope_paged_cache_write(
            k, v, ck, cv, slots, spec, positions=pos, q=torch.randn(3, 4, 8, requires_grad=True)
        )
    q = x * 1.0
    q0, before = q.detach().clone(), ck.clone()
    with pytest.raises(ValueError, match="q requires grad") as planned:
        rope_paged_cache_write(k, v, ck, cv, slots, spec, positions=pos, q=q)
    assert str(planned.value) == str(fresh.value)
    assert torch.equal(q.detach(), q0) and torch.equal(ck, before)


@pytest.mark.parametrize("shape", [(1,), (), (1, 3), (3, 1), (2,)])
def test_paged_positions_must_be_one_per_token(backend: str, shape: tuple[int, ...]) -> None:
    """positions are [T] (one per token): a single position is not broadcast over the tokens (that rotated every
    token at it), nor is any other shape taken; the error names positions, its shape and the expected one, and
    nothing is written. The oracle of the accepted shape: the float64 rotation at the T positions."""
    spec = RopeSpec(8, base=BASE)
    k, v, q = torch.randn(3, 2, 8), torch.randn(3, 2, 8), torch.randn(3, 4, 8)
    ck, cv = torch.zeros(4, 4, 2, 8), torch.zeros(4, 4, 2, 8)
    slots = torch.tensor([0, 5, 10])
    q0 = q.clone()
    bad = torch.full(shape, 7, dtype=torch.int64)
    msg = rf"positions must have shape \(3,\) \(one position per token of k\), got shape {re.escape(str(shape))}"
    with pytest.raises(ValueError, match=msg):
        rope_paged_cache_write(k, v, ck, cv, slots, spec, positions=bad, q=q)
    assert not ck.any() and not cv.any() and torch.equal(q, q0)
    pos = torch.tensor([7, 8, 9])
    rope_paged_cache_write(k, v, ck, cv, slots, spec, positions=pos, q=q)
    close(ck.reshape(16, 2, 8)[slots], rope64(k, pos, 8, "half"))
    close(q, rope64(q0, pos, 8, "half"))


@pytest.mark.parametrize("spec", [None, {"head_dim": 8}])
def test_paged_spec_must_be_a_rope_spec(spec: object) -> None:
    k = torch.randn(1, 1, 8)
    ck, cv = torch.zeros(1, 4, 1, 8), torch.zeros(1, 4, 1, 8)
    rope_paged_cache_write(
        k, k, ck.clone(), cv.clone(), torch.tensor([0]), RopeSpec(8), positions=torch.tensor([0])
    )
    with pytest.raises(TypeError, match=f"spec must be a ropekit.RopeSpec, got {type(spec).__name__}"):
        rope_paged_cache_write(k, k, ck, cv, torch.tensor([0]), spec, positions=torch.tensor([0]))  # type: ignore[arg-type]
    assert not ck.any() and not cv.any()


def test_paged_meta_positions_are_refused() -> None:
    k = torch.randn(3, 2, 8)
    ck, cv = torch.zeros(4, 4, 2, 8), torch.zeros(4, 4, 2, 8)
    with pytest.raises(ValueError, match="positions are on the meta device .no values. but k is on cpu"):
        rope_paged_cache_write(
            k, k, ck, cv, torch.tensor([0, 1, 2]), RopeSpec(8), positions=torch.arange(3, device="meta")
        )
    assert not ck.any() and not cv.any()
