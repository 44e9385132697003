# SPDX-License-Identifier: MIT
"""The probe that checks a 1-D rotary module's replacement before :func:`ropekit.hf.patch` modifies a model.

:func:`verify_rotary` runs a copy of the original rotary module and a copy with ropekit's class on
``PROBE_LEN`` positions (every layer type): the tables must agree in format and to within a tolerance, and the
modeling file's apply function(s) must route through ropekit and equal the originals
(:func:`ropekit.hf.apply.check_route`). :func:`rounded_dtype` tells a cast module's rounded frequencies;
:func:`max_err` is the table comparison both probes use (:mod:`ropekit.hf.vl_probe`).

Shapes: probe position_ids [1, PROBE_LEN]; tables as the module returns them.
"""

from __future__ import annotations

import copy
import functools
import sys
import warnings
from typing import Any

import torch
from torch import nn

from ropekit.hf.apply import check_route
from ropekit.hf.cast import buffer_hint, cast_dtype, reads_buffers
from ropekit.hf.families import Family
from ropekit.hf.rotary import ROPEKIT_TABLES

PROBE_LEN = 12


def _call(mod: nn.Module, x: torch.Tensor, pos: torch.Tensor, lt: str | None) -> Any:
    return mod(x, pos) if lt is None else mod(x, pos, layer_type=lt)


def _flat(out: Any) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _run_probe(x: torch.Tensor, pos: torch.Tensor, lt: str | None, mod: nn.Module) -> list[torch.Tensor]:
    return _flat(_call(mod, x, pos, lt))


def max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def rounded_dtype(module: nn.Module, cls: type, specs: dict[str | None, Any]) -> torch.dtype | None:
    """The dtype a cast module's frequencies are rounded to, when its forward rotates with them, else None."""
    if not getattr(cls, "_ropekit_reads_buffers", True):
        return None
    return next((d for d in (cast_dtype(module, lt) for lt in specs) if d is not None), None)


def verify_rotary(module: nn.Module, cls: type, fam: Family, specs: dict[str | None, Any]) -> str | None:
    """None when the replacement reproduces the module and its apply functions on a probe, else why not."""
    try:
        p = next(module.buffers())
        device = p.device
    except StopIteration:
        device = torch.device("cpu")
    if device.type == "meta":
        return "the module is on the meta device (load the weights first)"
    ref_mod, ours = copy.deepcopy(module), copy.deepcopy(module)
    ours.__class__ = cls
    ours._ropekit_specs = specs  # type: ignore[assignment]
    x = torch.zeros(1, dtype=torch.float32, device=device)
    pos = torch.arange(PROBE_LEN, device=device).view(1, -1)
    modeling = sys.modules[type(module).__module__]
    gen = torch.Generator(device="cpu").manual_seed(0)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a cast module's warning is given once by patch itself
        for lt, spec in specs.items():
            try:
                ref = _flat(_call(ref_mod, x, pos, lt))
            except Exception as e:  # noqa: BLE001 - a module that does not run as called is reported
                return f"the original module does not run as (x, position_ids{', layer_type' if lt else ''}): {e}"
            if "_ropekit_reads_buffers" not in cls.__dict__:  # once per class: what a cast model rotates with
                cls._ropekit_reads_buffers = reads_buffers(  # type: ignore[attr-defined]
                    module, functools.partial(_run_probe, x, pos, lt), ref
                )
            try:
                got = _flat(_call(ours, x, pos, lt))
            except ValueError as e:
                return f"the replacement cannot run it: {e}"
            if [(t.shape, t.dtype) for t in ref] != [(t.shape, t.dtype) for t in got]:
                return (
                    f"tables differ in format: transformers gives {[(tuple(t.shape), t.dtype) for t in ref]}, "
                    f"the {fam.tables!r} row gives {[(tuple(t.shape), t.dtype) for t in got]}"
                )
            err = max(max_err(a, b) for a, b in zip(ref, got))
            if err > 1e-5:
                hint = buffer_hint(module, spec, lt)
                return f"tables differ from transformers' by {err:.2e} (layer_type={lt!r}){hint}"
            info = getattr(got[0], ROPEKIT_TABLES)
            n = info.cos.shape[-1]
            found = False
            for fn_name, kind in fam.applies:
                fn = getattr(modeling, fn_name, None)
                if not callable(fn):
                    continue
                found = True
                original = getattr(fn, "_ropekit_original", fn)
                shape = (1, PROBE_LEN, 3, 2 * n) if kind == "complex_bshd" else (1, 3, PROBE_LEN, 2 * n)
                q = torch.randn(shape, generator=gen).to(device)
                k = torch.randn(shape, generator=gen).to(device)
                args = (q, *got) if kind == "x" else (q, k, *got)
                why = check_route(original, kind, "probe", args, f"the row's {fam.layout!r} layout")
                if why is not None:
                    return why
            if not found:
                names = [f for f, _ in fam.applies]
                return f"{modeling.__name__} defines none of the row's apply functions {names}"
    return None
