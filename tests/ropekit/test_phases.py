# SPDX-License-Identifier: MIT
"""The spec's passage into the constant-folded phase constants under torch.compile (ropekit/phases.py).

torch 2.11's dynamo cannot hand a frozen dataclass instance to a constant-folded function ("can't reconstruct
arbitrary frozen dataclass instances"), so every compiled call of apply_rope, Rotary, rope_tables, ... failed there
(seen on the GPU machine's torch 2.11, twelfth session). The spec now crosses as plain constants and is rebuilt on
the other side. These tests enumerate every spec a user can reach (every preset and layer type, every scaling class
including subclasses defined outside ropekit.scaling, a multi-axis spec, explicit frequencies): the plain form holds
only classes, numbers, strings, None and tuples, it rebuilds an equal spec, and the traced tables equal the eager
ones bit for bit. CI runs torch 2.13; the same tests passed under torch 2.11 on the CPU (see docs/kernels.md).
"""

from __future__ import annotations

import pytest
import torch

from ropekit import AxisMap, RopeSpec
from ropekit.hf.cast import BufferFrequencies
from ropekit.phases import _from_plain, _plain, rope_tables
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
_PLAIN_TYPES = (int, float, str, bool, type(None))


def _only_plain(value: object) -> bool:
    if isinstance(value, tuple):
        return all(isinstance(v, type) or _only_plain(v) for v in value)
    return isinstance(value, _PLAIN_TYPES)


def test_every_scaling_class_is_enumerated() -> None:
    used = {type(s.scaling) for s in SPECS.values() if s.scaling is not None}
    missing = {c.__name__ for c in _subclasses(Scaling) - {Scaling}} - {c.__name__ for c in used}
    assert not missing, f"add a spec with {sorted(missing)} to _specs()"
    assert any(s.axes is not None for s in SPECS.values())


@pytest.mark.parametrize("name", SPECS)
def test_plain_form_holds_only_constants_and_rebuilds_an_equal_spec(name: str) -> None:
    spec = SPECS[name]
    plain = _plain(spec)
    assert _only_plain(plain), plain
    rebuilt = _from_plain(plain)
    assert type(rebuilt) is RopeSpec and rebuilt == spec
    assert type(rebuilt.scaling) is type(spec.scaling)
    assert rebuilt.axes == spec.axes and rebuilt.attention_factor == spec.attention_factor


@pytest.mark.parametrize("name", SPECS)
def test_traced_tables_equal_eager_tables(name: str) -> None:
    spec = SPECS[name]
    torch._dynamo.reset()
    row = torch.tensor([0, 1, 7, 100, 4095, 2**40])
    if spec.axes is None:
        positions = row[None]
    else:  # one row per axis, different on each (band j takes its axis's row)
        positions = torch.stack([row // (a + 1) for a in range(len(spec.axes.names))])
    seq_len = 8192 if spec.dynamic else None
    fn = torch.compile(
        lambda p: rope_tables(p, spec, seq_len=seq_len), fullgraph=True, backend="eager", dynamic=False
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
