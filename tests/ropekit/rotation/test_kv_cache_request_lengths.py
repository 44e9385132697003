"""Paged KV-cache writes of requests of different lengths under a dynamic scheme: the documented recipe (per-request
``tables`` rows) gives each request its own length's frequencies; plain ``positions`` use the whole call's length.

Trial finding (T2): undocumented. Oracle: dynamic NTK written from its formula (transformers' ``_compute_dynamic_ntk_
parameters``: base * (factor * L / L0 - (factor - 1)) ** (d / (d - 2)) for L > L0), the rotation in float64.
"""

from __future__ import annotations

import torch

from ropekit import RopeSpec, rope_paged_cache_write, rope_tables
from ropekit.scaling import DynamicNTK

D, L0, FACTOR = 16, 16, 2.0
SPEC = RopeSpec(D, base=1e4, scaling=DynamicNTK(FACTOR, L0))
LENGTHS = (10, 40)  # request A within L0, request B past it


def _rotated64(k: torch.Tensor, pos: torch.Tensor, length: int) -> torch.Tensor:
    base = 1e4 * (FACTOR * length / L0 - (FACTOR - 1)) ** (D / (D - 2)) if length > L0 else 1e4
    theta = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = pos.double()[:, None] * theta
    c, s = ang.cos()[:, None], ang.sin()[:, None]
    a, b = k.double()[..., : D // 2], k.double()[..., D // 2 :]
    return torch.cat([a * c - b * s, b * c + a * s], -1)


def _write(**kw: object) -> tuple[torch.Tensor, torch.Tensor]:
    T = sum(LENGTHS)
    k = torch.randn(T, 2, D, generator=torch.Generator().manual_seed(0))
    ck, cv = torch.zeros(8, 16, 2, D), torch.zeros(8, 16, 2, D)
    rope_paged_cache_write(k, k, ck, cv, torch.arange(T), SPEC, **kw)  # type: ignore[arg-type]
    return k, ck.reshape(-1, 2, D)[:T]


def test_per_request_tables_keep_each_request_its_own_frequencies() -> None:
    pos = [torch.arange(n) for n in LENGTHS]
    rows = [rope_tables(p, SPEC, seq_len=n) for p, n in zip(pos, LENGTHS, strict=True)]
    tables = (torch.cat([r[0] for r in rows]), torch.cat([r[1] for r in rows]))
    k, got = _write(tables=tables)
    want = torch.cat([_rotated64(kk, p, n) for kk, p, n in zip(k.split(LENGTHS), pos, LENGTHS, strict=True)])
    torch.testing.assert_close(got.double(), want, rtol=0, atol=2e-6)


def test_plain_positions_use_the_length_of_the_whole_call() -> None:
    pos = torch.cat([torch.arange(n) for n in LENGTHS])
    k, got = _write(positions=pos)
    torch.testing.assert_close(got.double(), _rotated64(k, pos, max(LENGTHS)), rtol=0, atol=2e-6)
    a = LENGTHS[0]
    assert float((got[:a].double() - _rotated64(k[:a], pos[:a], a)).abs().max()) > 1e-2  # not A's own
