"""RoPE fused with the KV-cache write: float64 writes, autograd version counters and refusals that hold after a
plan was made, spec and meta-positions checks. Oracles as in test_kv_cache.py (float64 composition from the
RoFormer formula, kv_oracle)."""

from __future__ import annotations

import pytest
import torch

from ropekit.phases import rope_tables
from ropekit.rotation.kv_cache import rope_cache_write
from ropekit.spec import RopeSpec
from tests.ropekit.rotation.kv_oracle import BASE, rope64
from tests.ropekit.rotation.test_kv_cache import _contig


@pytest.mark.parametrize("paged", [False, True])
def test_float64_writes_are_float64_accurate(paged: bool) -> None:
    """float64 k, q and caches: rotated with float64 tables, like apply_rope (the float32 tables gave 7e-8 against
    the float64 formula; a user trial). Positions up to 1,000 so the oracle's own float64 angles stay ~1e-13."""
    from ropekit.rotation.kv_cache import rope_paged_cache_write

    g = torch.Generator().manual_seed(3)
    spec = RopeSpec(16, base=BASE)
    k, v, q = (torch.randn(2, 3, n, 16, generator=g, dtype=torch.float64) for n in (2, 2, 4))
    pos = torch.tensor([[5, 6, 7], [990, 991, 992]])
    if paged:
        ck, cv = torch.zeros(4, 4, 2, 16, dtype=torch.float64), torch.zeros(4, 4, 2, 16, dtype=torch.float64)
        slots = torch.tensor([0, 1, 2, 8, 9, 10])
        qf = q.reshape(6, 4, 16).clone()
        rope_paged_cache_write(
            k.reshape(6, 2, 16), v.reshape(6, 2, 16), ck, cv, slots, spec, positions=pos.reshape(6), q=qf
        )
        got_k, got_q = ck.reshape(16, 2, 16)[slots].reshape(2, 3, 2, 16), qf.reshape(2, 3, 4, 16)
    else:
        ck, cv = torch.zeros(2, 2, 8, 16, dtype=torch.float64), torch.zeros(2, 2, 8, 16, dtype=torch.float64)
        qc = q.clone()
        rope_cache_write(k, v, ck, cv, torch.tensor([0, 4]), spec, positions=pos, q=qc)
        got_k = torch.stack([ck[0, :, 0:3], ck[1, :, 4:7]]).transpose(1, 2)
        got_q = qc
    torch.testing.assert_close(got_k, rope64(k, pos, 16, "half"), rtol=0, atol=1e-12)
    torch.testing.assert_close(got_q, rope64(q, pos, 16, "half"), rtol=0, atol=1e-12)


_SAVED = "modified by an inplace operation"


@pytest.mark.parametrize("mode", ["tables", "default positions", "positions"])
def test_written_tensors_bump_their_version_counters(backend: str, mode: str) -> None:
    """cache_k, cache_v and q are written in place: a tensor saved by another autograd node (w * x saves x) and
    then written makes backward raise, as a torch in-place op makes it (the PyTorch path, ``backend="torch"``, is
    the oracle), on the validated call and on the prepared-plan calls after it (the C kernel writes through raw
    pointers and bumps the counters itself)."""
    from ropekit.rotation import kv_cache_kernel

    kv_cache_kernel._PLANS.clear()
    spec = RopeSpec(8, base=BASE)
    ck, cv = torch.zeros(2, 2, 8, 8), torch.zeros(2, 2, 8, 8)
    for step in range(3):  # the first call is validated and leaves a plan (kernel); the next ones run it
        k, v, q = torch.randn(2, 1, 2, 8), torch.randn(2, 1, 2, 8), torch.randn(2, 1, 4, 8)
        off = torch.tensor([step, step + 1])
        kw: dict[str, object] = {"q": q}
        if mode == "tables":
            kw["tables"] = rope_tables(off[:, None], spec)
        elif mode == "positions":
            kw["positions"] = off[:, None] + 5
        ws = [torch.randn_like(t, requires_grad=True) for t in (ck, cv, q)]
        losses = [(w * t).sum() for w, t in zip(ws, (ck, cv, q), strict=True)]
        rope_cache_write(k, v, ck, cv, off, spec, **kw)  # type: ignore[arg-type]
        for name, loss in zip(("cache_k", "cache_v", "q"), losses, strict=True):
            try:
                loss.backward()
            except RuntimeError as e:
                assert _SAVED in str(e), name
            else:
                pytest.fail(
                    f"call {step}: backward ran on {name} written in place (its saved value is stale)"
                )
    if backend == "kernel":
        assert kv_cache_kernel._PLANS  # the later calls had a plan


