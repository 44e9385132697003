"""A tiny random transformers Llama (2 layers, 4 heads of 8, 2 kv heads) saved with safetensors, for the report
command's tests (model folders with weights, and broken copies of them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch


def tiny_llama(folder: Path) -> Any:
    """Save the model to ``folder`` and return it (eval mode); skips the test where transformers is missing."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    model.save_pretrained(folder, safe_serialization=True)
    return model
