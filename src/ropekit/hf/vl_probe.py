# SPDX-License-Identifier: MIT
"""The probe that checks a VL rotary's replacement before :func:`ropekit.hf.patch` modifies a model.

:func:`verify_replacement` runs the original module and its replacement (:mod:`ropekit.hf.patch_vl`) on distinct
per-axis probe positions: the tables must agree to 1e-5 in format and values; for a text rotary, the modeling
file's ``apply_rotary_pos_emb`` must route through ropekit's dispatch and equal the original
(:func:`ropekit.hf.apply.check_route`); for a vision rotary, the family's vision apply function likewise
(:func:`ropekit.hf.vision_apply.verify_vision_apply`). A replacement that fails is refused with the reason.

Shapes: text probe position_ids [3, 2, 12] (t, h, w differ); vision [12, 2] (row, col).
"""

from __future__ import annotations

import torch
from torch import nn

from ropekit.hf.families import Family
from ropekit.hf.probe import max_err
from ropekit.hf.vision_apply import verify_vision_apply

__all__ = ["verify_replacement"]


def _probe_positions(kind: str, device: torch.device) -> torch.Tensor:
    """Distinct per-axis positions: text [3, 2, 12] (t, h, w differ), vision [12, 2] (row, col)."""
    t = torch.arange(12, device=device)
    if kind == "text":
        return torch.stack([t + 100, t // 3 + 7, t % 5 + 40]).unsqueeze(1).expand(3, 2, 12).contiguous()
    return torch.stack([t // 4, t % 4 + 3], dim=-1)


def verify_replacement(orig: nn.Module, new: nn.Module, kind: str) -> str | None:
    """None when ``new`` reproduces ``orig`` on a probe (tables; for text also the wrapped apply function)."""
    buf = next(iter(orig.buffers()), None)
    device = buf.device if buf is not None else torch.device("cpu")
    if device.type == "meta":
        return "the module is on the meta device (load the weights first)"
    with torch.no_grad():
        if kind == "llama4":
            ref = [orig(torch.zeros(1, device=device))]
            got = [new(torch.zeros(1, device=device))]
        else:
            x, pos = torch.zeros(1, device=device), _probe_positions(kind, device)
            try:
                ref = list(orig(x, pos))
            except Exception as e:  # noqa: BLE001 - a module that does not run is refused, not crashed on
                return f"the original module does not run on a probe: {type(e).__name__}: {e}"
            got = list(new(x, pos))
        for a, b in zip(ref, got):
            if a.shape != b.shape or a.dtype != b.dtype:
                return f"tables differ in format: transformers {tuple(a.shape)} {a.dtype}, ropekit {tuple(b.shape)} {b.dtype}"
            err = max_err(a, b)
            if err > 1e-5:
                return f"tables differ from transformers' by {err:.2e}"
        family = getattr(new, "family", None)
        if family is not None:
            return _verify_apply(orig, family, got[0], got[1], device)
        if kind in ("vision", "llama4"):
            return verify_vision_apply(orig, tuple(got))
    return None


def _verify_apply(
    orig: nn.Module, family: Family, cos: torch.Tensor, sin: torch.Tensor, device: torch.device
) -> str | None:
    import sys

    from ropekit.hf.apply import check_route

    modeling = sys.modules[type(orig).__module__]
    gen = torch.Generator(device="cpu").manual_seed(0)
    for fn_name, kind in family.applies:
        fn = getattr(modeling, fn_name, None)
        if not callable(fn):
            return f"{modeling.__name__} defines no {fn_name}"
        original = getattr(fn, "_ropekit_original", fn)
        shape = (cos.shape[0], 3, cos.shape[1], cos.shape[-1])
        q, k = (torch.randn(shape, generator=gen).to(device) for _ in range(2))
        why = check_route(
            original, kind, "probe-vl", (q, k, cos, sin), f"ropekit's {family.layout!r} pairing"
        )
        if why is not None:
            return why
    return None
