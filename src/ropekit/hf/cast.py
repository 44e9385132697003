# SPDX-License-Identifier: MIT
"""The frequencies of a transformers model cast to float16 / bfloat16: what its rotary module really uses.

A transformers rotary module keeps its frequencies in a buffer, ``inv_freq`` (``<layer_type>_inv_freq`` for
per-layer-type modules), and its forward reads that buffer (``inv_freq.float()``). ``model.to(torch.bfloat16)``,
``model.half()`` and the like cast every floating buffer, so from then on the model rotates with its frequencies
rounded to the cast dtype: relative error up to 2^-11 (float16) or 2^-8 (bfloat16) per frequency, a phase error
that grows with the position (for theta = 0.3 in bfloat16, up to ~1e-3 rad per position, ~1 rad by position 1000).
Loading with ``from_pretrained(..., dtype=...)`` keeps the buffers in float32; only an explicit cast rounds them.

To give the same logits as the unpatched model, ropekit's replacement then takes transformers' frequencies as they
are: the current values of the buffer (exactly representable in float64) as an explicit ``RopeSpec.freqs`` table,
with the scheme's attention factor (:class:`BufferFrequencies`). The phases stay exact -- for those frequencies.
The patch warns when it does this (the fix is to keep the rotary buffers in float32: load with ``dtype=``).

Dynamic schemes work as in transformers: its decorator has already updated (or re-registered, in float32) the
buffer when the replacement reads it, so the frequencies of the current length are those of the buffer.

Shapes: inv_freq [n], n = rotary_dim // 2.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import nn

from ropekit.scaling.base import Scaling, check_number
from ropekit.spec import RopeSpec

_T = TypeVar("_T")

__all__ = [
    "ROUNDED_DTYPES",
    "BufferFrequencies",
    "buffer_hint",
    "buffer_spec",
    "buffer_state",
    "cast_dtype",
    "judged_buffer",
    "reads_buffers",
    "round_trip_dtype",
    "warn_cast",
]

#: buffer dtypes that mean the module was cast below float32 (its frequencies are rounded)
ROUNDED_DTYPES = (torch.float16, torch.bfloat16)
_MEMO = "_ropekit_buffer_specs"
_WARNED = "_ropekit_cast_warned"


@dataclass(frozen=True)
class BufferFrequencies(Scaling):
    """No change of the frequencies (they come as an explicit table), only the scheme's attention factor.

    Args:
        factor: multiplies cos and sin (the attention factor of the scheme the table was computed with).
    """

    factor: float = 1.0
    rope_type = "buffer"

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "factor", check_number("BufferFrequencies", "factor", self.factor, lo=0.0, lo_open=True)
        )

    @property
    def attention_factor(self) -> float:
        return float(self.factor)

    def to_hf(self) -> dict[str, Any]:
        raise ValueError(
            "BufferFrequencies (a cast model's rounded frequency table) has no transformers rope_parameters "
            "equivalent"
        )


def _prefix(layer_type: str | None) -> str:
    return "" if layer_type is None else f"{layer_type}_"


def cast_dtype(module: nn.Module, layer_type: str | None = None) -> torch.dtype | None:
    """The rounded dtype of the module's frequency buffers (inv_freq or original_inv_freq), or None.

    None when both are float32 / float64 or absent: the module's frequencies are its config's.
    """
    buffers = module._buffers
    p = _prefix(layer_type)
    for name in (f"{p}inv_freq", f"{p}original_inv_freq"):
        b = buffers.get(name)
        if b is not None and b.dtype in ROUNDED_DTYPES:
            return b.dtype
    return None


_TRIP_MEMO = "_ropekit_round_trips"


def buffer_state(buf: torch.Tensor) -> tuple[int, int, torch.dtype]:
    """A buffer's state for memos: (storage, version, dtype) -- changed by an in-place edit, a reassignment or a cast."""
    return buf.untyped_storage().data_ptr(), buf._version, buf.dtype


