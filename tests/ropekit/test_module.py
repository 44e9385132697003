"""Rotary: matches apply_rope, survives dtype casts, grows its cache, works on the meta device."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from ropekit import RopeSpec, Rotary, apply_rope, apply_rope_tables, rope_tables
from ropekit.scaling import LongRope, Yarn
from tests.isolated import run_isolated
from tests.oracles import reference_rope, theta

SPEC = RopeSpec(head_dim=32, rotary_dim=24, base=500_000.0)


def test_forward_matches_apply_rope_and_reference() -> None:
    rope = Rotary(SPEC, max_seq_len=64)
    q, k = torch.randn(2, 10, 4, 32), torch.randn(2, 10, 2, 32)
    pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [50, 51, 52, 53, 54, 55, 56, 57, 58, 59]])
    got = rope(q, k, positions=pos)
    want = apply_rope(q, k, pos, SPEC)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    torch.testing.assert_close(got[0].double(), reference_rope(q, pos, SPEC), rtol=0, atol=1e-5)


CASTS = [
    (lambda m: m.to(torch.bfloat16), torch.bfloat16),
    (lambda m: m.half(), torch.float16),
    (lambda m: m.double(), torch.float64),
    (lambda m: m.to(dtype=torch.float16), torch.float16),
]


@pytest.mark.parametrize("cast,target", CASTS)
def test_frequency_buffer_and_cache_survive_dtype_casts(cast, target) -> None:
    """pitfalls items 1, 5, 51: model.to(bf16) must not round the frequencies or the tables."""
    model = nn.Sequential(nn.Linear(4, 4), Rotary(SPEC, max_seq_len=128))
    q = torch.randn(1, 100, 2, 32)
    before = model[1](q, positions=torch.arange(100) + 60)[0]
    cast(model)
    rope = model[1]
    assert rope.inv_freq.dtype == torch.float32
    assert torch.equal(rope.inv_freq, SPEC.inv_freq())
    assert torch.equal(rope(q, positions=torch.arange(100) + 60)[0], before)
    assert model[0].weight.dtype == target  # the cast really happened to the rest of the model


def test_no_state_dict_entries() -> None:
    assert Rotary(SPEC).state_dict() == {}


def test_cache_grows_to_power_of_two_and_stays_exact() -> None:
    rope = Rotary(SPEC, max_seq_len=16)
    assert rope.cached_len == 16
    pos = torch.tensor([3, 700, 40])
    cos, sin = rope.tables(pos)
    assert rope.cached_len == 1024
    ref = rope_tables(pos, SPEC)
    assert torch.equal(cos, ref[0]) and torch.equal(sin, ref[1])


def test_positions_beyond_cache_limit_negative_or_fractional_are_exact() -> None:
    rope = Rotary(SPEC, max_seq_len=16, cache_limit=32)
    for pos in (
        torch.tensor([5, 10_000_000]),
        torch.tensor([-4, 2]),
        torch.tensor([0.5, 3.25], dtype=torch.float64),
    ):
        cos, sin = rope.tables(pos)
        ref = rope_tables(pos, SPEC)
        assert torch.equal(cos, ref[0]) and torch.equal(sin, ref[1])
    assert rope.cached_len == 16  # never grown past the limit
    q = torch.randn(1, 2, 2, 32)
    out, _ = rope(q, positions=torch.tensor([10_000_000, 16_777_215]))
    torch.testing.assert_close(
        out.double(), reference_rope(q, torch.tensor([10_000_000, 16_777_215]), SPEC), rtol=0, atol=1e-6
    )


def test_meta_device_construction_then_materialize() -> None:
    with torch.device("meta"):
        rope = Rotary(SPEC, max_seq_len=64)
    assert rope.inv_freq.is_meta
    q = torch.empty(2, 8, 4, 32, device="meta")
    out, _ = rope(q, positions=torch.arange(8, device="meta"))
    assert out.is_meta and out.shape == q.shape
    rope.to_empty(device="cpu")
    assert torch.equal(rope.inv_freq, SPEC.inv_freq()) and rope.cached_len == 64
    x = torch.randn(2, 8, 4, 32)
    assert torch.equal(rope(x, positions=torch.arange(8))[0], Rotary(SPEC)(x, positions=torch.arange(8))[0])


@pytest.mark.parametrize(
    "scaling",
    [
        Yarn(4.0, original_max_position_embeddings=64),
        LongRope((1.0,) * 16, (2.0,) * 16, 64, max_position_embeddings=256),
    ],
    ids=["yarn", "longrope"],
)
def test_meta_device_construction_with_a_scheme_whose_frequencies_are_not_cached(scaling: object) -> None:
    """The README's meta-device construction with a scheme: its frequencies (float64 host tensors) are computed
    inside the meta context when nothing cached them before (a fresh spec); it used to fail there."""
    spec = RopeSpec(32, base=12_345.0 + id(scaling) % 1000, scaling=scaling)  # a base no other test caches
    with torch.device("meta"):
        rope = Rotary(spec, max_seq_len=64)
    assert rope.inv_freq.is_meta
    rope.to_empty(device="cpu")
    assert torch.equal(rope.inv_freq, spec.inv_freq())


def test_module_formats_inplace_and_deepcopy() -> None:
    rope = Rotary(SPEC, format="bhsd")
    q = torch.randn(2, 4, 6, 32)
    ref = apply_rope(q, None, torch.arange(6), SPEC, format="bhsd")[0]
    out, _ = rope(q, positions=torch.arange(6), inplace=True)
    assert out is q and torch.equal(q, ref)
    twin = copy.deepcopy(rope)
    assert twin.cached_len == rope.cached_len and torch.equal(twin.inv_freq, rope.inv_freq)
    assert "rotary_dim=24" in repr(rope)


def test_constructor_validation() -> None:
    with pytest.raises(TypeError, match="spec"):
        Rotary({"head_dim": 8})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_seq_len"):
        Rotary(SPEC, max_seq_len=0)
    with pytest.raises(ValueError, match="format"):
        Rotary(SPEC, format="sbhd")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positions must have one of the dtypes int8"):
        Rotary(SPEC)(torch.randn(1, 2, 1, 32), positions=torch.arange(2).bfloat16())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cache_follows_the_device() -> None:
    rope = Rotary(SPEC).cuda().to(torch.bfloat16)
    q = torch.randn(1, 8, 2, 32, device="cuda")
    out, _ = rope(q, positions=torch.arange(8, device="cuda"))
    assert out.device.type == "cuda" and rope.inv_freq.dtype == torch.float32
    torch.testing.assert_close(
        out.cpu().double(), reference_rope(q.cpu(), torch.arange(8), SPEC), rtol=0, atol=1e-5
    )


@pytest.mark.parametrize("fmt", ["bshd", "bhsd", "thd"])
def test_float64_inputs_are_rotated_in_float64(fmt: str) -> None:
    """The module's cache holds float32 rows; float64 q/k must not go through them (5e-8 error before the fix)."""
    spec = RopeSpec(8, base=100.0, rotary_dim=6)
    shape = {"bshd": (2, 3, 2, 8), "bhsd": (2, 2, 3, 8), "thd": (3, 2, 8)}[fmt]
    q, k = torch.randn(shape, dtype=torch.float64), torch.randn(shape, dtype=torch.float64)
    pos = torch.arange(3) + 1000
    rope = Rotary(spec, format=fmt)  # type: ignore[arg-type]
    rope(q.float(), positions=pos)  # fill the float32 cache first: the float64 call must still not read it
    qr, kr = rope(q, k, positions=pos)
    assert qr.dtype == kr.dtype == torch.float64  # type: ignore[union-attr]
    for x, xr in ((q, qr), (k, kr)):
        assert (xr - reference_rope(x, pos, spec, format=fmt)).abs().max() < 1e-12  # type: ignore[operator]
    # mixed: a float64 k beside a float32 q is exact too; q stays float32-accurate
    qr, kr = rope(q.float(), k, positions=pos)
    assert (kr - reference_rope(k, pos, spec, format=fmt)).abs().max() < 1e-12  # type: ignore[operator]


