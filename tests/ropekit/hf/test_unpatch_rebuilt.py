"""unpatch restores a rotary module built while the model was patched (``type(model.model.rotary_emb)(config=...)``,
the constructor form the patched class keeps), not only the modules patch recorded.

Trial finding (T2): such a module stayed a ``Ropekit*`` class after unpatch: ``torch.save(model)`` failed and a
second patch said it found no rotary module. Oracle: transformers' own rotary module built from the same config.
"""

from __future__ import annotations

import io

import pytest
import torch

pytest.importorskip("transformers")
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

import ropekit.hf
from tests.ropekit.hf.test_buffer_edit import _model


def test_a_rotary_rebuilt_while_patched_is_restored_by_unpatch() -> None:
    model = _model()
    cfg = model.config
    ropekit.hf.patch(model)
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "rope_theta": 1e4}
    new = LlamaConfig(**{**cfg.to_dict(), "rope_parameters": yarn})
    model.model.rotary_emb = type(model.model.rotary_emb)(config=new)
    x, pos = torch.zeros(1, 5, 16), torch.arange(0, 50, 10)[None]
    want = LlamaRotaryEmbedding(config=new)(x, pos)
    got = model.model.rotary_emb(x, pos)  # patched: ropekit's tables for the new config
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    ropekit.hf.unpatch(model)
    assert type(model.model.rotary_emb) is LlamaRotaryEmbedding
    assert not [a for a in model.model.rotary_emb.__dict__ if a.startswith("_ropekit_")]
    torch.testing.assert_close(
        model.model.rotary_emb(x, pos), want, rtol=0, atol=0
    )  # transformers' own again
    torch.save(model.state_dict(), io.BytesIO())
    torch.save(model, io.BytesIO())  # the Ropekit class cannot be pickled: it is gone
    ropekit.hf.patch(model)  # recognised again
    assert type(model.model.rotary_emb).__name__ == "RopekitLlamaRotaryEmbedding"
