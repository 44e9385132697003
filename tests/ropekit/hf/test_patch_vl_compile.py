"""Patched VL text decoders under ``torch.compile(fullgraph=True)``: one graph, transformers' unpatched eager hidden
states (float32, <= 1e-4 relative), for the contiguous (Qwen2-VL), interleaved (Qwen3-VL) and repeated-pair (GLM-4V)
M-RoPE layouts, with [3, b, s] position ids holding an image grid. Negative control: scaling the ids by 7 where
ropekit builds its tables moves the traced graph's hidden states, so the graph reads ropekit's
multi-axis tables."""

from __future__ import annotations

import copy

import pytest
import torch

T = pytest.importorskip("transformers")

import ropekit.hf
import ropekit.hf.patch_vl as patch_vl_module

from .test_patch_vl import _model


def _positions() -> torch.Tensor:
    """Two text tokens, a 3 x 3 image (t fixed, h and w running), three text tokens: [3, 1, 14]."""
    rows = [(0, 0, 0), (1, 1, 1)] + [(2, 2 + h, 2 + w) for h in range(3) for w in range(3)]
    rows += [(p, p, p) for p in range(5, 8)]
    return torch.tensor(rows).T[:, None, :]


def _hidden(lm: torch.nn.Module, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return lm(inputs_embeds=x, position_ids=pos, use_cache=False).last_hidden_state  # type: ignore[no-any-return]


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl", "glm4v"])
def test_compiled_patched_vl_text_decoder(family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    ref = _model(family).eval()
    pos, x = _positions(), torch.randn(1, 14, ref.config.text_config.hidden_size)
    want = _hidden(ref.model.language_model, x, pos)
    lm = ropekit.hf.patch(copy.deepcopy(ref)).model.language_model
    torch._dynamo.reset()
    compiled = torch.compile(lm, backend="eager", fullgraph=True)  # a graph break raises
    got = _hidden(compiled, x, pos)
    match = float((got - want).abs().max() / want.abs().max())
    assert match < 1e-6

    real = patch_vl_module.axis_tables

    def shifted(p: torch.Tensor, spec: object, **kw: object) -> tuple[torch.Tensor, torch.Tensor]:
        # every id times 7 (a uniform shift would not do: logits depend on position differences only)
        return real(p * 7, spec, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(patch_vl_module, "axis_tables", shifted)
    torch._dynamo.reset()
    moved = _hidden(torch.compile(lm, backend="eager", fullgraph=True), x, pos)
    # the tiny random model barely depends on positions (~2e-4 here): the control must be far above the match
    assert float((moved - want).abs().max() / want.abs().max()) > 100 * max(match, 1e-7)
