# SPDX-License-Identifier: MIT
"""The generic replacement of a transformers rotary module: the same module, computing with ropekit.

``patch`` swaps a recognised module's class for ``Ropekit<Original>``, a subclass of the original class made once
per class, so the module keeps everything it had: its constructor forms (``Cls(config)``, ``Cls(config=...,
device=None)``, ``layer_type`` arguments), ``inv_freq``, ``original_inv_freq``, ``attention_scaling``,
``rope_type``, per-layer-type buffers, hooks and device. Only ``forward`` changes: it returns the same tensors in
the same format (:data:`ropekit.hf.families.TABLE_LAYOUTS`), built from ropekit's exact float64-reduced phases,
and tags them with ropekit's float32 half tables so the family's apply function rotates with ropekit's kernels.
Dynamic NTK follows transformers' own state (``max_seq_len_cached``, updated by transformers' decorator); LongRoPE
switches at ``max(position_ids) + 1 > original_max_position_embeddings`` as transformers does.

Shapes: position_ids [b, s]; returned cos/sin [b, s, 2n] ("cat", "interleave"), [b, s, n] ("half") or complex
[b, s, n] ("complex"), n = rotary_dim // 2.
"""

from __future__ import annotations

import copy
import functools
import inspect
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ropekit.hf.buffer_edit import edited_after_patch
from ropekit.hf.cast import buffer_spec, cast_dtype, round_trip_dtype, warn_cast
from ropekit.hf.config import spec_from_hf
from ropekit.hf.config_keys import _as_dict, layer_type_entries
from ropekit.hf.families import Family
from ropekit.phases import INT_DTYPES, rope_tables
from ropekit.scaling import DynamicNTK
from ropekit.spec import RopeSpec
from ropekit.table_cache import shared_tables

__all__ = [
    "ROPEKIT_TABLES",
    "RopekitRotary",
    "RopekitTables",
    "module_layer_types",
    "ropekit_class",
    "specs_for_config",
]

#: attribute set on the tensors a ropekit rotary module returns (holds a :class:`RopekitTables`)
ROPEKIT_TABLES = "_ropekit_tables"
_SILENT_KEYS = {  # keys transformers writes itself into these rope types and then ignores
    "default": {"original_max_position_embeddings"},
    "linear": {"original_max_position_embeddings"},
    "dynamic": {"original_max_position_embeddings"},
}


@dataclass
class RopekitTables:
    """ropekit's tables behind a returned cos/sin: float32 [b, s, n], attention factor included."""

    cos: torch.Tensor
    sin: torch.Tensor
    family: Family
    spec: RopeSpec
    extra: dict[str, Any] = field(default_factory=dict)


def _strip_silent(rp: Any) -> Any:
    if not isinstance(rp, dict):
        return rp
    if rp and all(isinstance(v, dict) or v is None for v in rp.values()):
        return {k: _strip_silent(v) for k, v in rp.items()}
    t = str(rp.get("rope_type", rp.get("type", "default")))
    return {k: v for k, v in rp.items() if k not in _SILENT_KEYS.get(t, set())}


def _lenient_spec(cfg: dict[str, Any], layer_type: str | None, layout: str, where: str) -> RopeSpec:
    """transformers' acceptance: strict first; what transformers only warns about is accepted with a warning."""
    try:
        return spec_from_hf(cfg, layer_type=layer_type, layout=layout)
    except ValueError as strict_error:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            spec = spec_from_hf(cfg, layer_type=layer_type, layout=layout, strict=False)
        warnings.warn(
            f"ropekit.hf.patch: {where}: {strict_error} (accepted, as transformers accepts it)", stacklevel=5
        )
        return spec


def module_layer_types(module: nn.Module) -> list[str] | None:
    """The rope layer types a per-layer-type rotary module serves (its ``rope_type`` dict), else None."""
    rt = getattr(module, "rope_type", None)
    return list(rt) if isinstance(rt, dict) else None


def specs_for_config(
    config: Any, layout: str, where: str = "", layer_types: list[str] | None = None
) -> dict[str | None, RopeSpec]:
    """{layer_type or None: RopeSpec} for a rotary module's config (per-layer-type configs give one per type).

    ``layer_types`` restricts a nested config to the types the module serves (its ``rope_type`` keys).
    """
    rp = getattr(config, "rope_parameters", None)
    per_layer = getattr(config, "per_layer_config", None)
    entries = layer_type_entries(
        rp
    )  # flat keys transformers leaves beside the entries are not read (Gemma 3)
    nested = entries is not None
    out: dict[str | None, RopeSpec] = {}
    types: list[str | None] = (
        [k for k, v in entries.items() if v is not None] if entries is not None else [None]
    )
    if nested and layer_types is not None:
        types = [k for k in types if k in layer_types]
    for lt in types:
        src = config
        if lt is not None and per_layer is not None:
            try:
                src = per_layer[lt]
            except (KeyError, TypeError, ValueError):
                src = config
        cfg = _as_dict(src)
        cfg["rope_parameters"] = _strip_silent(copy.deepcopy(cfg.get("rope_parameters")))
        out[lt] = _lenient_spec(cfg, lt, layout, where or type(config).__name__)
    return out


def _format(t: torch.Tensor, tables: str) -> torch.Tensor:
    if tables == "cat":
        return torch.cat([t, t], dim=-1)
    if tables == "interleave":
        return t.unsqueeze(-1).expand(*t.shape, 2).flatten(-2)  # (c0, c0, c1, c1, ...): one copy
    return t


