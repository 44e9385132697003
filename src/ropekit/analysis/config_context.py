# SPDX-License-Identifier: MIT
"""A config.json's language-model part and its context length, read the same way by ``ropekit inspect`` and
``ropekit report``.

- :func:`text_part`: multimodal configs (Qwen2.5/3-VL, GLM-4.1V, Gemma 3 ...) nest the language model's keys under
  ``text_config``. When the top level has no RoPE keys of its own (``rope_parameters``, ``rope_theta``), the text
  part is what is read, with the top level's ``model_type`` where the text part names none.
- :func:`declared_context`: the config's ``max_position_embeddings`` (or the name the family's transformers config
  maps it to: GPT-J's ``n_positions``, ...), checked to be a positive int; None when absent or null.
- :data:`DEFAULT_CONTEXTS`: transformers' config-class default of ``max_position_embeddings`` for common families
  (transformers 5.23), which is what a model gets when its config.json leaves the key out.
- :func:`config_context`: the declared context, else the family's default (with a note saying so), else a
  ValueError naming the key. No silent fallback: a context nobody stated would move every figure.
- :func:`yarn_extended_context`: the usable context of a YaRN config whose context is its original length L0.
  Qwen's model cards add a YaRN block (``factor: 4.0, original_max_position_embeddings: 32768``) to a config whose
  ``max_position_embeddings`` stays at the pretraining length (32768). transformers' YaRN extends L0 by the factor
  (``factor`` is "post-yarn context length / pre-yarn context length"; with ``max_position_embeddings == L0`` it
  does not warn, the implicit factor being 1), and vLLM serves ``L0 * factor`` tokens for YaRN: such a model's
  usable context is 131072, not the 32768 the config states. ``inspect``, ``precision`` and ``report`` apply it to
  the config's own length only, never to an explicit ``--context``.

Shapes: none (configuration only).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ropekit.analysis.layers import LayerView
from ropekit.scaling import Yarn

__all__ = [
    "CONTEXT_KEYS",
    "DEFAULT_CONTEXTS",
    "config_context",
    "config_text",
    "declared_context",
    "text_part",
    "yarn_extended_context",
]

#: families whose transformers config stores ``max_position_embeddings`` under another name (its ``attribute_map``)
CONTEXT_KEYS: dict[str, str] = {
    "bailing_hybrid": "model_max_length",
    "codegen": "n_positions",
    "dbrx": "max_seq_len",
    "gptj": "n_positions",
    "kimi_linear": "model_max_length",
}

#: model_type -> transformers' config-class default ``max_position_embeddings`` (transformers 5.23; checked against
#: the classes in tests/ropekit/report/test_context.py). A family not listed has no known default.
DEFAULT_CONTEXTS: dict[str, int] = {
    "apertus": 65536,
    "arcee": 4096,
    "codegen": 2048,
    "cohere": 8192,
    "cohere2": 8192,
    "deepseek_v2": 2048,
    "deepseek_v3": 4096,
    "ernie4_5": 131072,
    "exaone4": 2048,
    "falcon": 2048,
    "gemma": 8192,
    "gemma2": 8192,
    "gemma3_text": 131072,
    "glm": 131072,
    "glm4": 131072,
    "glm4v_text": 32768,
    "gpt_neox": 2048,
    "gpt_oss": 131072,
    "gptj": 2048,
    "granite": 2048,
    "granitemoe": 2048,
    "helium": 4096,
    "internlm3": 32768,
    "llama": 2048,
    "llama4_text": 131072,
    "minimax_m2": 196608,
    "ministral": 131072,
    "mistral": 131072,
    "mixtral": 131072,
    "modernbert": 8192,
    "nemotron": 4096,
    "olmo": 2048,
    "olmo2": 2048,
    "olmo3": 2048,
    "persimmon": 16384,
    "phi": 2048,
    "phi3": 4096,
    "phimoe": 131072,
    "qwen2": 32768,
    "qwen2_5_vl_text": 32768,
    "qwen2_moe": 32768,
    "qwen2_vl_text": 32768,
    "qwen3": 32768,
    "qwen3_moe": 32768,
    "qwen3_vl_moe_text": 128000,
    "qwen3_vl_text": 128000,
    "seed_oss": 524288,
    "smollm3": 32768,
    "stablelm": 4096,
    "starcoder2": 4096,
}

_KEY = "max_position_embeddings"


def text_part(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's keys of ``config``: its ``text_config`` when that is a dict and the top level has
    neither ``rope_parameters`` nor ``rope_theta``, else ``config`` itself (the same object)."""
    text = config.get("text_config")
    if isinstance(text, dict) and "rope_parameters" not in config and "rope_theta" not in config:
        return {**text, "model_type": text.get("model_type", config.get("model_type"))}
    return config