@pytest.mark.parametrize("mode", ["tables", "positions"])
def test_q_in_an_autograd_graph_is_refused_on_every_call_also_after_a_plan(mode: str) -> None:
    """A call under no_grad leaves a prepared plan whose key records q.requires_grad; a later call with grad mode
    on and q in an autograd graph must still be refused (q is rotated in place), as a fresh call is (the oracle:
    the full path's ValueError), and nothing is written."""
    from ropekit.rotation import kv_cache_kernel

    kv_cache_kernel._PLANS.clear()
    spec = RopeSpec(8, base=BASE)
    k, v = torch.randn(2, 1, 2, 8), torch.randn(2, 1, 2, 8)
    ck, cv = torch.zeros(2, 2, 16, 8), torch.zeros(2, 2, 16, 8)
    off = torch.tensor([3, 4])
    kw: dict[str, object] = {"tables": rope_tables(off[:, None], spec)} if mode == "tables" else {}
    x = torch.randn(2, 1, 4, 8, requires_grad=True)
    with pytest.raises(ValueError, match="q requires grad") as fresh:
        rope_cache_write(k, v, ck, cv, off, spec, q=x * 1.0, **kw)  # type: ignore[arg-type]
    with torch.no_grad():
        rope_cache_write(k, v, ck, cv, off, spec, q=torch.randn(2, 1, 4, 8, requires_grad=True), **kw)  # type: ignore[arg-type]
    for _ in range(2):
        q = x * 1.0
        q0, before = q.detach().clone(), (ck.clone(), cv.clone())
        with pytest.raises(ValueError, match="q requires grad") as planned:
            rope_cache_write(k, v, ck, cv, off, spec, q=q, **kw)  # type: ignore[arg-type]
        assert str(planned.value) == str(fresh.value)
        assert torch.equal(q.detach(), q0) and torch.equal(ck, before[0]) and torch.equal(cv, before[1])


@pytest.mark.parametrize("spec", [None, {"head_dim": 8}, 8])
@pytest.mark.parametrize("offsets", [0, torch.tensor([0, 3])])
def test_spec_must_be_a_rope_spec(spec: object, offsets: object) -> None:
    """A spec that is not a RopeSpec: the TypeError apply_rope gives (the oracle, called here), not an
    AttributeError from inside, on a fresh call and when plans are stored; nothing is written."""
    from ropekit import apply_rope

    with pytest.raises(TypeError) as want:
        apply_rope(torch.randn(1, 1, 1, 8), None, torch.arange(1), spec)  # type: ignore[arg-type]
    k, v, ck, cv = _contig()
    rope_cache_write(k, v, ck.clone(), cv.clone(), torch.tensor([0, 3]), RopeSpec(8, base=BASE))  # a plan
    with pytest.raises(TypeError) as got:
        rope_cache_write(k, v, ck, cv, offsets, spec)  # type: ignore[arg-type]
    assert str(got.value) == str(want.value) == f"spec must be a ropekit.RopeSpec, got {type(spec).__name__}"
    assert not ck.any() and not cv.any()


def test_meta_positions_are_refused_with_the_apply_rope_error() -> None:
    """positions on the meta device have no values: refused with a ValueError naming positions (as apply_rope
    refuses them: the oracle), not torch's NotImplementedError from copying them; nothing is written."""
    from ropekit import apply_rope

    spec = RopeSpec(8, base=BASE)
    k, v, ck, cv = _contig()
    meta = torch.arange(3, device="meta")
    with pytest.raises(ValueError, match="positions are on the meta device") as want:
        apply_rope(k, None, meta, spec)
    with pytest.raises(ValueError, match="positions are on the meta device") as got:
        rope_cache_write(k, v, ck, cv, 0, spec, positions=meta)
    assert str(got.value) == str(want.value).replace("q is", "k is")
    assert not ck.any() and not cv.any()