def round_trip_dtype(module: nn.Module, spec: RopeSpec, layer_type: str | None = None) -> torch.dtype | None:
    """The lower precision a float32 frequency buffer went through and back (``model.to(bf16).to(float32)``), or
    None: its values are then the config's rounded to that dtype, which transformers rotates with, though the
    buffer's dtype no longer shows the cast. Checked once per buffer state (storage, version); None for a buffer
    that matches the config's frequencies, differs by more than a round trip can (left to the patch's probe), or
    is absent. Dynamic specs are compared with their unscaled frequencies: transformers rotates with the (rounded)
    buffer until the length grows past the original, then recomputes it exactly (no round trip then).

    Shapes: the buffer [n] (n = spec.n_bands).
    """
    name = f"{_prefix(layer_type)}inv_freq"
    buf = module._buffers.get(name)
    if buf is None or buf.dtype not in (torch.float32, torch.float64) or buf.numel() != spec.n_bands:
        return None

    def judge(got: torch.Tensor, want: torch.Tensor) -> torch.dtype | None:
        far = bool(((got - want).abs() > 1e-6 * want.abs()).any())
        return _round_trip_dtype(got, want) if far else None

    return judged_buffer(module, _TRIP_MEMO, layer_type, buf, spec, judge)


def judged_buffer(
    module: nn.Module,
    memo_name: str,
    layer_type: str | None,
    buf: torch.Tensor,
    spec: RopeSpec,
    judge: Callable[[torch.Tensor, torch.Tensor], _T],
) -> _T:
    """``judge(got, want)`` of a frequency buffer's values against ``spec``'s frequencies (both float64 [n] on the
    CPU), run once per buffer state (storage, version, dtype) and spec: the answer is memoised in the module's
    ``memo_name`` dict under ``layer_type``."""
    memo: dict[str | None, tuple[Any, _T]] = module.__dict__.setdefault(memo_name, {})
    key = (*buffer_state(buf), spec)
    hit = memo.get(layer_type)
    if hit is not None and hit[0] == key:
        return hit[1]
    out = judge(
        buf.detach().to("cpu", torch.float64).flatten(), spec.frequencies().to(torch.float64).flatten()
    )
    memo[layer_type] = (key, out)
    return out


def buffer_spec(module: nn.Module, spec: RopeSpec, layer_type: str | None = None) -> RopeSpec:
    """``spec`` with the module's current ``inv_freq`` values as its frequency table (attention factor kept).

    Memoised per buffer state (storage, version, dtype); under ``torch.compile`` the last table of the layer
    type is used (a compiled model's buffers are not recast between calls).

    Raises:
        ValueError: the buffer is absent or its length is not the spec's number of bands.
    """
    name = f"{_prefix(layer_type)}inv_freq"
    buf = module._buffers.get(name)
    if buf is None:
        raise ValueError(f"{type(module).__name__} has no {name} buffer to read its cast frequencies from")
    memo: dict[str | None, tuple[Any, RopeSpec]] = module.__dict__.setdefault(_MEMO, {})
    if torch.compiler.is_compiling():
        hit = memo.get(layer_type)
        if hit is None:
            raise ValueError(
                f"{type(module).__name__}: its {name} buffer is {buf.dtype} (the model was cast); run one forward "
                "outside torch.compile first so ropekit reads the rounded frequencies"
            )
        return hit[1]
    key = (buf.untyped_storage().data_ptr(), buf._version, buf.dtype, spec)
    hit = memo.get(layer_type)
    if hit is not None and hit[0] == key:
        return hit[1]
    values = buf.detach().to("cpu", torch.float64).flatten().tolist()
    if len(values) != spec.n_bands:
        raise ValueError(
            f"{type(module).__name__}.{name} has {len(values)} frequencies, the spec {spec.n_bands} bands "
            f"(rotary_dim={spec.rotary_dim}); ropekit cannot take its cast frequencies"
        )
    af = spec.attention_factor
    out = RopeSpec(
        head_dim=spec.head_dim,
        rotary_dim=spec.rotary_dim,
        layout=spec.layout,
        freqs=tuple(values),
        scaling=None if af == 1.0 else BufferFrequencies(af),
    )
    memo[layer_type] = (key, out)
    return out


