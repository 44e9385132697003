"""The family sweep: every transformers causal-LM family with a rotary embedding, patched or refused with a reason.

For each model type ``tiny.families()`` enumerates (causal-LM families whose modeling file defines a text rotary
class), ``EXPECTED`` says what ropekit does with it: "exact" (float32, left-padded batch of 2: logits within 1e-4
relative of the unpatched model, the family's apply function routed through ropekit's kernels, greedy generation
with a KV cache equal; and a negative control: the same patch with the base divided by 10 must fail the comparison),
"refused" (``patch`` raises ValueError with the given reason), or "untested" (our tiny config cannot build or run
the unpatched model; the reason says why; not counted). A family transformers adds fails ``test_table_is_complete``
until it is classified. ``docs/hf.md``'s list is generated from this table: ``python tests/ropekit/hf/test_families.py``
rewrites it and ``test_docs_list_is_current`` checks it.

The default run covers one or more families per row of ``ropekit.hf.FAMILIES`` (``FAST``); the rest of the sweep is
marked slow (``pytest -m slow tests/ropekit/hf/test_families.py``, a few minutes on 2 loaded cores).
"""

from __future__ import annotations

import copy
import dataclasses
import re
import sys
import warnings
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

import ropekit.hf
from ropekit.hf.apply import CALLS
from ropekit.hf.rotary import RopekitRotary

sys.path.insert(0, str(Path(__file__).parent))
from tiny import build, families, padded_inputs, rel_masked

_MROPE = (
    "M-RoPE text rotary (positions [3, b, s]) of a family outside the VL families ropekit.hf has verified "
    "(docs/multimodal.md); not patched"
)
_NOT_BUILT = "our tiny config cannot build or run the unpatched model"
#: model_type -> ("exact" | "refused" | "untested", reason)
EXPECTED: dict[str, tuple[str, str]] = {
    mt: ("exact", "")
    for mt in [
        "afmoe",
        "apertus",
        "arcee",
        "aria_text",
        "axk1",
        "axk2",
        "bailing_hybrid",
        "bamba",
        "beam",
        "bitnet",
        "cohere",
        "cohere2",
        "cohere2_moe",
        "cwm",
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v32",
        "diffllama",
        "doge",
        "dots1",
        "emu3",
        "ernie4_5",
        "ernie4_5_moe",
        "exaone4",
        "exaone_moe",
        "falcon",
        "falcon_h1",
        "flex_olmo",
        "flint",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "gemma4",
        "gemma4_text",
        "gemma4_unified",
        "gemma4_unified_text",
        "glm",
        "glm4",
        "glm4_moe",
        "glm4_moe_lite",
        "glm_moe_dsa",
        "gpt_neox",
        "gpt_neox_japanese",
        "gpt_oss",
        "granite",
        "granite_swa",
        "granitemoe",
        "granitemoe_swa",
        "granitemoehybrid",
        "granitemoeshared",
        "helium",
        "hunyuan_v1_dense",
        "hunyuan_v1_moe",
        "hy_v3",
        "hy_v4",
        "hyperclovax",
        "internlm3",
        "iquestcoder",
        "jais2",
        "jetmoe",
        "kolibri1",
        "laguna",
        "lfm2",
        "lfm2_moe",
        "lfm3",
        "llama",
        "llama4",
        "llama4_text",
        "mellum",
        "mimo_v2_flash",
        "minicpm3",
        "minimax",
        "minimax_m2",
        "ministral",
        "ministral3",
        "mistral",
        "mixtral",
        "mllama",
        "modernbert-decoder",
        "moshi",
        "nanochat",
        "nemotron",
        "olmo",
        "olmo2",
        "olmo3",
        "olmo_hybrid",
        "olmoe",
        "persimmon",
        "phi",
        "phi3",
        "phi4_multimodal",
        "phimoe",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "qwen3_next",
        "recurrent_gemma",
        "seed_oss",
        "smollm3",
        "solar_open",
        "stablelm",
        "starcoder2",
        "vaultgemma",
        "youtu",
    ]
}
EXPECTED.update(
    {
        "qwen3_5": ("refused", _MROPE),
        "qwen3_5_text": ("refused", _MROPE),
        "qwen3_5_moe": ("refused", _MROPE),
        "qwen3_5_moe_text": ("refused", _MROPE),
        "minimax_m3_vl_text": ("refused", _MROPE),
        "deepseek_v4": (
            "refused",
            "the rope channels are the last ones of the head (nope first); ropekit rotates leading channels",
        ),
        "blt": ("untested", f"{_NOT_BUILT} (BltConfig has no num_hidden_layers)"),
        "cohere_compass_text": ("untested", f"{_NOT_BUILT} (layer types vs rope parameters)"),
        "dbrx": ("untested", f"{_NOT_BUILT} (DbrxAttentionConfig has no rope_theta)"),
        "dots3_note": ("untested", f"{_NOT_BUILT} (M-RoPE text; would be refused)"),
        "dots3_note_text": ("untested", f"{_NOT_BUILT} (M-RoPE text; would be refused)"),
        "gemma3n": ("untested", f"{_NOT_BUILT} (needs timm)"),
        "gemma3n_text": ("untested", f"{_NOT_BUILT} (per-layer inputs)"),
        "hrm_text": ("untested", f"{_NOT_BUILT} (stack layout)"),
        "longcat_flash": ("untested", f"{_NOT_BUILT} (zero experts)"),
        "qwen4_exp": ("untested", f"{_NOT_BUILT} (indexer sizes)"),
        "qwen4_exp_text": ("untested", f"{_NOT_BUILT} (indexer sizes)"),
        "zaya": (
            "untested",
            "the rotation does not reach the tiny model's logits (the negative control sees no change)",
        ),
        "zamba2": ("untested", f"{_NOT_BUILT} (hybrid block layout)"),
    }
)
#: run by default: every row of ropekit.hf.FAMILIES and every case the issue names
FAST = [
    "llama",
    "mistral",
    "qwen3",
    "gemma2",
    "gemma3_text",
    "gpt_neox",
    "phi",
    "stablelm",
    "persimmon",
    "cohere",
    "cohere2",
    "cohere2_moe",
    "glm",
    "glm4",
    "deepseek_v2",
    "deepseek_v3",
    "llama4_text",
    "gpt_oss",
    "nanochat",
    "gemma4_text",
    "granite_swa",
    "lfm3",
    "minicpm3",
    "ernie4_5",
    "qwen3_5_text",  # refused: multi-axis
    "deepseek_v4",  # refused: rope channels last
]
_ALL = sorted(families())


