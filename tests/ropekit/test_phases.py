# SPDX-License-Identifier: MIT
"""The spec's passage into the constant-folded phase constants under torch.compile (ropekit/phases.py).

torch 2.11's dynamo cannot hand a frozen dataclass instance to a constant-folded function ("can't reconstruct
arbitrary frozen dataclass instances"), so every compiled call of apply_rope, Rotary, rope_tables, ... failed there
(seen on the GPU machine's torch 2.11, twelfth session). The spec then crossed as its fields; but under
``torch.compile(dynamic=True)`` dynamo reads every float field (base, p, a scaling's factor) as a symbolic input,
which cannot be folded, and every entry point failed (training trial F2). The spec now crosses as its ``id`` (a
constant) and is looked up on the other side. These tests enumerate every spec a user can reach (every preset and
layer type, every scaling class including subclasses defined outside ropekit.scaling, a multi-axis spec, explicit
frequencies): the traced tables equal the eager ones bit for bit, with static and with dynamic shapes.
"""

from __future__ import annotations

import pytest
import torch

from ropekit import AxisMap, RopeSpec
from ropekit.hf.cast import BufferFrequencies
from ropekit.phases import rope_tables
from ropekit.presets import PRESETS
from ropekit.scaling import NTK, DynamicNTK, LongRope, Scaling


def _subclasses(cls: type) -> set[type]:
    out = {cls}
    for sub in cls.__subclasses__():
        out |= _subclasses(sub)
    return out


def _specs() -> dict[str, RopeSpec]:
    specs = {}
    for name, preset in PRESETS.items():
        for layer_type in preset.layer_types or (None,):
            specs[f"{name}/{layer_type}"] = preset.spec(layer_type)
    specs["ntk-factor"] = RopeSpec(head_dim=64, scaling=NTK(factor=4.0))
    specs["ntk-alpha"] = RopeSpec(head_dim=64, scaling=NTK(alpha=1000.0))
    specs["dynamic"] = RopeSpec(head_dim=64, scaling=DynamicNTK(factor=2.0, max_position_embeddings=64))
    specs["buffer"] = RopeSpec(
        head_dim=8, freqs=(1.0, 0.5, 0.25, 0.125), scaling=BufferFrequencies(factor=1.25)
    )
    specs["longrope-short"] = RopeSpec(
        head_dim=8,
        scaling=LongRope(
            short_factor=(1.0, 1.5, 2.0, 3.0),
            long_factor=(2.0, 3.0, 5.0, 7.0),
            original_max_position_embeddings=32,
            factor=4.0,
        ),
    )
    specs["interleaved-partial-p"] = RopeSpec(head_dim=96, rotary_dim=32, layout="interleaved", p=0.75)
    specs["mrope-interleaved"] = RopeSpec(
        head_dim=128, base=1e6, axes=AxisMap(scheme="interleaved", sections=(24, 20, 20))
    )
    return specs


SPECS = _specs()


