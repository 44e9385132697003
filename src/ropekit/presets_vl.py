# SPDX-License-Identifier: MIT
"""Multi-axis RoPE families as specs: vision-language decoders (M-RoPE) and 2-D vision towers.

Each builder returns a :class:`ropekit.RopeSpec` with an :class:`ropekit.axes.AxisMap`; the facts (sections, bases,
pairing, frequency order) are those of each family's reference code: transformers' modeling files for the VL
decoders and vision towers, timm for RoPE-ViT, Meta's dinov3 repository for DINOv3 (tests/ropekit/hf and
tests/ropekit/timm check them against that code).

Where a vision family uses its own frequency order (Pixtral's even/odd split in HF's half layout, the
``theta^(-4k/D)`` tables of the 2-D halves, DINOv3's ``2*pi / period``), the spec carries the exact table as
``freqs``, so that a multi-axis spec with every axis at position p is *exactly* the 1-D spec at p.

:data:`VL_PRESETS` holds config.json fragments of released VL checkpoints (parsed by ``RopeSpec.from_hf``).

Shapes: D = head_dim, n = rotary_dim // 2 slots.
"""

from __future__ import annotations

import math
from typing import Any

from ropekit.axes import AxisMap
from ropekit.integers import as_int, as_real, past_float64, shown
from ropekit.spec import _MAX_HEAD_DIM, RopeSpec

__all__ = [
    "VL_PRESETS",
    "axial_spec",
    "dinov3_spec",
    "ernie_vl_spec",
    "glm4v_spec",
    "llama4_vision_spec",
    "pixtral_spec",
    "qwen2_vl_spec",
    "qwen3_vl_spec",
    "qwen_vit_spec",
    "rope_vit_axial_spec",
    "videorope_spec",
]


def _check_head_dim(head_dim: object, multiple: int, who: str) -> int:
    """``head_dim`` as a Python int (numpy integers too, not a bool) when it is a positive multiple of ``multiple``
    (at most RopeSpec's largest head_dim)."""
    hd = as_int(head_dim)
    if hd is None or not 0 < hd <= _MAX_HEAD_DIM or hd % multiple:
        big = " (at most 2**31 - 2)" if hd is not None and hd > _MAX_HEAD_DIM else ""
        raise ValueError(
            f"{who}: head_dim must be a positive multiple of {multiple}{big}, got {shown(head_dim)}"
        )
    return hd


def _check_base(base: object, who: str) -> float:
    """The vision builders form their tables from ``base`` themselves (``freqs=``), so RopeSpec's own check of
    ``base`` never sees it: refuse here what it refuses (1 would make every frequency 1, a negative base complex
    powers, 0 a division by zero, nan / inf non-finite tables, an int past the float64 range). Real numbers of any
    kind (numpy floats too) are accepted, as RopeSpec accepts them, and returned as a Python float."""
    b = as_real(base)
    if b is None or b <= 1:
        raise ValueError(f"{who}: base must be a finite number > 1{past_float64(base)}, got {shown(base)}")
    return b


def _quarter_freqs(head_dim: int, base: float, scale: float = 1.0) -> tuple[float, ...]:
    # theta_k = base^(-4k/D), k < D/4 (= base^(-2k/(D/2)): a 1-D table over half the head), once per axis.
    q = head_dim // 4
    one = tuple(scale * float(base) ** (-4.0 * k / head_dim) for k in range(q))
    return one + one


# ---------------------------------------------------------------------- M-RoPE decoders (t, h, w)
def qwen2_vl_spec(
    head_dim: int = 128, base: float = 1_000_000.0, sections: tuple[int, int, int] = (16, 24, 24)
) -> RopeSpec:
    """Qwen2-VL / Qwen2.5-VL text decoder: contiguous ``mrope_section``, half-split (t gets the high freqs)."""
    return RopeSpec(head_dim=head_dim, base=base, layout="half", axes=AxisMap.contiguous(sections))


def qwen3_vl_spec(
    head_dim: int = 128, base: float = 5_000_000.0, sections: tuple[int, int, int] = (24, 20, 20)
) -> RopeSpec:
    """Qwen3-VL text decoder: interleaved ``THW`` cycle then a ``T`` tail, half-split."""
    return RopeSpec(head_dim=head_dim, base=base, layout="half", axes=AxisMap.interleaved(sections))


def glm4v_spec(
    head_dim: int = 128,
    base: float = 10_000.0,
    partial_rotary_factor: float = 0.5,
    sections: tuple[int, int, int] = (8, 12, 12),
) -> RopeSpec:
    """GLM-4V / GLM-4.1V text decoder: contiguous sections over the rotary half, interleaved pairs."""
    rd = int(head_dim * partial_rotary_factor + 1e-9)
    return RopeSpec(
        head_dim=head_dim, base=base, rotary_dim=rd, layout="interleaved", axes=AxisMap.contiguous(sections)
    )


