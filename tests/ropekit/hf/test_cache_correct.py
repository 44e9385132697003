"""patch(model, cache_correct=True): cached keys follow the frequencies when dynamic NTK / LongRoPE switch.

Oracle: the unpatched transformers model, freshly copied for each length, run over the whole sequence so far (a
full forward has no cache, so nothing in it is stale). Default patch: transformers' own (stale-key) generation.

What re-rotation can and cannot do: it makes every cached key of the first attention layer exactly what a full
forward computes, so a one-layer model generates exactly what full forwards give at every length. In deeper layers
the cached keys and values were computed from hidden states that attended with the old frequencies: their content,
not only their phase, differs from a full forward's, and no rotation fixes that (only recomputing the cache would).
There the test checks the first layer's cache exactly and that the drift is reduced.
"""

from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).parent))
from tiny import SMALL as _SMALL

SMALL = {**_SMALL, "pad_token_id": 0}

import ropekit.hf

L0 = 16  # frequencies switch once the sequence passes 16 tokens
PROMPT, NEW = 12, 10
CASES = {
    "llama-dynamic": (
        "llama",
        {
            "max_position_embeddings": L0,
            "rope_parameters": {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 1e4},
        },
    ),
    # (Phi-3 itself re-runs the prompt when LongRoPE switches; a Llama with LongRoPE keeps its stale cache)
    "llama-longrope": (
        "llama",
        {
            "max_position_embeddings": 4 * L0,
            "rope_parameters": {
                "rope_type": "longrope",
                "short_factor": [1.0 + 0.05 * i for i in range(8)],
                "long_factor": [2.0 + 3 * i for i in range(8)],
                "original_max_position_embeddings": L0,
                "rope_theta": 1e4,
            },
        },
    ),
}


def _model(name: str, layers: int = 2) -> torch.nn.Module:
    model_type, kw = CASES[name]
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model(model_type, **{**SMALL, **kw, "num_hidden_layers": layers})
        return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()


def _generate(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> object:
    kw = {"max_new_tokens": NEW, "do_sample": False, "output_logits": True, "return_dict_in_generate": True}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.generate(ids, attention_mask=mask, pad_token_id=0, **kw)


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """The position ids generate gives a left-padded batch (padding slots at 0)."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def _errors(ref: torch.nn.Module, out: object, mask: torch.Tensor) -> list[float]:
    """Per step: max |generated logits - full-forward logits| relative to the largest full-forward logit."""
    errs = []
    for j, step in enumerate(out.logits):  # type: ignore[attr-defined]
        n = PROMPT + j
        full_mask = torch.cat([mask, torch.ones(mask.shape[0], j, dtype=mask.dtype)], dim=1)
        with torch.no_grad():
            full = copy.deepcopy(ref)(
                input_ids=out.sequences[:, :n],  # type: ignore[attr-defined]
                attention_mask=full_mask,
                position_ids=_positions(full_mask),
            ).logits[:, -1]
        errs.append(float((step - full).abs().max() / full.abs().max()))
    return errs


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(3, 128, (2, PROMPT), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # left padding
    return ids, mask


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_layer_generation_equals_full_forward_at_every_length(name: str) -> None:
    ref = _model(name, layers=1)
    ids, mask = _inputs()
    ours = ropekit.hf.patch(copy.deepcopy(ref), cache_correct=True)
    errs = _errors(ref, _generate(ours, ids, mask), mask)
    assert max(errs) < 1e-4, errs
    rot = next(m for n, m in ours.named_modules() if n.endswith("rotary_emb"))
    assert rot._ropekit_cache_state.rerotations > 0  # the frequencies did switch, and the keys followed
    assert max(_errors(ref, _generate(copy.deepcopy(ref), ids, mask), mask)) > 1e-3  # transformers drifts


@pytest.mark.parametrize("name", sorted(CASES))
def test_deeper_models_first_layer_cache_exact_drift_reduced_default_is_transformers(name: str) -> None:
    ref = _model(name, layers=2)
    ids, mask = _inputs()
    ours = ropekit.hf.patch(copy.deepcopy(ref), cache_correct=True)
    out = _generate(ours, ids, mask)
    n = out.sequences.shape[1] - 1  # type: ignore[attr-defined]
    full_mask = torch.cat([mask, torch.ones(2, n - PROMPT, dtype=mask.dtype)], dim=1)
    with torch.no_grad():
        full = copy.deepcopy(ref)(
            input_ids=out.sequences[:, :n],  # type: ignore[attr-defined]
            attention_mask=full_mask,
            position_ids=_positions(full_mask),
            use_cache=True,
        )
    got, want = out.past_key_values.layers[0].keys, full.past_key_values.layers[0].keys  # type: ignore[attr-defined]
    real = full_mask.bool()[:, None, :, None].expand_as(want)  # padded slots hold keys nobody attends to
    assert float((got - want)[real].abs().max()) <= 1e-4 * float(want.abs().max())
    out_hf = _generate(copy.deepcopy(ref), ids, mask)
    assert max(_errors(ref, out, mask)) < 0.5 * max(_errors(ref, out_hf, mask))

    # default: transformers' own behaviour -- equal to unpatched generate (stale keys included)
    out_d = _generate(ropekit.hf.patch(copy.deepcopy(ref)), ids, mask)
    for a, b in zip(out_d.logits, out_hf.logits):  # type: ignore[attr-defined]
        assert float((a - b).abs().max() / b.abs().max()) < 1e-4


def test_cache_correct_is_refused_where_it_cannot_work() -> None:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model(
            "gemma3_text", **{**SMALL, "head_dim": 16, "layer_types": ["sliding_attention", "full_attention"]}
        )
        model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    cls = type(model.model.rotary_emb)
    with pytest.raises(ValueError, match="per-layer-type rotaries are not supported by cache_correct"):
        ropekit.hf.patch(model, cache_correct=True)
    assert type(model.model.rotary_emb) is cls
