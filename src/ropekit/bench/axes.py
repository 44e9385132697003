# SPDX-License-Identifier: MIT
"""``ropekit bench --mode axes``: multi-axis RoPE against 1-D RoPE of the same tensors (issue 10 point 3, target
<= 1.3x), and both against the memory floor.

Multi-axis kinds (M-RoPE, Wang et al. 2024 "Qwen2-VL"; axial 2-D RoPE, Heo et al. 2024 "Rotary Position Embedding
for Vision Transformer"):

- ``qwen2-vl``: three axes (t, h, w), contiguous sections [16, 24, 24], half split, head dim 128;
- ``qwen3-vl``: three axes, interleaved sections [24, 20, 20] (bands cycle t, h, w), head dim 128;
- ``2-d vision``: Pixtral's (row, col) split on a 32 x 32 patch grid, head dim 64 (prefill only: encoders never
  decode).

Each is timed through what users call, next to the 1-D spec of the same head dim on the same q and k:

- ``tables``: :func:`ropekit.apply_rope_tables` with tables given (1-D tables vs per-token multi-axis tables);
- ``Rotary``: the :class:`ropekit.Rotary` module with positions ([b, s] vs [A, b, s]; its cached tables);
- ``apply``: :func:`ropekit.apply_rope` with positions vs :func:`ropekit.apply_rope_axes` (tables built per call).

Every entry point rotates q and k in place (``inplace=True``), as the matrix mode does, and the floor is the faster
of copying q and k into preallocated tensors and ``mul_(1.0)`` on them. Out of place every call would also get
fresh output memory, whose cost depends on the allocator's state, not on RoPE: glibc's heap trimming made such a
call's time bimodal between runs of the same command (~113k vs ~243k page faults per run; multi-axis `apply` 1.1x
or 4-5x the 1-D one), which said nothing about the rotation.

Rows carry ``ratio_to_1d`` (multi-axis median / the same entry point's 1-D median, same rounds) besides the
``ratio_to_floor`` of every mode. Shapes, format "bhsd": prefill 1 x 16 q heads x 4 kv heads x 2048 tokens (512 with
--quick) with a square image grid in its middle (t fixed, h and w the grid), decode 32 sequences x 1 generated text
token at positions near 3000 (t = h = w, as in generation: the 1-D path is taken, :func:`ropekit.axis_tables.
equal_axes_row`); vision 1 x 16 x 16 x 1024 patches (256 quick).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ropekit.axis_tables import apply_rope_axes, axis_tables
from ropekit.bench.timing import measure, rows
from ropekit.module import Rotary
from ropekit.phases import rope_tables
from ropekit.presets_vl import pixtral_spec, qwen2_vl_spec, qwen3_vl_spec
from ropekit.rotation.apply import apply_rope, apply_rope_tables
from ropekit.spec import RopeSpec

__all__ = ["ENTRY_POINTS", "FLOORS", "KINDS", "QUICK_SIZES", "SIZES", "run_axes", "summary"]

KINDS = ("qwen2-vl", "qwen3-vl", "2-d vision")
ENTRY_POINTS = ("tables", "Rotary", "apply")
_DT = {torch.float32: "fp32", torch.bfloat16: "bf16"}
#: the floor of a case is the faster of these (as in the matrix mode): every entry point runs in place
FLOORS = ("floor: copy_ q, k", "floor: mul_(1.0) q, k")
#: shapes of the full and the --quick run (prefill tokens, decode sequences, vision grid side, q heads)
SIZES = {"prefill": 2048, "decode_batch": 32, "grid": 32, "heads": 16}
QUICK_SIZES = {"prefill": 512, "decode_batch": 32, "grid": 16, "heads": 16}


def _text_positions(b: int, s: int, start: int) -> torch.Tensor:
    """[3, b, s]: text, then a square image grid (t fixed, h and w the grid), then text, as get_rope_index gives."""
    pos = (start + torch.arange(s)).expand(3, b, s).clone()
    side = int((s // 2) ** 0.5)
    if side >= 2:
        a = s // 4
        g = torch.arange(side * side)
        pos[0, :, a : a + side * side] = start + a
        pos[1, :, a : a + side * side] = start + a + g // side
        pos[2, :, a : a + side * side] = start + a + g % side
    return pos


def _impls(
    q: torch.Tensor,
    k: torch.Tensor,
    specs: dict[str, RopeSpec],
    pos1: torch.Tensor,
    posn: torch.Tensor,
    max_len: int,
) -> dict[str, Callable[[], Any]]:
    """floor, then for the 1-D spec and each multi-axis spec (name -> spec, "1-d" first) every entry point."""
    qo, ko = torch.empty_like(q), torch.empty_like(k)
    impls: dict[str, Callable[[], Any]] = {
        "floor: copy_ q, k": lambda: (qo.copy_(q), ko.copy_(k)),
        "floor: mul_(1.0) q, k": lambda: (q.mul_(1.0), k.mul_(1.0)),
    }
    for name, spec in specs.items():
        pos = pos1 if spec.axes is None else posn
        cos, sin = rope_tables(pos, spec) if spec.axes is None else axis_tables(pos, spec)
        rot = Rotary(spec, format="bhsd", max_seq_len=max_len)
        apply: Callable[..., Any] = apply_rope if spec.axes is None else apply_rope_axes
        impls.update(_entry_points(name, q, k, spec, pos, cos, sin, rot, apply))
    return impls


def _entry_points(
    name: str,
    q: torch.Tensor,
    k: torch.Tensor,
    spec: RopeSpec,
    pos: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    rot: Rotary,
    apply: Callable[..., Any],
) -> dict[str, Callable[[], Any]]:
    return {
        f"{name} tables": lambda: apply_rope_tables(q, k, cos, sin, spec, format="bhsd", inplace=True),
        f"{name} Rotary": lambda: rot(q, k, positions=pos, inplace=True),
        f"{name} apply": lambda: apply(q, k, pos, spec, format="bhsd", inplace=True),
    }


def _case(
    kind: str, dt: torch.dtype, quick: bool, sizes: dict[str, int] | None
) -> tuple[str, dict[str, Callable[[], Any]]]:
    sz = {**(QUICK_SIZES if quick else SIZES), **(sizes or {})}
    g = torch.Generator().manual_seed(0)
    hq, hk = sz["heads"], max(1, sz["heads"] // 4)
    if kind == "vision":
        side = sz["grid"]
        s, b, d = side * side, 1, 64
        q, k = (torch.randn(b, hq, s, d, generator=g).to(dt) for _ in range(2))  # encoders: as many k heads
        row, col = torch.arange(s) // side, torch.arange(s) % side
        posn = torch.stack([row, col])[:, None, :]  # [2, 1, s]
        specs = {"1-d": RopeSpec(head_dim=d, base=10_000.0), "2-d vision": pixtral_spec(d)}
        return f"vision prefill {_DT[dt]} {side}x{side} patches", _impls(q, k, specs, posn[0], posn, s)
    b, s = (1, sz["prefill"]) if kind == "prefill" else (sz["decode_batch"], 1)
    d = 128
    q = torch.randn(b, hq, s, d, generator=g).to(dt)
    k = torch.randn(b, hk, s, d, generator=g).to(dt)
    start = 0 if kind == "prefill" else 3000
    posn = _text_positions(b, s, start)
    specs = {
        "1-d": RopeSpec(head_dim=d, base=1_000_000.0),
        "qwen2-vl": qwen2_vl_spec(),
        "qwen3-vl": qwen3_vl_spec(),
    }
    case = f"text {kind} {_DT[dt]} b{b} s{s}"
    return case, _impls(q, k, specs, posn[0], posn, start + s)


def _with_ratio_to_1d(rs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    med = {r["impl"]: r["median_ms"] for r in rs}
    for r in rs:
        name, _, entry = r["impl"].rpartition(" ")
        if name and name != "1-d" and f"1-d {entry}" in med:
            r["ratio_to_1d"] = r["median_ms"] / med[f"1-d {entry}"]
    return rs


def run_axes(
    *,
    quick: bool = False,
    rounds: int = 15,
    progress: Callable[[str], None] | None = None,
    sizes: dict[str, int] | None = None,
) -> list[dict[str, Any]]:
    """Result rows (:func:`ropekit.bench.timing.rows` plus ``ratio_to_1d``) for every case; ``sizes`` overrides
    the shapes (keys ``prefill``, ``decode_batch``, ``grid``, ``heads``; tests use tiny ones)."""
    out: list[dict[str, Any]] = []
    for dt in (torch.float32, torch.bfloat16):
        for kind in ("prefill", "decode", "vision"):
            case, impls = _case(kind, dt, quick, sizes)
            if progress is not None:
                progress(f"axes: {case}")
            inner = 50 if kind == "decode" else 3
            samples = measure(impls, inner=inner, rounds=rounds)
            out += _with_ratio_to_1d(rows(case, "axes", samples, list(FLOORS)))
    return out


def summary(results: list[dict[str, Any]]) -> dict[str, float]:
    """The largest ratio to 1-D per multi-axis kind and entry point over all cases (the number to hold to 1.3x)."""
    worst: dict[str, float] = {}
    for r in results:
        if "ratio_to_1d" in r:
            worst[r["impl"]] = max(worst.get(r["impl"], 0.0), r["ratio_to_1d"])
    return worst