def _key(config: dict[str, Any]) -> str:
    """The key ``config`` states its context under: ``max_position_embeddings``, else its family's own name."""
    alias = CONTEXT_KEYS.get(str(config.get("model_type") or ""))
    return alias if _KEY not in config and alias is not None and alias in config else _KEY


def declared_context(config: dict[str, Any]) -> int | None:
    """The context length ``config`` states (see the module docstring); None when the key is absent or null.

    Raises:
        ValueError: the value is not a positive int (a bool, float, string, 0 or less), naming the key and value.
    """
    key = _key(config)
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        why = (
            " (transformers' config classes refuse a float here too; write it as an int)"
            if isinstance(value, float)
            else ""
        )
        raise ValueError(f"config {key} must be a positive int (the context length), got {value!r}{why}")
    return value


def config_context(config: dict[str, Any]) -> tuple[int, str | None]:
    """(context, note): the context ``config`` states (note None), else transformers' default for its
    ``model_type`` (:data:`DEFAULT_CONTEXTS`; the note says it is one).

    Raises:
        ValueError: the stated value is not a positive int (:func:`declared_context`); or the config states none
            (the key absent or null) and its family's default is unknown, naming the key.
    """
    declared = declared_context(config)
    if declared is not None:
        return declared, None
    key = _key(config)
    model_type = str(config.get("model_type") or "")
    if key not in config and model_type in DEFAULT_CONTEXTS:
        n = DEFAULT_CONTEXTS[model_type]
        return n, (
            f"the config has no {key}: {n:,} is transformers' default for model_type {model_type!r}, "
            "what the model gets without it"
        )
    state = "is null" if key in config else "is missing"
    known = (
        "transformers' config classes refuse null here"
        if key in config
        else f"ropekit does not know transformers' default for model_type {model_type or None!r}"
    )
    raise ValueError(f"config {key} (the context length) {state} and {known}")


def yarn_extended_context(views: list[LayerView], context: int) -> tuple[list[LayerView], int, str] | None:
    """(views at the extended length, that length, a note) when a view's YaRN has ``L0 == context`` and a factor
    above 1 (the longest ``int(factor * L0)`` of such views); None when none has (see the module docstring).

    ``context`` is the config's own length (its ``max_position_embeddings``, or its family's default): callers
    never apply this to a length the user passed (``--context``).
    """
    extended = {
        (int(sc.factor * sc.original_max_position_embeddings), sc.factor)
        for v in views
        if isinstance(sc := v.spec.scaling, Yarn)
        and sc.original_max_position_embeddings == context
        and sc.factor > 1.0
    }
    if not extended:
        return None
    length, factor = max(extended)
    note = (
        f"YaRN factor {factor:g} over original_max_position_embeddings={context:,}, which the config's context "
        f"equals: transformers' YaRN extends that length by the factor (vLLM serves {length:,} tokens too); pass "
        f"--context {context} to judge the unextended length"
    )
    return [dataclasses.replace(v, context=length) for v in views], length, note


def config_text(path: Path, expected: str) -> str:
    """The text of a config file SOURCE names (``inspect``, ``precision`` and ``report`` read it alike); a binary
    file (a pickle, a .bin, safetensors under another name) is refused naming the file and ``expected`` (what
    SOURCE may be), not with a bare codec error."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"SOURCE {str(path)!r} is not a UTF-8 text file, so not a config.json ({e.reason} at byte {e.start}); "
            f"SOURCE is {expected}"
        ) from None