def test_every_scaling_class_is_enumerated() -> None:
    used = {type(s.scaling) for s in SPECS.values() if s.scaling is not None}
    ours = {c for c in _subclasses(Scaling) - {Scaling} if c.__module__.startswith("ropekit.")}  # not tests' own
    missing = {c.__name__ for c in ours} - {c.__name__ for c in used}
    assert not missing, f"add a spec with {sorted(missing)} to _specs()"
    assert any(s.axes is not None for s in SPECS.values())


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("name", SPECS)
def test_traced_tables_equal_eager_tables(name: str, dynamic: bool) -> None:
    """dynamic=True: every float field of the spec would be a symbolic input if the trace read it (it failed with
    "Unsupported hasattr call" on a SymFloat); the tables must still be the eager ones."""
    spec = SPECS[name]
    torch._dynamo.reset()
    row = torch.tensor([0, 1, 7, 100, 4095, 2**40])
    if spec.axes is None:
        positions = row[None]
    else:  # one row per axis, different on each (band j takes its axis's row)
        positions = torch.stack([row // (a + 1) for a in range(len(spec.axes.names))])
    seq_len = 8192 if spec.dynamic else None
    fn = torch.compile(
        lambda p: rope_tables(p, spec, seq_len=seq_len), fullgraph=True, backend="eager", dynamic=dynamic
    )
    cos, sin = fn(positions)
    cos_e, sin_e = rope_tables(positions, spec, seq_len=seq_len)
    torch.testing.assert_close(cos, cos_e, rtol=0, atol=0)
    torch.testing.assert_close(sin, sin_e, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("bad", "err"), [(0, ValueError), (-5, ValueError), (True, TypeError), (2.5, TypeError)]
)
def test_seq_len_must_be_a_length(bad: object, err: type[Exception]) -> None:
    """A dynamic map reads seq_len; 0, negative or fractional lengths used to mean "unscaled" silently."""
    from ropekit.scaling import DynamicNTK

    spec = RopeSpec(8, scaling=DynamicNTK(2.0, 10))
    for call in (
        lambda: rope_tables(torch.arange(3), spec, seq_len=bad),  # type: ignore[arg-type]
        lambda: spec.frequencies(bad),  # type: ignore[arg-type]
        lambda: spec.inv_freq(bad),  # type: ignore[arg-type]
    ):
        with pytest.raises(
            err, match=rf"seq_len must be an int >= 1 \(a sequence length\) or None, got {bad!r}"
        ):
            call()
    # an integer-like length is a length: numpy's int64 gives the int's frequencies
    np = pytest.importorskip("numpy")
    assert torch.equal(spec.frequencies(np.int64(40)), spec.frequencies(40))
    assert not torch.equal(spec.frequencies(40), spec.frequencies(10))  # scaled past 10: the length is read


@pytest.mark.parametrize("bad", [None, {"head_dim": 8}, "llama"], ids=["None", "dict", "str"])
def test_rope_tables_spec_must_be_a_spec(bad: object) -> None:
    """A wrong spec is a TypeError naming spec and what was given (a user trial got AttributeError 'dynamic')."""
    with pytest.raises(TypeError, match=rf"spec must be a ropekit.RopeSpec, got {type(bad).__name__}"):
        rope_tables(torch.arange(3), bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float64, torch.float32])
@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")])
def test_rope_tables_refuses_meta_positions_for_tables_elsewhere(dtype: torch.dtype, device: object) -> None:
    """Meta positions have no values: device='cpu' is refused with a ValueError (int positions used to fail in torch
    with 'Cannot copy out of meta tensor', float positions silently returned meta tables, ignoring device=)."""
    meta = torch.arange(5, device="meta").to(dtype)
    for spec in (RopeSpec(head_dim=8), SPECS["mrope-interleaved"]):
        pos = meta if spec.axes is None else torch.stack([meta] * 3)
        with pytest.raises(ValueError, match="positions are on the meta device \\(no values\\) but device="):
            rope_tables(pos, spec, device=device)  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", [torch.int64, torch.float64])
def test_rope_tables_meta_positions_give_meta_tables_of_the_right_shape(dtype: torch.dtype) -> None:
    """Shape-only use stays: meta positions with device None or meta, and values with device='meta'."""
    spec = RopeSpec(head_dim=8)
    for pos, device in (
        (torch.arange(5, device="meta").to(dtype), None),
        (torch.arange(5, device="meta").to(dtype), "meta"),
        (torch.arange(5).to(dtype), "meta"),
    ):
        cos, sin = rope_tables(pos, spec, device=device)
        assert cos.is_meta and sin.is_meta and cos.shape == sin.shape == (5, 4)


def test_traced_constants_follow_the_spec_object_passed() -> None:
    """The constants are folded per spec object (its id, guarded): another spec, equal or not, passed to the same
    compiled function gets its own constants, with static and dynamic shapes. Oracle: eager tables."""
    specs = [RopeSpec(16, base=1e4), RopeSpec(16, base=5e5), RopeSpec(16, base=1e4), SPECS["ntk-factor"]]
    for dynamic in (False, True):
        torch._dynamo.reset()
        fn = torch.compile(lambda p, s: rope_tables(p, s), fullgraph=True, backend="eager", dynamic=dynamic)
        for spec in specs + specs[::-1]:
            p = torch.arange(5) * 1000
            for got, want in zip(fn(p, spec), rope_tables(p, spec), strict=True):
                torch.testing.assert_close(got[..., : want.shape[-1]], want, rtol=0, atol=0)


@pytest.mark.parametrize("dynamic", [None, True])  # None: automatic dynamic shapes from the second length on
@pytest.mark.parametrize("name", ["dynamic", "ntk-factor"])
def test_traced_seq_len_from_a_dynamic_shape(name: str, dynamic: bool | None) -> None:
    """seq_len = positions.shape[0], a symbolic size: a dynamic spec folds its constants at the length's value (a
    new length, a new graph: its frequencies change), a static spec ignores it (at most two graphs: the first
    length static, then one dynamic graph)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    spec, most = SPECS[name], (99 if SPECS[name].dynamic else 2)
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("eager")

    def tables(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return rope_tables(p, spec, seq_len=p.shape[0])

    fn = torch.compile(tables, fullgraph=True, backend=counter, dynamic=dynamic)
    for n in (5, 40, 70, 130, 131):
        p = torch.arange(n)
        for got, want in zip(fn(p), rope_tables(p, spec, seq_len=n), strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert counter.frame_count <= most