def test_tables_of_a_multi_axis_spec_are_per_token() -> None:
    """``Rotary.tables`` of a multi-axis spec reads positions [n_axes, *P] as forward does: band j turns at the
    position of its axis (``axes.slots[j]``), cos/sin = cos/sin(p[axis(j)] * theta_j) in float64 from the seed's
    theta; 1-D positions are refused as forward refuses them."""
    from ropekit import AxisMap

    spec = RopeSpec(head_dim=16, axes=AxisMap.contiguous((4, 2, 2)))
    rot = Rotary(spec)
    pos = torch.tensor([[0, 1, 2, 3, 70], [0, 0, 1, 1, 5], [0, 1, 0, 1, 9]])
    cos, sin = rot.tables(pos)
    assert axes_slots(spec) == [0, 0, 0, 0, 1, 1, 2, 2]
    th = torch.tensor(theta(spec), dtype=torch.float64)
    angle = pos.double()[torch.tensor(axes_slots(spec))].T * th  # [5, n]
    assert cos.shape == sin.shape == (5, 8) and cos.dtype == torch.float32
    assert torch.allclose(cos.double(), angle.cos(), rtol=0, atol=1e-7)
    assert torch.allclose(sin.double(), angle.sin(), rtol=0, atol=1e-7)
    q = torch.randn(3, 5, 2, 16)  # a batch of 3 = n_axes: [A, s] tables read as [b, s] would still broadcast
    want, _ = rot(q, None, positions=pos)
    got, _ = apply_rope_tables(q, None, cos, sin, spec)
    assert torch.equal(got, want)
    cos[0, 0] = 5.0  # a fresh tensor: the module's cache is untouched
    assert torch.equal(rot.tables(pos)[0][0, 0], torch.tensor(1.0))
    with pytest.raises(ValueError, match=r"positions must have shape \[n_axes=3, \.\.\.\]"):
        rot.tables(torch.arange(5))


