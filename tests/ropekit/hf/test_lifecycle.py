"""patch / unpatch / patched: idempotent, undone bit for bit, family functions shared across models."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).parent))
from tiny import SMALL as _SMALL

SMALL = {**_SMALL, "max_position_embeddings": 64}

import ropekit.hf
from ropekit.hf.patch import _FUNCTIONS
from ropekit.hf.rotary import RopekitRotary


def _llama(**kw: object) -> torch.nn.Module:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model("llama", **{**SMALL, **kw})
        return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()


def _logits(model: torch.nn.Module) -> torch.Tensor:
    ids = torch.arange(3, 43).view(2, 20) % 128
    with torch.no_grad():
        return model(ids).logits


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {k: v.clone() for k, v in model.state_dict().items()}
    out.update({f"buffer:{k}": v.clone() for k, v in model.named_buffers()})  # non-persistent inv_freq too
    return out


def test_patch_is_idempotent_and_unpatch_restores_bit_for_bit() -> None:
    model = _llama()
    rot = model.model.rotary_emb
    cls, modeling = type(rot), sys.modules[type(rot).__module__]
    fn = modeling.apply_rotary_pos_emb  # the original, or the wrapper of models other tests left patched
    original = getattr(fn, "_ropekit_original", fn)
    state, logits = _state(model), _logits(model)

    assert ropekit.hf.patch(model) is model
    assert model.model.rotary_emb is rot and isinstance(rot, RopekitRotary) and isinstance(rot, cls)
    wrapped = modeling.apply_rotary_pos_emb
    assert wrapped._ropekit_original is original
    ropekit.hf.patch(model)  # no-op
    assert type(rot).__mro__.count(cls) == 1 and modeling.apply_rotary_pos_emb is wrapped
    patched_logits = _logits(model)
    torch.testing.assert_close(patched_logits, logits, rtol=1e-4, atol=1e-5)

    assert ropekit.hf.unpatch(model) is model
    assert type(rot) is cls and model.model.rotary_emb is rot
    # the original again, unless another live model of the family is still patched (then its wrapper stays)
    others = (modeling.__name__, "apply_rotary_pos_emb") in _FUNCTIONS
    assert modeling.apply_rotary_pos_emb is (wrapped if others else original)
    assert not any(k.startswith("_ropekit") for k in vars(rot))
    after = _state(model)
    assert after.keys() == state.keys() and all(torch.equal(after[k], state[k]) for k in state)
    assert torch.equal(_logits(model), logits)  # bit for bit
    ropekit.hf.unpatch(model)  # unpatching an unpatched model is a no-op


def test_patched_context_manager_undoes_on_exit_and_on_error() -> None:
    model = _llama()
    cls = type(model.model.rotary_emb)
    with ropekit.hf.patched(model) as m:
        assert m is model and isinstance(model.model.rotary_emb, RopekitRotary)
    assert type(model.model.rotary_emb) is cls
    with pytest.raises(RuntimeError, match="boom"), ropekit.hf.patched(model):
        raise RuntimeError("boom")
    assert type(model.model.rotary_emb) is cls
    ropekit.hf.patch(model)  # patched before entry: stays patched after exit
    with ropekit.hf.patched(model):
        pass
    assert isinstance(model.model.rotary_emb, RopekitRotary)
    ropekit.hf.unpatch(model)


def test_family_function_is_restored_only_when_no_patched_model_uses_it() -> None:
    a, b = _llama(), _llama()
    modeling = sys.modules[type(a.model.rotary_emb).__module__]
    fn = modeling.apply_rotary_pos_emb  # the original, or the wrapper of models other tests left patched
    ropekit.hf.patch(a)
    ropekit.hf.patch(b)
    ropekit.hf.unpatch(a)
    assert hasattr(modeling.apply_rotary_pos_emb, "_ropekit_original")  # b still uses it
    torch.testing.assert_close(_logits(b), _logits(a), rtol=1e-4, atol=1e-5)
    ropekit.hf.unpatch(b)
    others = (modeling.__name__, "apply_rotary_pos_emb") in _FUNCTIONS
    assert modeling.apply_rotary_pos_emb is (fn if others else getattr(fn, "_ropekit_original", fn))


def test_the_original_function_returns_when_the_last_patched_model_is_unpatched() -> None:
    import gc

    model = _llama()
    modeling = sys.modules[type(model.model.rotary_emb).__module__]
    gc.collect()  # models other tests left patched, now unreachable, no longer hold the wrapper
    fn = modeling.apply_rotary_pos_emb
    if hasattr(fn, "_ropekit_original"):
        pytest.skip("another live model of this family is patched in this process")
    ropekit.hf.patch(model)
    ropekit.hf.unpatch(model)
    assert modeling.apply_rotary_pos_emb is fn


def test_an_unpatched_model_of_a_patched_family_is_untouched() -> None:
    model, other = _llama(), _llama()
    expected = _logits(other)
    with ropekit.hf.patched(model):
        assert torch.equal(
            _logits(other), expected
        )  # the wrapper passes other models' calls through unchanged


def test_second_patch_with_other_options_is_refused() -> None:
    model = _llama(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    ropekit.hf.patch(model)
    with pytest.raises(ValueError, match="already patched with cache_correct=False"):
        ropekit.hf.patch(model, cache_correct=True)
    ropekit.hf.unpatch(model)


def test_refusals_leave_the_model_untouched() -> None:
    with pytest.raises(ValueError, match="transformers model"):
        ropekit.hf.patch(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="cache_correct must be a bool"):
        ropekit.hf.patch(_llama(), cache_correct="yes")  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gptj = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(
                "gptj", n_embd=64, n_head=4, n_layer=1, rotary_dim=8, vocab_size=128
            )
        )
    before = _state(gptj)
    with pytest.raises(ValueError, match="no rotary module it recognises in GPTJForCausalLM"):
        ropekit.hf.patch(gptj)
    assert all(torch.equal(v, before[k]) for k, v in _state(gptj).items())