class RopekitRotary(nn.Module):
    """Mixin placed before the original rotary class (see the module docstring); never used alone."""

    _ropekit_family: Family
    _ropekit_specs: dict[str | None, RopeSpec]
    #: whether the original forward rotates with its inv_freq buffers (set per class by the patch's probe; False
    #: for a forward that recomputes them from the config, so a cast model keeps the config's frequencies)
    _ropekit_reads_buffers: bool = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # the original constructor: every attribute transformers reads
        self._ropekit_init()

    def _ropekit_init(self) -> None:
        fam = self._ropekit_family
        where = f"{type(self).__name__} ({fam.name})"
        self._ropekit_specs = specs_for_config(self.config, fam.layout, where, module_layer_types(self))

    def _ropekit_seq_len(
        self, spec: RopeSpec, position_ids: torch.Tensor, layer_type: str | None
    ) -> int | None:
        if not spec.dynamic or not position_ids.numel():
            return None
        if isinstance(spec.scaling, DynamicNTK):  # transformers' state, kept by its own decorator
            cached = getattr(self, f"{layer_type}_max_seq_len_cached", None) if layer_type else None
            return int(cached if cached is not None else self.max_seq_len_cached)  # type: ignore[arg-type]
        return int(position_ids.max()) + 1

    def _ropekit_tables(
        self, x: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None
    ) -> tuple[torch.Tensor, torch.Tensor, RopeSpec]:
        if layer_type not in self._ropekit_specs:
            raise ValueError(
                f"{type(self).__name__}: layer_type={layer_type!r} is not one of its rope layer types "
                f"{sorted(map(str, self._ropekit_specs))}"
            )
        spec = self._ropekit_specs[layer_type]
        seq_len = self._ropekit_seq_len(spec, position_ids, layer_type)
        state = self.__dict__.get("_ropekit_cache_state")
        rounded = cast_dtype(self, layer_type) if self._ropekit_reads_buffers else None
        if rounded is None and self._ropekit_reads_buffers and not torch.compiler.is_compiling():
            rounded = round_trip_dtype(self, spec, layer_type)  # cast down and back: float32 rounded values
        if rounded is not None and state is not None and spec.dynamic:
            raise ValueError(
                f"{type(self).__name__}: cache_correct=True needs the rotary buffers in float32, this model's "
                f"are {rounded} (it was cast); load it with dtype= instead of casting"
            )
        if state is not None:  # patch(model, cache_correct=True)
            from ropekit.hf.cache_correct import track

            seq_len = track(state, spec, position_ids, seq_len, self)
        if rounded is not None:  # a cast model: transformers rotates with the buffer's rounded frequencies
            if not torch.compiler.is_compiling():
                warn_cast(self, rounded, type(self).__name__, stacklevel=6)
            spec, seq_len = buffer_spec(self, spec, layer_type), None
        elif (
            self._ropekit_reads_buffers
            and not torch.compiler.is_compiling()
            and edited_after_patch(self, spec, layer_type)
        ):  # the buffer edited after the patch: transformers rotates with it (ropekit.hf.buffer_edit)
            spec, seq_len = buffer_spec(self, spec, layer_type), None
        if (
            seq_len is None
            and self._ropekit_family.tables in ("cat", "interleave")
            and position_ids.dtype in INT_DTYPES
            and not torch.compiler.is_compiling()
        ):
            # read-only rows of the spec's shared exact cache (the values rope_tables returns): only ropekit's
            # kernels read them, and the tables handed to the model are fresh copies made by the formatting
            hit = shared_tables(position_ids.to(x.device), spec)
            if hit is not None:
                return hit[0], hit[1], spec
        cos, sin = rope_tables(position_ids, spec, seq_len=seq_len, device=x.device)  # [b, s, n] float32
        return cos, sin, spec

    def _ropekit_forward(
        self, x: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None = None
    ) -> Any:
        fam = self._ropekit_family
        cos_h, sin_h, spec = self._ropekit_tables(x, position_ids, layer_type)
        info = RopekitTables(cos_h, sin_h, fam, spec)
        defer = self.__dict__.get("_ropekit_defer")
        if defer is not None:  # a ropekit.hf.fused_cache.FusedStaticCache rotates k as it writes it
            info.extra["defer_to"] = defer
        if fam.tables == "complex":
            out = torch.complex(cos_h, sin_h)
            setattr(out, ROPEKIT_TABLES, info)
            return out
        dtype = x.dtype if fam.tables_dtype == "input" else torch.float32
        cos, sin = _format(cos_h, fam.tables).to(dtype), _format(sin_h, fam.tables).to(dtype)
        setattr(cos, ROPEKIT_TABLES, info)
        setattr(sin, ROPEKIT_TABLES, info)
        return cos, sin

    def extra_repr(self) -> str:
        return f"ropekit={self._ropekit_family.name!r}, layer_types={list(self._ropekit_specs)}"


@functools.cache
def ropekit_class(original: type, family: Family) -> type:
    """``Ropekit<Original>``: the original class with ropekit's forward (made once per class and row)."""
    from transformers.modeling_rope_utils import dynamic_rope_update  # lazy: ropekit never needs transformers

    @torch.no_grad()
    @dynamic_rope_update  # type: ignore[untyped-decorator]
    def forward(
        self: RopekitRotary, x: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None = None
    ) -> Any:
        return self._ropekit_forward(x, position_ids, layer_type)

    def __init__(self: RopekitRotary, *args: Any, **kwargs: Any) -> None:
        RopekitRotary.__init__(self, *args, **kwargs)

    __init__.__signature__ = inspect.signature(original.__init__)  # type: ignore[attr-defined,misc]
    forward.__doc__ = f"{original.__name__}.forward, computed by ropekit (same arguments and outputs)."
    ns = {
        "__init__": __init__,
        "forward": forward,
        "_ropekit_family": family,
        "__module__": __name__,
        "__doc__": RopekitRotary.__doc__,
    }
    return type(f"Ropekit{original.__name__}", (RopekitRotary, original), ns)
