# SPDX-License-Identifier: MIT
"""transformers' vision-language rotaries on ropekit: text M-RoPE and vision-tower 2-D RoPE (Su et al. 2021;
Qwen2-VL, Wang et al. 2024, M-RoPE; RoPE-ViT, Heo et al. 2024, axial 2-D RoPE).

:func:`ropekit.hf.patch` calls this module for every rotary module whose class is in :data:`VL_ROTARY_CLASSES`
(text M-RoPE of Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3-VL-MoE, GLM-4V, GLM-4V-MoE, ERNIE-4.5-VL; the 2-D vision
rotaries of those families and Pixtral) or is Llama 4's ``Llama4VisionRotaryEmbedding``; recognition is by module class, one
module at a time. Each such module is *replaced* (the original object is kept untouched and put back by
``unpatch``) by:

- ``Ropekit<Original>`` (a subclass of :class:`RopekitVLRotary` and of the original class, with the original's
  attributes and buffers; a cast or move of the model reaches them, and ``unpatch`` gives them back): same call
  ``(x, position_ids)``, same output format. It computes cos/sin of
  ``position * theta_k`` with ropekit's exact float64-reduced phases for each of transformers' frequencies (matched
  to the exact float64 value they round from, in transformers' own order -- ERNIE's pre-permuted table included)
  and hands them to the original module's ``recomposition_frequencies``: the band-to-axis layout is transformers'
  own, only the phases change (float32 angles lose ~pos * 6e-8 rad; ropekit's are exact). For a *text* rotary
  whose recomposition is a pure selection (every family here; :mod:`ropekit.hf.vl_layout` probes it once), the
  same tables come from one multi-axis gather of exact rows and one ``index_select``, bit for bit. A *text* rotary also
  tags its output with ropekit's float32 per-token half tables ([b, s, n], :class:`ropekit.hf.rotary.RopekitTables`),
  so the modeling file's ``apply_rotary_pos_emb``, wrapped by :mod:`ropekit.hf.apply` exactly as for 1-D families,
  rotates with ropekit's dispatch (fused CPU kernel, Triton on CUDA) from exact float32 tables, also in a bf16
  model. A *vision* rotary tags its output the same way ([N, head_dim / 2] half tables) and the family's vision
  apply function is wrapped too (:mod:`ropekit.hf.vision_apply`): vision towers rotate by ropekit's dispatch.
- :class:`RopekitLlama4VisionRotary` (in :mod:`ropekit.hf.vision_apply`): Llama 4's fixed complex table rebuilt from
  :func:`ropekit.presets_vl.llama4_vision_spec`, tagged with its real / imaginary parts for the wrapped
  ``vision_apply_rotary_emb``.

Every replacement is built and checked on a probe (tables equal to the original's to 1e-5, the wrapped text or
vision apply function equal to the original and routed through ropekit) before the model is modified; a module that
fails is refused with the reason.

Shapes: text position_ids [3, b, s] (or [b, s]: all axes equal); vision position_ids [N, 2] (row, col);
text tables [b, s, rotary_dim]; vision tables [N, head_dim].
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
from torch import nn

from ropekit.axis_tables import axis_tables
from ropekit.hf.cast import ROUNDED_DTYPES, warn_cast
from ropekit.hf.families import Family
from ropekit.hf.rotary import ROPEKIT_TABLES, RopekitTables
from ropekit.hf.vision_apply import LLAMA4_VISION, VISION_APPLIES, RopekitLlama4VisionRotary, tag_cat_tables
from ropekit.hf.vl_layout import TextAxisLayout, text_axis_layout
from ropekit.hf.vl_probe import verify_replacement
from ropekit.phases import rope_tables
from ropekit.spec import RopeSpec

__all__ = [
    "VL_ROTARY_CLASSES",
    "VL_TEXT_FAMILIES",
    "RopekitLlama4VisionRotary",
    "RopekitVLRotary",
    "patch_vl",
    "unpatch_vl",
    "vl_replacement",
]

#: rotary class name -> (kind, output cast to x.dtype like the original)
VL_ROTARY_CLASSES: dict[str, tuple[str, bool]] = {
    "Qwen2VLRotaryEmbedding": ("text", True),
    "Qwen2_5_VLRotaryEmbedding": ("text", True),
    "Qwen3VLTextRotaryEmbedding": ("text", True),
    "Qwen3VLMoeTextRotaryEmbedding": ("text", True),
    "Glm4vTextRotaryEmbedding": ("text", True),
    "Glm4vMoeTextRotaryEmbedding": ("text", True),
    "Ernie4_5_VLMoeTextRotaryEmbedding": ("text", False),
    "Qwen2VLVisionRotaryEmbedding": ("vision", False),
    "Qwen2_5_VLVisionRotaryEmbedding": ("vision", False),
    "Qwen3VLVisionRotaryEmbedding": ("vision", False),
    "Qwen3VLMoeVisionRotaryEmbedding": ("vision", False),
    "Glm4vVisionRotaryEmbedding": ("vision", False),
    "Glm4vMoeVisionRotaryEmbedding": ("vision", False),
    "Ernie4_5_VLMoeVisionRotaryEmbedding": ("vision", False),
    "PixtralVisionRotaryEmbedding": ("vision", True),
}
_QK = (("apply_rotary_pos_emb", "qk"),)
_CAT = Family("M-RoPE text (half split, cat tables)", (), tables="cat", applies=_QK, positions="mrope")
_PAIRS = Family(
    "M-RoPE text (interleaved pairs, repeat_interleave tables)",
    (),
    tables="interleave",
    layout="interleaved",
    applies=_QK,
    positions="mrope",
)
#: text rotary class name -> the row the apply wrapper reads (table format, pairing, apply functions)
VL_TEXT_FAMILIES: dict[str, Family] = {
    "Qwen2VLRotaryEmbedding": _CAT,
    "Qwen2_5_VLRotaryEmbedding": _CAT,
    "Qwen3VLTextRotaryEmbedding": _CAT,
    "Qwen3VLMoeTextRotaryEmbedding": _CAT,
    "Glm4vTextRotaryEmbedding": _PAIRS,
    "Glm4vMoeTextRotaryEmbedding": _CAT,  # GLM-4.5V: half split over the rotary part (partial rotary)
    "Ernie4_5_VLMoeTextRotaryEmbedding": _PAIRS,
}


#: how far transformers' float32 ``inv_freq`` may lie from the exact ``base^(-2j/d)`` it is computed from: the
#: float32 exponent ``2j/d`` and ``pow`` round (up to ~1e-6 relative for base 1e6: a real Qwen2-VL vision tower,
#: head_dim 80, is 2.8e-7 off), while neighbouring candidates differ by ``base^(2/d)`` (>= 1 % for any real head)
_FREQ_RTOL = 4e-6


def _exact_frequencies(name: str, cfg: object, buf: torch.Tensor) -> tuple[float, ...]:
    """transformers' float32 ``inv_freq``, each replaced by the exact float64 ``base^(-2j/dim)`` it rounds from.

    A module whose buffer was cast to float16 / bfloat16 rotates in transformers with those rounded values (its
    forward reads ``inv_freq.float()``): they are returned as they are (exactly representable in float64), after
    checking that each one rounds from a ``base^(-2j/dim)`` at that dtype's precision (:mod:`ropekit.hf.cast`).
    """
    rp = dict(getattr(cfg, "rope_parameters", None) or {})
    if rp.get("rope_type", "default") not in ("default", "axial"):
        raise ValueError(
            f"{name}: rope_type={rp.get('rope_type')!r} is not supported by ropekit.hf.patch "
            "(default M-RoPE and axial vision RoPE only)"
        )
    base = float(rp["rope_theta"])
    hf = buf.detach().to("cpu", torch.float64)
    rounded = buf.dtype in ROUNDED_DTYPES
    # the rounding of the buffer's dtype (2^-8 bfloat16, 2^-11 float16) on top of float32's; neighbouring candidates
    # differ by base^(2/dim), >= 1 % for any real head, so the match stays unique
    rtol = 2.0 * torch.finfo(buf.dtype).eps + _FREQ_RTOL if rounded else _FREQ_RTOL
    # text (rotary dim 2k) and vision (half head 2k) tables are base^(-2j/(2k)), j < k -- ERNIE's permuted too
    candidates = RopeSpec(head_dim=2 * hf.numel(), base=base).frequencies().tolist()
    out = []
    for v in hf.tolist():
        best = min(candidates, key=lambda t: abs(t - v) / t)
        if abs(best - v) > rtol * best:
            rel = abs(best - v) / best
            trip = (
                f"; it is {rel:.1e} relative from the nearest, as a round trip through a lower precision gives "
                "(cast down and back? rebuild or reload the model)"
                if not rounded and rel <= 2.0**-8
                else ""
            )
            raise ValueError(
                f"{name}: inv_freq entry {v!r} matches no base^(-2j/dim) of base {base:g} "
                f"(inv_freq is {buf.dtype}){trip}; ropekit refuses frequencies it cannot reproduce exactly"
            )
        out.append(v if rounded else best)
    return tuple(out)


class RopekitVLRotary(nn.Module):
    """Drop-in replacement of a VL rotary module: exact phases, the original's layout (see the module docstring).

    :func:`vl_replacement` builds it as an instance of ``Ropekit<Original>``, a subclass of this class and of the
    original's class (made once per class), holding the original's attributes and buffers: ``isinstance`` with the
    original class, ``config``, ``inv_freq``, ``original_inv_freq``, ``attention_scaling``, ``rope_type`` and the
    original's methods stay as they were; ``forward`` is ropekit's.
    """

    def __init__(self, orig: nn.Module, kind: str, cast: bool) -> None:
        nn.Module.__init__(self)  # not the original class's constructor: its state is copied below
        for name, value in orig.__dict__.items():
            if not name.startswith("_") and name not in ("training",):
                self.__dict__[name] = value  # config, rope_type, attention_scaling, mrope_section, ...
        self.train(orig.training)
        self.kind, self.cast = kind, cast
        self.config = orig.config
        self.attention_scaling = float(getattr(orig, "attention_scaling", 1.0))
        self._recompose: Callable[[torch.Tensor], torch.Tensor] = orig.recomposition_frequencies  # type: ignore[assignment]
        self._orig_name = type(orig).__name__
        # the original's buffers (inv_freq, original_inv_freq), registered here so that they move and are cast with
        # the model as the original's would be (transformers rotates with inv_freq's current values: rounded ones
        # after a cast); unpatch hands them back to the original
        for name, buf in orig.named_buffers(recurse=False):
            self.register_buffer(name, buf, persistent=name not in orig._non_persistent_buffers_set)
        #: the buffers taken from the original (ropekit.hf.unpatch gives their current tensors back)
        self.ropekit_original_buffers = tuple(name for name, _ in orig.named_buffers(recurse=False))
        if not isinstance(self._buffers.get("inv_freq"), torch.Tensor):
            raise TypeError("it has no inv_freq buffer")
        if hasattr(orig, "mrope_section"):
            self.mrope_section = orig.mrope_section
        self.family: Family | None = VL_TEXT_FAMILIES.get(type(orig).__name__) if kind == "text" else None
        #: (function, apply kind) of the modeling file that ropekit.hf.patch wraps for this vision rotary
        self.vision_applies = (VISION_APPLIES[type(orig).__name__],) if kind == "vision" else ()
        self.spec: RopeSpec
        #: the recomposition as a band-to-axis map (one multi-axis gather per call), or None: recompose
        self.layout: TextAxisLayout | None = None
        self._built_for: torch.dtype | None = None
        self._build()
        fa = getattr(self.config, "freq_allocation", None)
        if fa is not None and type(orig).__name__ == "Ernie4_5_VLMoeTextRotaryEmbedding":
            from ropekit.hf.config_vl import ernie_sections

            want = list(ernie_sections(fa, self.spec.n_bands))
            if list(orig.mrope_section) != want:  # type: ignore[arg-type]
                raise ValueError(
                    f"its config says freq_allocation={fa} (ERNIE's split: mrope_section {want}) but transformers "
                    f"rotates with mrope_section={list(orig.mrope_section)}"  # type: ignore[arg-type]
                )

    def _build(self) -> None:
        """The spec (and text layout) of the current ``inv_freq`` buffer: exact frequencies for a float32 one, its
        rounded values (with a warning) for a cast one."""
        buf = cast(torch.Tensor, self.inv_freq)
        freqs = _exact_frequencies(self._orig_name, self.config, buf)
        self.spec = RopeSpec(head_dim=2 * len(freqs), freqs=freqs)
        self.layout = None
        if self.family is not None:
            self.layout = text_axis_layout(self._recompose, freqs, self.family.tables == "interleave")
        if self.layout is not None:  # buffers: they move with the model (.to / .cuda), no copy per call
            self.register_buffer("_full_index", self.layout.full.to(buf.device), persistent=False)
            half = self.layout.half
            self.register_buffer(
                "_half_index", None if half is None else half.to(buf.device), persistent=False
            )
        self._built_for = buf.dtype
        if buf.dtype in ROUNDED_DTYPES:
            warn_cast(self, buf.dtype, self._orig_name, stacklevel=4)

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dtype = cast(torch.Tensor, self.inv_freq).dtype
        if dtype != self._built_for:  # the model was cast after the patch: follow transformers' buffer
            if torch.compiler.is_compiling():
                raise ValueError(
                    f"{self._orig_name}: its inv_freq buffer became {dtype} after the patch (the model was cast); "
                    "run one forward outside torch.compile first so ropekit reads the new frequencies"
                )
            self._build()
        pos = position_ids
        if self.kind == "text" and pos.dim() == 2:
            pos = pos.unsqueeze(0).expand(3, -1, -1)  # (b, s) text ids: every axis equal
        elif self.kind == "text" and pos.dim() == 3 and pos.shape[0] != 3:
            pos = pos.expand(3, -1, -1)
        if self.layout is not None and self.family is not None:  # one gather of exact rows, one selection
            return self._from_layout(self.layout, self.family, x, pos)
        cos, sin = rope_tables(pos, self.spec, device=x.device)  # float32, exact phases
        if self.attention_scaling != 1.0:
            cos, sin = cos * self.attention_scaling, sin * self.attention_scaling
        cos, sin = (
            self._recompose(cos),
            self._recompose(sin),
        )  # float32 [.., rotary_dim], transformers' layout
        info = None
        if (
            self.family is not None
        ):  # ropekit's per-token half tables [b, s, n] for the wrapped apply function
            pairs = self.family.tables == "interleave"
            n = cos.shape[-1] // 2
            ch, sh = (cos[..., 0::2], sin[..., 0::2]) if pairs else (cos[..., :n], sin[..., :n])
            info = RopekitTables(ch.contiguous(), sh.contiguous(), self.family, self.spec)
        elif self.kind == "vision":  # ropekit's half tables
            info = tag_cat_tables(cos, sin, self.spec)
        if self.cast:
            cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        if info is not None:
            setattr(cos, ROPEKIT_TABLES, info)
            setattr(sin, ROPEKIT_TABLES, info)
        return cos, sin

    def _from_layout(
        self, layout: TextAxisLayout, family: Family, x: torch.Tensor, pos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The text tables through the probed layout: the same values as the recomposition path."""
        ch, sh = axis_tables(pos, layout.spec, device=x.device)  # [b, s, n] float32, band j at axis a(j)
        if self.attention_scaling != 1.0:
            ch, sh = ch * self.attention_scaling, sh * self.attention_scaling
        full = cast(torch.Tensor, self._full_index)  # layout.full on the module's device
        if full.device != ch.device:
            full = full.to(ch.device)
        cos, sin = ch.index_select(-1, full), sh.index_select(-1, full)  # transformers' channel order
        half = cast("torch.Tensor | None", self._half_index)
        if half is not None:
            half = half if half.device == ch.device else half.to(ch.device)
            ch, sh = ch.index_select(-1, half), sh.index_select(-1, half)
        info = RopekitTables(ch, sh, family, self.spec)
        if self.cast:
            cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        setattr(cos, ROPEKIT_TABLES, info)
        setattr(sin, ROPEKIT_TABLES, info)
        return cos, sin