def reads_buffers(
    module: nn.Module, run: Callable[[nn.Module], list[torch.Tensor]], ref: list[torch.Tensor]
) -> bool:
    """Whether the module's forward rotates with its ``*inv_freq`` buffers (transformers' pattern, so a cast
    model rotates with rounded frequencies) rather than recomputing them from its config (Phi-MoE): ``run`` on a
    copy with those buffers (and a cached ``long_inv_freq``) halved must give tables other than ``ref``."""
    probe = copy.deepcopy(module)
    halved = False
    for name, buf in probe.named_buffers(recurse=False):
        if name.endswith("inv_freq") and buf.is_floating_point():
            buf.mul_(0.5)
            halved = True
    for name, value in list(vars(probe).items()):
        if name.endswith("inv_freq") and isinstance(value, torch.Tensor):
            setattr(probe, name, value * 0.5)
    if not halved:
        return False
    return any(not torch.equal(a, b) for a, b in zip(ref, run(probe)))


def _round_trip_dtype(got: torch.Tensor, want: torch.Tensor) -> torch.dtype | None:
    """The dtype of :data:`ROUNDED_DTYPES` whose round trip (want -> dtype -> float32) can give ``got``, or None.

    A round trip leaves values on the dtype's grid, each within half a unit in the last place of the exact value:
    ``u |w|`` (unit roundoff u = 2^-11 float16, 2^-8 bfloat16) for normal values, half the subnormal spacing
    (2^-25 for float16) below them -- so a float16 round trip can move a small frequency by far more than 2^-11
    relative (a frequency below 2^-25 ~ 3e-8 becomes 0: relative difference 1), and a fixed relative threshold
    cannot tell it from a config mismatch. Slack 1e-6 relative: transformers computes the frequencies in float32.

    Shapes: got, want [n] float64.
    """
    mag = want.abs()
    for dt in ROUNDED_DTYPES:
        fi = torch.finfo(dt)
        u = fi.eps / 2
        tol = torch.clamp_min(mag * u, fi.smallest_normal * u) * (1 + u) + 1e-6 * mag
        if torch.equal(got.to(dt).double(), got) and bool(((got - want).abs() <= tol).all()):
            return dt
    return None


def buffer_hint(module: nn.Module, spec: RopeSpec, lt: str | None) -> str:
    """Why a module's tables may differ: its inv_freq buffer is not its config's frequencies.

    Either a model cast to float16 / bfloat16 and back (rounded values in a float32 buffer: the buffer's values are
    the config's, rounded to that dtype), or a rotary module whose frequencies are not its config's at all (a
    config edited after the model was built: more than any round trip can cause, see :func:`_round_trip_dtype`).
    """
    name = "inv_freq" if lt is None else f"{lt}_inv_freq"
    buf = module._buffers.get(name)
    if buf is None or spec.dynamic or buf.numel() != spec.n_bands:
        return ""
    want = spec.frequencies()
    got = buf.detach().cpu().double().flatten()
    rel = float(((got - want).abs() / want.clamp_min(1e-300)).max())
    if rel <= 1e-6:
        return ""
    head = (
        f"; its {name} buffer ({buf.dtype}) differs from its config's frequencies by up to {rel:.1e} relative"
    )
    dt = _round_trip_dtype(got, want)
    if dt is not None:
        return (
            f"{head}, as a round trip through {dt} gives (cast to a lower precision and back? rebuild or reload "
            "the model)"
        )
    return (
        f"{head}, more than a round trip through float16 or bfloat16 can cause: the rotary module's frequencies "
        "do not match its config (was the config edited after the model was built? rebuild the model from the "
        "edited config)"
    )


def warn_cast(module: nn.Module, dtype: torch.dtype, where: str, stacklevel: int = 3) -> None:
    """Warn once per module that it rotates with frequencies rounded to ``dtype`` (see the module docstring)."""
    if module.__dict__.get(_WARNED) == dtype:
        return
    module.__dict__[_WARNED] = dtype
    warnings.warn(
        f"ropekit.hf: {where}: the rotary frequency buffers are {dtype} (the model was cast), so transformers "
        f"rotates with its frequencies rounded to {dtype}; the patch keeps those frequencies (exact phases for "
        "them) to give the same outputs. Load with from_pretrained(..., dtype=...) instead of casting to keep "
        "them in float32.",
        stacklevel=stacklevel,
    )