def axes_slots(spec: RopeSpec) -> list[int]:
    assert spec.axes is not None
    return list(spec.axes.slots)


# ---------------------------------------------------------------- a module or positions on meta, q with values
_run = run_isolated


@pytest.mark.parametrize("how", ["built_on_meta", "moved_to_meta"])
def test_module_on_meta_refuses_q_with_values_on_every_call(how: str) -> None:
    """A Rotary on meta called with CPU tensors after a CPU call left a decode plan for its spec and geometry (the
    plan used to run on the meta cache rows: SIGSEGV): a ValueError naming meta and to_empty, on every call, in
    place or not, nothing written; meta q still works; after to_empty the module rotates correctly (oracle: the
    float64 reference)."""
    got = _run(
        f"""
        import json, torch, ropekit
        from tests.oracles import reference_rope
        spec = ropekit.RopeSpec(head_dim=8)
        q, k, pos = torch.randn(2, 5, 2, 8), torch.randn(2, 5, 1, 8), torch.arange(5)
        with torch.no_grad():
            for _ in range(2):  # an ordinary CPU module with this spec: leaves a decode plan, then uses it
                ropekit.Rotary(spec)(q.clone(), k.clone(), positions=pos, inplace=True)
                ropekit.Rotary(spec)(q.clone(), k.clone(), positions=pos)
        if {how!r} == "built_on_meta":
            with torch.device("meta"):
                rot = ropekit.Rotary(spec)
        else:
            rot = ropekit.Rotary(spec)
            rot(q.clone(), k.clone(), positions=pos)
            rot.to("meta")
        q0, k0 = q.clone(), k.clone()
        errors = []
        with torch.no_grad():
            for inplace in (True, False, True):
                for kk in (k, None):
                    try:
                        rot(q, kk, positions=pos, inplace=inplace)
                    except ValueError as e:
                        errors.append(str(e))
        unchanged = torch.equal(q, q0) and torch.equal(k, k0)
        meta_out = rot(q.to("meta"), k.to("meta"), positions=pos)
        meta_ok = meta_out[0].is_meta and meta_out[0].shape == q.shape and meta_out[1].shape == k.shape
        rot.to_empty(device="cpu")
        qo, ko = rot(q, k, positions=pos)
        err = max((qo.double() - reference_rope(q, pos, spec)).abs().max().item(),
                  (ko.double() - reference_rope(k, pos, spec)).abs().max().item())
        print(json.dumps({{"errors": errors, "unchanged": unchanged, "meta_ok": meta_ok, "err": err}}))
        """
    )
    errors = got["errors"]
    assert isinstance(errors, list) and len(errors) == 6
    for e in errors:
        assert "Rotary is on the meta device" in e and "q is on cpu" in e and "to_empty" in e
    assert got["unchanged"] is True and got["meta_ok"] is True
    assert got["err"] < 1e-6  # type: ignore[operator]


