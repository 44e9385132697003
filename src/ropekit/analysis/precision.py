# SPDX-License-Identifier: MIT
"""How exact are the phases? ropekit's tables and the common float32 recipe, both measured against float64.

The *common recipe* (:mod:`ropekit.analysis.recipe`) is what HF transformers, Megatron, TransformerEngine and
torchtune do, scheme by scheme: float32 ``inv_freq`` from the scheme's own init, ``position * inv_freq`` in float32,
float32 cos/sin times the attention factor. The oracle is float64 ``cos(p * theta_i)`` of the unreduced angle:

- theta_i from Python floats (:func:`ropekit.rotation.reference.reference_frequencies`, written from the formulas
  independently of ropekit's table code) wherever that reference has a formula (plain RoPE, p-RoPE, partial
  rotation, explicit tables, linear interpolation), else the scheme's float64 frequencies
  (:meth:`RopeSpec.frequencies`; checked against transformers' own functions in the tests);
- the float64 product p * theta_i is correct to about |p * theta_i| * 1.1e-16 (2e-9 at position 2^24 for theta 1),
  which bounds how small an error the table can resolve: :attr:`PhaseError.oracle_bound`.

Dynamic schemes (dynamic NTK, LongRoPE) are measured at sequence length ``position + 1``, as transformers runs
them when the window ending at ``position`` is the current batch.

Shapes: w window positions, n bands.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass

import torch

from ropekit.analysis.recipe import common_fp32_inv_freq, common_fp32_tables
from ropekit.integers import whole
from ropekit.phases import _rope_tables
from ropekit.rotation.reference import reference_frequencies
from ropekit.spec import RopeSpec, require_spec

__all__ = [
    "DEFAULT_POSITIONS",
    "RESOLVED",
    "PhaseError",
    "common_fp32_inv_freq",
    "common_fp32_tables",
    "oracle_frequencies",
    "oracle_tables",
    "phase_error",
    "phase_error_table",
    "unresolved_note",
]

DEFAULT_POSITIONS: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000, 10_000_000, 1 << 24)
_ULP64 = 2.0**-53
#: the largest oracle error bound at which a measurement still resolves ropekit's own error (~3e-8, half a float32
#: ulp): above it the float64 reference cannot tell ropekit's error from its own (:attr:`PhaseError.resolved`)
RESOLVED = 1e-8


def oracle_frequencies(spec: RopeSpec, seq_len: int | None = None) -> list[float]:
    """theta_i [n] for the oracle: the independent Python-float reference where it has a formula, else float64."""
    try:
        return reference_frequencies(spec)
    except NotImplementedError:  # scaled schemes: the scheme's float64 frequencies at this length
        return [float(t) for t in spec.frequencies(seq_len).tolist()]


def oracle_tables(
    positions: torch.Tensor, spec: RopeSpec, *, seq_len: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 cos/sin [*P, n] of the unreduced float64 angle, times the attention factor."""
    require_spec(spec)
    if spec.dynamic and seq_len is None and positions.numel():
        seq_len = int(positions.max().item()) + 1
    theta = torch.tensor(oracle_frequencies(spec, seq_len), dtype=torch.float64)
    angle = positions.to(torch.float64).unsqueeze(-1) * theta
    return torch.cos(angle) * spec.attention_factor, torch.sin(angle) * spec.attention_factor


@dataclass(frozen=True)
class PhaseError:
    """Max |cos - cos_ref| and |sin - sin_ref| over the window ending at ``position``.

    ``oracle_bound`` is the oracle's own error bound there (|largest angle| * 2^-53 times the attention factor):
    errors near or below it are "as exact as float64 can tell". ``window`` is the number of positions actually
    measured: the requested window, clipped at position 0.
    """

    position: int
    window: int
    ropekit: float
    common_fp32: float
    oracle_bound: float = 0.0

    @property
    def resolved(self) -> bool:
        """Whether the oracle resolves ropekit's error here (``oracle_bound <= RESOLVED``); if not, ropekit's value
        is the reference's own noise, not a measurement of ropekit."""
        return self.oracle_bound <= RESOLVED

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def unresolved_note(oracle_bound: float) -> str:
    """The footnote for values marked ``*`` (not resolved): how accurate the float64 reference is there."""
    return (
        f"* the float64 reference is itself only accurate to about {oracle_bound:.1e} there (|angle| * 2^-53): "
        "smaller errors are not resolved"
    )


def phase_error(spec: RopeSpec, position: int, *, window: int = 2048) -> PhaseError:
    """Measure both recipes on the ``window`` positions ending at ``position`` (inclusive, clipped at 0).

    Args:
        spec: any RoPE configuration (every scheme, p-RoPE, partial rotation, explicit tables).
        position: the last position measured (>= 0).
        window: how many positions end at ``position`` (>= 1).

    Returns:
        The :class:`PhaseError` of ropekit's tables and of the common float32 recipe.
    """
    require_spec(spec)
    position = whole(position, 0, f"position must be an int >= 0, got {position!r}")
    window = whole(window, 1, f"window must be an int >= 1, got {window!r}")
    if spec.axes is not None:
        # multi-axis spec: every band's phase is its axis position times theta_j, each reduced by the same 1-D
        # recipe, so the error at position p is the 1-D error of the same frequencies (text tokens: t = h = w)
        spec = dataclasses.replace(spec, axes=None)
    lo = max(0, position - window + 1)
    pos = torch.arange(lo, position + 1, dtype=torch.int64)
    seq_len = position + 1 if spec.dynamic else None
    ref_c, ref_s = oracle_tables(pos, spec, seq_len=seq_len)

    def err(c: torch.Tensor, s: torch.Tensor) -> float:
        return float(torch.maximum((c.double() - ref_c).abs().max(), (s.double() - ref_s).abs().max()))

    theta_max = max(oracle_frequencies(spec, seq_len))
    bound = position * theta_max * _ULP64 * spec.attention_factor
    return PhaseError(
        position,
        int(pos.numel()),
        # the exact tables rope_tables returns, computed for these positions only (rope_tables would first grow
        # its shared cache to every position up to this one: 2 s at 131k positions, for 2048 rows)
        err(*_rope_tables(pos, spec, seq_len=seq_len)),
        err(*common_fp32_tables(pos, spec, seq_len=seq_len)),
        bound,
    )


def phase_error_table(
    spec: RopeSpec, positions: tuple[int, ...] = DEFAULT_POSITIONS, *, window: int = 2048
) -> list[PhaseError]:
    """:func:`phase_error` at each position."""
    return [phase_error(spec, p, window=window) for p in positions]
