# SPDX-License-Identifier: MIT
"""The frequency table of a :class:`ropekit.spec.RopeSpec`: an explicit ``freqs`` table checked and normalised, and
the effective float64 frequencies after p-RoPE and the phase map, computed once per spec and sequence length.

Moved out of :mod:`ropekit.spec` unchanged (``ropekit.spec`` still imports every name from here): the spec's
constructor calls :func:`_freq_table` and :func:`_kept_bands`; :meth:`RopeSpec.frequencies`,
:meth:`RopeSpec.inv_freq` and :mod:`ropekit.phases` read :func:`_frequencies_cpu`.

Shapes: r = rotary_dim, n = r // 2 bands; the frequencies are [n] float64 on the CPU.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

import numpy as np
import torch

from ropekit.integers import as_real, past_float64, shown

if TYPE_CHECKING:
    from ropekit.spec import RopeSpec

__all__: list[str] = []  # private helpers of ropekit.spec


def _scalar(v: object) -> object:
    """A 0-d real tensor entry as its Python number (a list of such tensors is a table); anything else as it is."""
    if isinstance(v, torch.Tensor) and v.dim() == 0 and not (v.dtype.is_complex or v.dtype == torch.bool):
        return v.item()
    return v


def _freq_table(freqs: object, n: int) -> tuple[float, ...]:
    """``RopeSpec.freqs`` as a tuple of n finite floats >= 0: an ordered sequence (list, tuple, 1-D numpy array or
    tensor) of real numbers; sets (no order), mappings (their keys), strings and bool entries are refused."""
    head = "RopeSpec.freqs must be an ordered sequence (list, tuple, 1-D array or tensor) of real numbers"
    if isinstance(freqs, (torch.Tensor, np.ndarray)):
        dt = str(freqs.dtype)
        if freqs.ndim != 1 or "bool" in dt or "complex" in dt:
            raise ValueError(f"{head}, got a {tuple(freqs.shape)} {type(freqs).__name__} of {dt}")
        entries: list[object] = freqs.tolist()
    elif isinstance(freqs, Sequence) and not isinstance(freqs, (str, bytes, bytearray)):
        entries = [_scalar(v) for v in freqs]
    else:
        kind = (
            "a set (no order: its iteration order is not the band order)"
            if isinstance(freqs, AbstractSet)
            else "a mapping (its keys are not a frequency table)"
            if isinstance(freqs, Mapping)
            else f"a {type(freqs).__name__}"
        )
        raise ValueError(f"{head}, got {kind}: {shown(freqs, 80)}")  # noqa: TRY004 - field errors: ValueError
    table: list[float] = []
    for i, v in enumerate(entries):
        x = as_real(v)
        if x is None or x < 0.0:
            what = "a bool" if isinstance(v, (bool, np.bool_)) else shown(v)
            raise ValueError(
                f"RopeSpec.freqs entries must be finite real numbers >= 0 (not bools){past_float64(v)}, got {what} "
                f"at index {i} of {shown(freqs, 80)}"
            )
        table.append(x)
    if len(table) != n:
        raise ValueError(
            f"RopeSpec.freqs must have rotary_dim/2 = {n} entries, got {len(table)}: {tuple(table)!r}"
        )
    return tuple(table)


def _kept_bands(p: float, n: int) -> int:
    # floor(p * n) with a guard against representation error (0.29 * 100 = 28.999999999999996).
    return min(n, math.floor(p * n + 1e-9))


@functools.lru_cache(
    maxsize=256
)  # explicit device="cpu": a `with torch.device("meta")` block must not leak in
def _frequencies_cpu(spec: RopeSpec, seq_len: int | None) -> torch.Tensor:
    n = spec.n_bands
    r = int(spec.rotary_dim)  # type: ignore[arg-type]
    sc = spec.scaling
    if spec.freqs is not None:
        theta = torch.tensor(spec.freqs, dtype=torch.float64, device="cpu")
    else:
        base = spec.base if sc is None else sc.effective_base(spec.base, rotary_dim=r, seq_len=seq_len)
        # int64 arange, then float64: immune to float-arange patching (DeepSpeed zero.Init, HF #28685).
        exponent = torch.arange(0, 2 * n, 2, dtype=torch.int64, device="cpu").to(torch.float64) / float(r)
        theta = torch.tensor(base, dtype=torch.float64, device="cpu").pow(-exponent)
    keep = _kept_bands(spec.p, n)
    if keep < n:
        # p-RoPE: zero the (n - keep) lowest frequencies (stable order: ties keep the earlier band).
        order = torch.argsort(-theta, stable=True)
        theta = theta.clone()
        theta[order[keep:]] = 0.0
    if sc is not None:
        theta = sc.scale(theta, base=spec.base, rotary_dim=r, seq_len=seq_len).to(torch.float64)
    return theta