def vl_kind(module: nn.Module) -> str | None:
    """ "text", "vision" or "llama4" for a module this file replaces (by its class name), else None."""
    name = type(module).__name__
    if name == LLAMA4_VISION:
        return "llama4"
    entry = VL_ROTARY_CLASSES.get(name)
    return None if entry is None else entry[0]


_VL_CLASSES: dict[type[nn.Module], type[RopekitVLRotary]] = {}


def _vl_class(original: type[nn.Module]) -> type[RopekitVLRotary]:
    """``Ropekit<Original>``: ropekit's forward first, then the original class (made once per class)."""
    cls = _VL_CLASSES.get(original)
    if cls is None:
        cls = type(f"Ropekit{original.__name__}", (RopekitVLRotary, original), {"__module__": __name__})
        _VL_CLASSES[original] = cls
    return cls


def vl_replacement(module: nn.Module) -> tuple[nn.Module | None, str | None]:
    """(replacement, None) for a recognised VL rotary that passes the probe; (None, why) when it is refused.

    Raises nothing and modifies nothing; a module :func:`vl_kind` does not know gives ``(None, "not a VL rotary")``.
    """
    kind = vl_kind(module)
    if kind is None:
        return None, "not a VL rotary module"
    try:
        new: nn.Module = (
            RopekitLlama4VisionRotary(module)
            if kind == "llama4"
            else _vl_class(type(module))(module, *VL_ROTARY_CLASSES[type(module).__name__])
        )
    except (ValueError, KeyError, AttributeError, TypeError) as e:
        return None, f"ropekit cannot express it: {e}"
    why = verify_replacement(module, new, kind)
    return (None, why) if why is not None else (new, None)


def patch_vl(model: nn.Module) -> nn.Module:
    """Same as :func:`ropekit.hf.patch` (kept for older code), but requires at least one VL rotary module.

    Raises:
        ValueError: when the model holds no known VL rotary, or :func:`ropekit.hf.patch` refuses it.
    """
    if "_ropekit_patch" not in model.__dict__ and not any(vl_kind(m) is not None for m in model.modules()):
        raise ValueError(
            f"{type(model).__name__} has no VL rotary module ropekit knows "
            f"({', '.join(sorted([*VL_ROTARY_CLASSES, LLAMA4_VISION]))})"
        )
    from ropekit.hf.patch import patch

    return patch(model)


def unpatch_vl(model: nn.Module) -> nn.Module:
    """Same as :func:`ropekit.hf.unpatch`."""
    from ropekit.hf.patch import unpatch

    return unpatch(model)