def test_module_on_meta_refuses_float64_and_multi_axis_calls_too() -> None:
    """The refusal does not depend on the path the call would take (float64 q, a multi-axis spec)."""
    from ropekit import AxisMap

    with torch.device("meta"):
        rot = Rotary(RopeSpec(head_dim=8))
        rot_axes = Rotary(RopeSpec(head_dim=16, axes=AxisMap.contiguous((4, 2, 2))))
    with pytest.raises(ValueError, match="Rotary is on the meta device .* q is on cpu"):
        rot(torch.randn(1, 3, 1, 8, dtype=torch.float64), positions=torch.arange(3))
    pos = torch.stack([torch.arange(3), torch.arange(3) * 2, torch.arange(3)])
    for _ in range(2):  # the second call with the same positions tensor would find a memo
        with pytest.raises(ValueError, match="Rotary is on the meta device .* q is on cpu"):
            rot_axes(torch.randn(1, 3, 1, 16), positions=pos)


META_POS = r"positions are on the meta device \(no values\)"


def test_meta_positions_with_q_on_cpu_are_refused_before_anything_is_written() -> None:
    """forward (1-D and multi-axis) and tables with meta positions: the ValueError apply_rope gives, not torch's
    NotImplementedError (a user trial); q is not written; the module keeps working (oracle: the float64
    reference)."""
    from ropekit import AxisMap

    rot = Rotary(SPEC)
    q = torch.randn(2, 5, 4, 32)
    q0 = q.clone()
    meta = torch.arange(5, device="meta")
    with torch.no_grad():
        rot(q.clone(), positions=torch.arange(5), inplace=True)  # leaves a plan for this geometry
        for _ in range(2):
            with pytest.raises(ValueError, match=META_POS + " but q is on cpu"):
                rot(q, positions=meta, inplace=True)
    assert torch.equal(q, q0)
    with pytest.raises(ValueError, match=META_POS + " but this Rotary is on cpu"):
        rot.tables(meta)
    out, _ = rot(q, positions=torch.arange(5))
    torch.testing.assert_close(out.double(), reference_rope(q, torch.arange(5), SPEC), rtol=0, atol=1e-5)
    spec = RopeSpec(head_dim=16, axes=AxisMap.contiguous((4, 2, 2)))
    rot_axes = Rotary(spec)
    pos = torch.stack([torch.arange(3), torch.arange(3) * 2, torch.arange(3)]).to("meta")
    with pytest.raises(ValueError, match=META_POS + " but q is on cpu"):
        rot_axes(torch.randn(1, 3, 1, 16), positions=pos)
    with pytest.raises(ValueError, match=META_POS + " but this Rotary is on cpu"):
        rot_axes.tables(pos)


def test_meta_positions_with_meta_q_give_meta_outputs() -> None:
    """Shape inference: meta q with meta positions works on a CPU module and on a meta module (1-D and
    multi-axis), and a meta module's tables are meta."""
    from ropekit import AxisMap

    q, k = torch.empty(2, 5, 4, 32, device="meta"), torch.empty(2, 5, 2, 32, device="meta")
    meta = torch.arange(5, device="meta")
    with torch.device("meta"):
        on_meta = Rotary(SPEC)
    for rot in (Rotary(SPEC), on_meta):
        for pos in (meta, torch.arange(5)):
            qo, ko = rot(q, k, positions=pos)
            assert qo.is_meta and qo.shape == q.shape
            assert ko is not None and ko.is_meta and ko.shape == k.shape
    cos, sin = on_meta.tables(meta)
    assert cos.is_meta and cos.shape == sin.shape == (5, 12)
    spec = RopeSpec(head_dim=16, axes=AxisMap.contiguous((4, 2, 2)))
    with torch.device("meta"):
        rot_axes = Rotary(spec)
    pos3 = torch.stack([torch.arange(3)] * 3).to("meta")
    out, _ = rot_axes(torch.empty(1, 3, 1, 16, device="meta"), positions=pos3)
    assert out.is_meta and out.shape == (1, 3, 1, 16)