def _params() -> list[object]:
    return [
        pytest.param(mt, marks=() if mt in FAST else (pytest.mark.slow,))
        for mt in _ALL
        if EXPECTED.get(mt, ("",))[0] in ("exact", "refused")
    ]


def test_table_is_complete() -> None:
    """Every family transformers ships with a rotary class is classified (a new one fails until it is)."""
    missing = [mt for mt in _ALL if mt not in EXPECTED]
    assert not missing, f"classify these transformers families in EXPECTED: {missing}"
    assert sum(v[0] == "exact" for v in EXPECTED.values()) >= 100


@pytest.mark.parametrize("model_type", _params())
def test_family(model_type: str) -> None:
    status, reason = EXPECTED[model_type]
    ref = build(model_type)
    ours = copy.deepcopy(ref)
    if status == "refused":
        with pytest.raises(ValueError, match=re.escape(reason)):
            ropekit.hf.patch(ours)
        assert not any(isinstance(m, RopekitRotary) for m in ours.modules())
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ropekit.hf.patch(ours)
    modeling = {type(m).__mro__[2].__module__ for m in ours.modules() if isinstance(m, RopekitRotary)}
    assert modeling
    ids, mask = padded_inputs()
    before = sum(n for (mod, _), n in CALLS.items() if mod in modeling)
    with torch.no_grad():
        a = ref(input_ids=ids, attention_mask=mask).logits
        b = ours(input_ids=ids, attention_mask=mask).logits
    assert sum(n for (mod, _), n in CALLS.items() if mod in modeling) > before, (
        "ropekit's kernels did not rotate"
    )
    assert rel_masked(a, b, mask) < 1e-4
    kw = {"max_new_tokens": 3, "do_sample": False, "pad_token_id": 0}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.equal(
            ref.generate(ids, attention_mask=mask, **kw), ours.generate(ids, attention_mask=mask, **kw)
        )
    # negative control: the same comparison fails with the base divided by 10
    for m in ours.modules():
        if isinstance(m, RopekitRotary):
            m._ropekit_specs = {
                k: dataclasses.replace(s, base=s.base / 10) for k, s in m._ropekit_specs.items()
            }
    with torch.no_grad():
        c = ours(input_ids=ids, attention_mask=mask).logits
    assert rel_masked(a, c, mask) > 2e-4


# ---------------------------------------------------------------------------------------------- the docs' list
DOCS = Path(__file__).parents[3] / "docs" / "hf.md"
_BEGIN, _END = (
    "<!-- families:begin (generated by tests/ropekit/hf/test_families.py) -->",
    "<!-- families:end -->",
)


def render() -> str:
    exact = sorted(mt for mt, (s, _) in EXPECTED.items() if s == "exact")
    lines = [
        _BEGIN,
        (
            f"**Exact parity ({len(exact)} families)** -- logits within 1e-4 relative (float32, left-padded "
            "batch), greedy generation with a KV cache equal, rotation by ropekit's kernels:"
        ),
        "",
        ", ".join(f"`{mt}`" for mt in exact),
        "",
        "**Refused** (`patch` raises `ValueError` with the reason):",
        "",
    ]
    lines += [f"- `{mt}`: {r}" for mt, (s, r) in sorted(EXPECTED.items()) if s == "refused"]
    lines += ["", "**Not verified** (not counted above):", ""]
    lines += [f"- `{mt}`: {r}" for mt, (s, r) in sorted(EXPECTED.items()) if s == "untested"]
    lines.append(_END)
    return "\n".join(lines)


def test_docs_list_is_current() -> None:
    text = DOCS.read_text()
    assert _BEGIN in text and _END in text, f"{DOCS} lacks the generated family list markers"
    current = text[text.index(_BEGIN) : text.index(_END) + len(_END)]
    assert current == render(), (
        "docs/hf.md's family list is stale: run python tests/ropekit/hf/test_families.py"
    )


if __name__ == "__main__":
    text = DOCS.read_text()
    if _BEGIN in text:
        text = text[: text.index(_BEGIN)] + render() + text[text.index(_END) + len(_END) :]
    else:
        text += "\n" + render() + "\n"
    DOCS.write_text(text)
    print(f"wrote {DOCS}")