def ernie_vl_spec(
    head_dim: int = 128, base: float = 500_000.0, sections: tuple[int, int, int] = (22, 22, 20)
) -> RopeSpec:
    """ERNIE-4.5-VL text decoder; ``sections`` in the config's (h, w, t) order: h/w alternate, t lowest freqs."""
    h, w, t = sections
    return RopeSpec(head_dim=head_dim, base=base, layout="interleaved", axes=AxisMap.lta((t, h, w)))


def videorope_spec(
    head_dim: int = 128, base: float = 1_000_000.0, sections: tuple[int, int, int] = (16, 24, 24)
) -> RopeSpec:
    """VideoRoPE (Wei et al. 2025) low-frequency temporal allocation from a Qwen2-VL ``[t, h, w]`` section.

    VideoRoPE's code (``Wiselnn570/VideoRoPE``, ``apply_m_modify_multimodal_rotary_pos_emb``) merges the section to
    ``[t, h + w]``, alternates h (even slots) and w (odd slots) over the first ``h + w`` slots and gives t the
    ``t`` lowest frequencies: ``[16, 24, 24]`` is ``HW`` x 24 then ``T`` x 16. Only equal h and w sections mean
    what they say there, so ``sections`` must have ``h == w`` and sum to ``head_dim / 2`` (every slot rotates);
    anything else is refused rather than re-split.

    Raises:
        ValueError: naming ``sections`` and the value given when it is not three non-negative ints, h != w, or
            the sum is not head_dim / 2; naming the field for a bad ``head_dim`` or ``base`` (as RopeSpec).
    """
    hd = _check_head_dim(head_dim, 2, "videorope_spec")
    try:
        given = [as_int(s) for s in sections]
    except TypeError:  # not iterable
        given = []
    sec = [s for s in given if s is not None and s >= 0]
    if len(given) != 3 or len(sec) != 3:
        raise ValueError(
            f"videorope_spec: sections must be three non-negative ints [t, h, w] (a Qwen2-VL mrope_section), "
            f"got {sections!r}"
        )
    t, h, w = sec
    if h != w:
        raise ValueError(
            f"videorope_spec: sections={sections!r} has h={h} != w={w}; VideoRoPE alternates h and w over the "
            "h + w high-frequency slots (h even, w odd), so it cannot give them different counts: pass equal h "
            "and w (e.g. (16, 24, 24))"
        )
    if t + h + w != hd // 2:
        raise ValueError(
            f"videorope_spec: sections={sections!r} sums to {t + h + w} but head_dim={hd} has {hd // 2} rotary "
            "slots; the sections must sum to head_dim / 2"
        )
    return RopeSpec(head_dim=hd, base=base, layout="half", axes=AxisMap.lta((t, h, w)))


