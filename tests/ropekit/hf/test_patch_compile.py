"""Patched transformers models under ``torch.compile``: one graph, the same logits, no recompilation in generate.

Found by transformers' own compile tests run patched (``tools/hf_suite/run.py -k compil``): the wrapped apply
function's prepared-call cache (storage pointers, a dict filled per forward) broke the graph at
``UntypedStorage.data_ptr`` and added guards that recompiled on every ``generate``. Traced, the wrapper now
calls :func:`ropekit.apply_rope_tables` directly.

Oracle: transformers' unpatched eager model of the same random weights (float32, left-padded batch); a negative
control shows the compiled graph rotates through ropekit (sabotaging ropekit's rotation moves the logits).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")

import ropekit.hf
import ropekit.hf.apply as hf_apply
import ropekit.hf.rotary as hf_rotary

sys.path.insert(0, str(Path(__file__).parent))
from tiny import build, padded_inputs, rel_masked

#: one family per apply kind: half-split q/k, partial rotary, interleaved pairs (GLM, Cohere),
#: MLA's interleaved rope head, Llama 4's complex rotation
FAMILIES = ["llama", "phi", "glm", "cohere", "deepseek_v3", "llama4_text"]


def _compiled_logits(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    torch._dynamo.reset()
    fn = torch.compile(model, backend="eager", fullgraph=True)  # fullgraph: a graph break raises
    with torch.no_grad():
        return fn(input_ids=ids, attention_mask=mask, use_cache=False).logits  # type: ignore[no-any-return]


@pytest.mark.parametrize("model_type", FAMILIES)
def test_compiled_patched_forward(model_type: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ref = build(model_type)
    ids, mask = padded_inputs()
    with torch.no_grad():
        want = ref(input_ids=ids, attention_mask=mask, use_cache=False).logits
    model = copy.deepcopy(ref)
    ropekit.hf.patch(model)
    assert rel_masked(want, _compiled_logits(model, ids, mask), mask) < 1e-4

    # negative controls: the graph reads ropekit's tables (positions doubled there move the logits; a shift would not:
    # the logits depend only on position differences) ...
    real_tables = hf_rotary.rope_tables
    monkeypatch.setattr(hf_rotary, "rope_tables", lambda pos, spec, **kw: real_tables(pos * 2, spec, **kw))
    assert rel_masked(want, _compiled_logits(model, ids, mask), mask) > 1e-3
    monkeypatch.setattr(hf_rotary, "rope_tables", real_tables)
    # ... and rotates through ropekit's apply (an identity rotation there moves them). Not Llama 4: its attention
    # calls freqs_cis.to(device), which in eager returns the tagged tensor itself but in a trace a new one, so the
    # compiled graph multiplies by ropekit's complex tables in the model's own apply_rotary_emb (still exact)
    real = hf_apply.apply_rope_tables

    def unrotated(q: Any, k: Any, cos: torch.Tensor, sin: torch.Tensor, spec: Any, **kw: Any) -> Any:
        return real(q, k, torch.ones_like(cos), torch.zeros_like(sin), spec, **kw)

    monkeypatch.setattr(hf_apply, "apply_rope_tables", unrotated)
    moved = rel_masked(want, _compiled_logits(model, ids, mask), mask)
    assert (moved < 1e-4) if model_type == "llama4_text" else (moved > 1e-3)


def test_compiled_generate_static_cache_does_not_recompile() -> None:
    """transformers' test_static_cache_no_recompile_with_smaller_length, patched: a second generate with a
    smaller length reuses the compiled forward (dynamo raises on any recompilation); tokens equal unpatched."""
    from transformers import CompileConfig

    ref = build("llama")
    ids, mask = padded_inputs()
    kw: dict[str, Any] = {"attention_mask": mask, "do_sample": False, "cache_implementation": "static"}
    want5 = ref.generate(ids, max_new_tokens=5, **kw)
    want2 = ref.generate(ids, max_new_tokens=2, **kw)
    model = copy.deepcopy(ref)
    ropekit.hf.patch(model)
    cfg = CompileConfig(backend="eager", fullgraph=True)
    cfg._compile_all_devices = True  # compile on CPU too
    torch._dynamo.reset()
    got5 = model.generate(ids, max_new_tokens=5, compile_config=cfg, **kw)
    assert hasattr(model, "_compiled_call")
    with torch._dynamo.config.patch(error_on_recompile=True):
        got2 = model.generate(ids, max_new_tokens=2, compile_config=cfg, **kw)
    assert torch.equal(got5, want5) and torch.equal(got2, want2)
