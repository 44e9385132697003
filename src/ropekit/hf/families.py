# SPDX-License-Identifier: MIT
"""The transformers families ropekit patches, as data: one row per rotary pattern, one generic replacement.

A row says how to recognise a family's rotary module (its class names), what that module returns (``tables``:
the cos/sin layout transformers' attention expects), how the family rotates (``layout`` and the apply functions of
its modeling file with their calling convention, ``applies``), and how positions arrive (``positions``: "1d" today;
a multi-axis row, e.g. Qwen2-VL's M-RoPE, sets ``positions="mrope"`` and a spec builder, without restructuring).
Rows with ``refused`` set are recognised and refused with that reason. Adding a family is adding a row (and its
case in ``tests/ropekit/hf/test_families.py``); ``docs/hf.md``'s list is generated from the test's table.

Table layouts (what the rotary module returns, n = rotary_dim // 2 bands, [b, s, .]):
    "cat"        cos = [c_0..c_{n-1}, c_0..c_{n-1}]   (Llama's ``torch.cat((freqs, freqs))``)
    "interleave" cos = [c_0, c_0, c_1, c_1, ...]     (Cohere's ``repeat_interleave``)
    "half"       cos = [c_0..c_{n-1}]                 (gpt-oss: the apply function splits the head itself)
    "complex"    freqs_cis = c + i s, complex64       (Llama 4 text, DeepSeek-V2)
Apply kinds (calling convention of a modeling file's function):
    "qk"             f(q, k, cos, sin, unsqueeze_dim=1) -> (q, k)   (k may be None where the original allows it)
    "x"              f(x, cos, sin, unsqueeze_dim=1) -> x           (Gemma 3n / Gemma 4: q and k rotated apart)
    "mla_interleave" f(q, k, cos, sin, position_ids=None, unsqueeze_dim=1): pairs (2i, 2i+1) in, half split out
                     (DeepSeek-V3 ``rope_interleave``, MLA's separate rope head dim)
    "complex_bshd" / "complex_bhsd"  f(xq, xk, freqs_cis) with q in that format
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["APPLY_KINDS", "FAMILIES", "TABLE_LAYOUTS", "Family", "family_for_class"]

TABLE_LAYOUTS = ("cat", "interleave", "half", "complex")
APPLY_KINDS = ("qk", "x", "mla_interleave", "complex_bshd", "complex_bhsd")


@dataclass(frozen=True)
class Family:
    """One rotary pattern shared by one or more transformers families.

    Args:
        name: label used in messages and docs.
        rotary_classes: class names of the rotary modules this row recognises (checked module by module).
        tables: what the module returns (see :data:`TABLE_LAYOUTS`).
        layout: channel pairing of the rotation, "half" or "interleaved".
        applies: (function name in the modeling file, apply kind) pairs routed through ropekit.
        sign: +1, or -1 for a family whose ``rotate_half`` rotates by the negative angle (nanochat).
        tables_dtype: "input" (cos/sin cast to the activations' dtype) or "float32" (returned as computed).
        positions: "1d" (position_ids [b, s]); "mrope" for multi-axis rows (not yet patched).
        refused: None, or why ropekit refuses this family.
    """

    name: str
    rotary_classes: tuple[str, ...]
    tables: str = "cat"
    layout: str = "half"
    applies: tuple[tuple[str, str], ...] = (("apply_rotary_pos_emb", "qk"),)
    sign: int = 1
    tables_dtype: str = "input"
    positions: str = "1d"
    refused: str | None = None

    def __post_init__(self) -> None:
        if self.tables not in TABLE_LAYOUTS:
            raise ValueError(f"Family {self.name}: tables={self.tables!r}, expected one of {TABLE_LAYOUTS}")
        if self.layout not in ("half", "interleaved"):
            raise ValueError(f"Family {self.name}: layout={self.layout!r}, expected 'half' or 'interleaved'")
        for fn, kind in self.applies:
            if kind not in APPLY_KINDS:
                raise ValueError(f"Family {self.name}: apply {fn} has kind={kind!r}, expected {APPLY_KINDS}")


def _names(*stems: str) -> tuple[str, ...]:
    return tuple(f"{s}RotaryEmbedding" for s in stems)


_MLA = (("apply_rotary_pos_emb", "qk"), ("apply_rotary_pos_emb_interleave", "mla_interleave"))

#: Every rotary pattern ropekit knows. Half-split Llama-style rows first, then the special ones.
FAMILIES: tuple[Family, ...] = (
    Family(
        "llama-like (half split, cos/sin cast to the activations' dtype)",
        _names(
            "Afmoe",
            "Apertus",
            "Arcee",
            "AriaText",
            "AXK1",
            "AXK2",
            "Bamba",
            "BitNet",
            "Cwm",
            "Dbrx",
            "DiffLlama",
            "Doge",
            "Dots1",
            "Emu3",
            "Exaone4",
            "ExaoneMoe",
            "Falcon",
            "FalconH1",
            "Flint",
            "Gemma",
            "Gemma2",
            "Granite",
            "GraniteSWA",
            "GraniteMoe",
            "GraniteMoeSWA",
            "GraniteMoeHybrid",
            "GraniteMoeShared",
            "HrmText",
            "HYV3",
            "HYV4",
            "HyperCLOVAX",
            "Jais2",
            "JetMoe",
            "Kolibri1",
            "Lfm2",
            "Lfm2Moe",
            "Llama",
            "MiniCPM3",
            "MiniMax",
            "Ministral",
            "Ministral3",
            "Mistral",
            "Mixtral",
            "Mllama",
            "Moshi",
            "OlmoE",
            "Olmoe",
            "Qwen2",
            "Qwen2Moe",
            "Qwen3",
            "Qwen3Moe",
            "SeedOss",
            "SmolLM3",
            "Starcoder2",
            "VaultGemma",
            "Zamba2",
            "GPTNeoX",
            "GPTNeoXJapanese",
            "Nemotron",
            "Persimmon",
            "Phi",
            "Phi3",
            "Phimoe",
            "Phi4Multimodal",
            "StableLm",
            "Glm4Moe",
            "MiniMaxM2",
            "Qwen3Next",
            "SolarOpen",
            "Laguna",
            "Mellum",
            "Zaya",
            "MiMoV2Flash",
            "RecurrentGemma",
            "HunYuanDenseV1",
            "HunYuanMoEV1",
            "Olmo",
            "Olmo2",
            "Olmo3",
            "OlmoHybrid",
            "FlexOlmo",
            "Beam",
            "Lfm3",
            "Gemma3",
            "ModernBertDecoder",
            "Youtu",
            "DeepseekV3",
            "DeepseekV32",
            "Glm4MoeLite",
            "LongcatFlash",
            "GlmMoeDsa",
            "BailingHybrid",
        ),
        applies=_MLA,
    ),
    Family(
        "cohere (interleaved pairs, repeat_interleave tables)",
        _names("Blt", "Cohere", "Cohere2", "Cohere2Moe"),
        tables="interleave",
        layout="interleaved",
    ),
    Family(
        "glm/ernie/helium (interleaved pairs from cat tables)",
        _names("Glm", "Glm4", "Ernie4_5", "Ernie4_5_Moe", "Helium"),
        layout="interleaved",
    ),
    Family(
        "gemma3n/gemma4 (q and k rotated apart)",
        _names("Gemma3n", "Gemma4Text", "Gemma4UnifiedText"),
        applies=(("apply_rotary_pos_emb", "x"),),
    ),
    Family(
        "llama4 text (complex rotation, interleaved pairs, bshd)",
        _names("Llama4Text"),
        tables="complex",
        layout="interleaved",
        applies=(("apply_rotary_emb", "complex_bshd"),),
    ),
    Family(
        "deepseek_v2 (complex rotation, interleaved pairs, bhsd)",
        _names("DeepseekV2"),
        tables="complex",
        layout="interleaved",
        applies=(("apply_rotary_emb", "complex_bhsd"),),
    ),
    Family(
        "gpt-oss (half split, tables of n bands: the apply function splits the head)",
        _names("GptOss"),
        tables="half",
    ),
    Family(
        "nanochat (rotate_half by the negative angle)",
        _names("NanoChat"),
        sign=-1,
    ),
    Family(
        "multi-axis M-RoPE text models",
        _names(
            "Qwen3_5Text",
            "Qwen3_5MoeText",
            "Qwen4ExpText",
            "CohereCompass",
            "Dots3NoteText",
            "MiniMaxM3VL",
        ),
        positions="mrope",
        refused=(
            "M-RoPE text rotary (positions [3, b, s]) of a family outside the VL families ropekit.hf has verified "
            "(docs/multimodal.md); not patched"
        ),
    ),
    Family(
        "deepseek_v4 (rope on the trailing channels)",
        _names("DeepseekV4"),
        applies=(("apply_rotary_pos_emb", "x"),),
        refused="the rope channels are the last ones of the head (nope first); ropekit rotates leading channels",
    ),
)

_BY_CLASS = {cls: fam for fam in FAMILIES for cls in fam.rotary_classes}


def family_for_class(class_name: str) -> Family | None:
    """The row recognising a rotary module class name, or None."""
    return _BY_CLASS.get(class_name)