# ---------------------------------------------------------------------- 2-D vision towers (row/col, x/y)
def qwen_vit_spec(head_dim: int = 80, base: float = 10_000.0) -> RopeSpec:
    """Qwen2/2.5/3-VL vision tower: ``theta_k = base^(-4k/D)`` on rows then columns, half-split."""
    head_dim = _check_head_dim(head_dim, 4, "qwen_vit_spec")
    base = _check_base(base, "qwen_vit_spec")
    return RopeSpec(
        head_dim=head_dim,
        freqs=_quarter_freqs(head_dim, base),
        layout="half",
        axes=AxisMap.halves(head_dim // 2, ("row", "col")),
    )


def pixtral_spec(head_dim: int = 64, base: float = 10_000.0) -> RopeSpec:
    """Pixtral vision tower (HF layout): slot i < D/4 is the row at ``theta_{2i}``, slot D/4 + i the column at
    ``theta_{2i+1}`` with ``theta_k = base^(-2k/D)``; half-split. Positions: (row, col) of each patch."""
    head_dim = _check_head_dim(head_dim, 4, "pixtral_spec")
    base = _check_base(base, "pixtral_spec")
    n = head_dim // 2
    theta = [float(base) ** (-2.0 * k / head_dim) for k in range(n)]
    return RopeSpec(
        head_dim=head_dim,
        freqs=tuple(theta[0::2] + theta[1::2]),
        layout="half",
        axes=AxisMap.halves(n, ("row", "col")),
    )


def llama4_vision_spec(head_dim: int = 88, base: float = 10_000.0) -> RopeSpec:
    """Llama 4 vision encoder: x block then y block, ``theta_k = base^(-4k/D)``, complex (interleaved) pairs.
    Positions are 1-based (``x + 1``, ``y + 1``); the class token sits at 0 on both axes (identity)."""
    head_dim = _check_head_dim(head_dim, 4, "llama4_vision_spec")
    base = _check_base(base, "llama4_vision_spec")
    return RopeSpec(
        head_dim=head_dim,
        freqs=_quarter_freqs(head_dim, base),
        layout="interleaved",
        axes=AxisMap.halves(head_dim // 2, ("x", "y")),
    )


def rope_vit_axial_spec(head_dim: int = 64, base: float = 100.0) -> RopeSpec:
    """RoPE-ViT axial (Heo et al. 2024): x block then y block, ``theta_k = 100^(-4k/D)``, complex pairs."""
    head_dim = _check_head_dim(head_dim, 4, "rope_vit_axial_spec")
    base = _check_base(base, "rope_vit_axial_spec")
    return RopeSpec(
        head_dim=head_dim,
        freqs=_quarter_freqs(head_dim, base),
        layout="interleaved",
        axes=AxisMap.halves(head_dim // 2, ("x", "y")),
    )


def dinov3_spec(head_dim: int = 64, base: float = 100.0) -> RopeSpec:
    """DINOv3: angle ``2*pi * coord / period`` with period ``base^(4k/D)``; rows then columns; half-split.
    Positions are normalised coordinates in [-1, 1] (:func:`ropekit.positions.grid.normalized_grid`)."""
    head_dim = _check_head_dim(head_dim, 4, "dinov3_spec")
    base = _check_base(base, "dinov3_spec")
    return RopeSpec(
        head_dim=head_dim,
        freqs=_quarter_freqs(head_dim, base, scale=2.0 * math.pi),
        layout="half",
        axes=AxisMap.halves(head_dim // 2, ("row", "col")),
    )


def axial_spec(
    head_dim: int,
    sections: tuple[int, ...],
    names: tuple[str, ...] = ("t", "row", "col"),
    *,
    base: float = 100.0,
    layout: str = "interleaved",
) -> RopeSpec:
    """N-D axial RoPE (e.g. video: frames x rows x cols): axis a owns ``sections[a]`` consecutive bands with
    ``theta_k = base^(-k / sections[a])``, k < sections[a] -- RoPE-ViT's per-axis table generalised to any number
    of axes and any split (``sections=(D/4, D/4)`` is :func:`rope_vit_axial_spec`)."""
    head_dim = _check_head_dim(head_dim, 2, "axial_spec")
    base = _check_base(base, "axial_spec")
    try:
        given = [as_int(x) for x in sections]
    except TypeError:  # not iterable
        given = [None]
    sec = tuple(x for x in given if x is not None and x >= 1)  # numpy integers too, as Python ints
    if len(sec) != len(given) or sum(sec) != head_dim // 2:
        raise ValueError(
            f"axial_spec: sections must be positive ints summing to head_dim/2={head_dim // 2}, got {sections!r}"
        )
    freqs = tuple(float(base) ** (-k / s) for s in sec for k in range(s))
    return RopeSpec(head_dim=head_dim, freqs=freqs, layout=layout, axes=AxisMap.contiguous(sec, tuple(names)))  # type: ignore[arg-type]


# ---------------------------------------------------------------------- released VL checkpoints
def _vl(description: str, **config: Any) -> dict[str, Any]:
    return {"description": description, "config": config}


#: name -> {"description", "config"}: the RoPE keys of the published config.json (text part, v4 schema).
VL_PRESETS: dict[str, dict[str, Any]] = {
    "qwen2-vl-7b": _vl(
        "Qwen2-VL-7B-Instruct: M-RoPE [16, 24, 24] over 64 slots, base 1e6",
        model_type="qwen2_vl",
        hidden_size=3584,
        num_attention_heads=28,
        max_position_embeddings=32768,
        rope_theta=1_000_000.0,
        rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]},
    ),
    "qwen2.5-vl-7b": _vl(
        "Qwen2.5-VL-7B-Instruct: M-RoPE [16, 24, 24], absolute-time t axis (tokens_per_second 2)",
        model_type="qwen2_5_vl",
        hidden_size=3584,
        num_attention_heads=28,
        max_position_embeddings=128000,
        rope_theta=1_000_000.0,
        rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]},
        vision_config={"tokens_per_second": 2},
    ),
    "qwen3-vl-8b": _vl(
        "Qwen3-VL-8B-Instruct: interleaved M-RoPE [24, 20, 20], base 5e6",
        model_type="qwen3_vl",
        max_position_embeddings=262144,  # copied from text_config for `ropekit inspect`'s default context
        text_config={
            "model_type": "qwen3_vl_text",
            "head_dim": 128,
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "max_position_embeddings": 262144,
            "rope_theta": 5_000_000.0,
            "rope_scaling": {
                "rope_type": "default",
                "mrope_section": [24, 20, 20],
                "mrope_interleaved": True,
            },
        },
    ),
    "glm-4.1v-9b": _vl(
        "GLM-4.1V-9B-Thinking: M-RoPE [8, 12, 12] over the rotary half (partial 0.5), interleaved pairs",
        model_type="glm4v",
        max_position_embeddings=65536,  # copied from text_config for `ropekit inspect`'s default context
        text_config={
            "model_type": "glm4v_text",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "max_position_embeddings": 65536,
            "partial_rotary_factor": 0.5,
            "rope_theta": 10000.0,
            "rope_scaling": {"rope_type": "default", "mrope_section": [8, 12, 12]},
        },
    ),
}
