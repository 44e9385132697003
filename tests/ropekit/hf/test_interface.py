"""The replacement keeps the interface of the module it replaces (transformers' own tests construct it)."""

from __future__ import annotations

import copy
import inspect
import sys
import warnings
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).parent))
from tiny import SMALL as _SMALL

SMALL = {**_SMALL, "max_position_embeddings": 64, "pad_token_id": 0}

import ropekit.hf
from ropekit.hf.rotary import ROPEKIT_TABLES, RopekitRotary


def _model(model_type: str, **kw: object) -> torch.nn.Module:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model(model_type, **{**SMALL, **kw})
        return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    """Within 1e-4 of the largest logit (float32 rounding of a different but exact computation)."""
    assert float((a - b).abs().max()) <= 1e-4 * float(b.abs().max())


def _rotary(model: torch.nn.Module) -> torch.nn.Module:
    return next(m for n, m in model.named_modules() if n.endswith("rotary_emb"))


def _set_rope(config: object, params: dict[str, object]) -> None:
    """As transformers' tests do (``_set_config_rope_params``): update the dict, keep the keys already there."""
    rp = copy.deepcopy(config.rope_parameters)  # type: ignore[attr-defined]
    if all(isinstance(v, dict) for v in rp.values()):
        for v in rp.values():
            v.update(params)
    else:
        rp.update(params)
    config.rope_parameters = rp  # type: ignore[attr-defined]


@pytest.mark.parametrize("model_type", ["llama", "gpt_neox", "gemma3_text"])
def test_rope_scaling_frequencies_pattern(model_type: str) -> None:
    """transformers' test_model_rope_scaling_frequencies, against the replacement class (our own copy of the idea)."""
    kw = {"head_dim": 16} if model_type == "gemma3_text" else {}
    model = ropekit.hf.patch(_model(model_type, **kw))
    rope_class = type(_rotary(model))
    assert issubclass(rope_class, RopekitRotary)
    original_class = rope_class.__mro__[2]
    params = list(inspect.signature(_rotary(model).__init__).parameters)  # what transformers' test reads
    assert params == list(inspect.signature(original_class(config=model.config).__init__).parameters)
    assert params[0] == "config"
    config = copy.deepcopy(model.config)
    nested = all(isinstance(v, dict) for v in config.rope_parameters.values())
    kwargs = {"layer_type": next(iter(config.rope_parameters))} if nested else {}
    x = torch.randn(1)
    short, long = torch.arange(10).view(1, -1), torch.arange(96).view(1, -1)  # 1.5 x max_position_embeddings

    _set_rope(config, {"rope_type": "default", "rope_theta": 10_000.0})
    original = rope_class(config=config)
    cos_s, _ = original(x, short, **kwargs)
    cos_l, sin_l = original(x, long, **kwargs)
    torch.testing.assert_close(cos_s, cos_l[:, :10])
    assert hasattr(cos_s, ROPEKIT_TABLES)  # computed by ropekit

    _set_rope(config, {"rope_type": "linear", "factor": 10.0, "rope_theta": 10_000.0})
    linear = rope_class(config=config)
    lin_cos, lin_sin = linear(x, long, **kwargs)
    for p in range(0, 96, 10):
        torch.testing.assert_close(lin_cos[:, p], cos_l[:, p // 10])
        torch.testing.assert_close(lin_sin[:, p], sin_l[:, p // 10])

    _set_rope(config, {"rope_type": "dynamic", "factor": 10.0, "rope_theta": 10_000.0})
    ntk = rope_class(config=config)
    ntk_cos_s, _ = ntk(x, short, **kwargs)
    ntk_cos_l, _ = ntk(x, long, **kwargs)
    torch.testing.assert_close(ntk_cos_s, cos_s)
    assert not torch.allclose(ntk_cos_l, cos_l)
    prefix = f"{kwargs['layer_type']}_" if nested else ""
    inv, inv0 = getattr(ntk, f"{prefix}inv_freq"), getattr(original, f"{prefix}inv_freq")
    assert (inv <= inv0 * (1 + torch.finfo(torch.float32).eps)).all() and (inv < inv0).any()


@pytest.mark.parametrize("model_type", ["llama", "phi3", "gemma3_text"])
def test_replacement_keeps_attributes_and_outputs_of_the_original(model_type: str) -> None:
    kw = {"head_dim": 16} if model_type == "gemma3_text" else {}
    ref = _model(model_type, **kw)
    ours = ropekit.hf.patch(copy.deepcopy(ref))
    a, b = _rotary(ref), _rotary(ours)
    assert isinstance(b, type(a))
    for name in ("rope_type", "attention_scaling", "max_seq_len_cached", "original_max_seq_len", "config"):
        if hasattr(a, name):
            assert getattr(b, name) == getattr(a, name), name
    assert {k for k, _ in a.named_buffers()} == {k for k, _ in b.named_buffers()}
    for k, v in a.named_buffers():
        assert torch.equal(v, dict(b.named_buffers())[k])
    cls = type(b)
    rebuilt = [cls(ref.config), cls(config=ref.config)]
    if "device" in inspect.signature(type(a).__init__).parameters:  # the forms the original accepts
        rebuilt.append(cls(ref.config, device=None))
    pos = torch.arange(20).view(1, -1)
    for lt in list(a.rope_type) if isinstance(a.rope_type, dict) else [None]:
        kwargs = {} if lt is None else {"layer_type": lt}
        want = a(torch.zeros(1), pos, **kwargs)
        for m in [b, *rebuilt]:
            got = m(torch.zeros(1), pos, **kwargs)
            assert [t.shape for t in got] == [t.shape for t in want]
            assert [t.dtype for t in got] == [t.dtype for t in want]
            for u, v in zip(got, want):
                torch.testing.assert_close(u, v, rtol=0, atol=2e-6)


def test_the_patch_accepts_what_transformers_accepts() -> None:
    """original_max_position_embeddings inside default rope parameters (transformers writes it itself): silent."""
    params = {"rope_type": "default", "rope_theta": 10_000.0, "original_max_position_embeddings": 16384}
    ref = _model("llama", rope_parameters=params)
    ours = copy.deepcopy(ref)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ropekit.hf.patch(ours)
    ids = torch.arange(40).view(2, 20)
    with torch.no_grad():
        _close(ours(ids).logits, ref(ids).logits)
    # what transformers only warns about (a linear factor below 1) is accepted, with ropekit's warning
    ref = _model("llama", rope_parameters={"rope_type": "linear", "factor": 0.5, "rope_theta": 10_000.0})
    ours = copy.deepcopy(ref)
    with pytest.warns(UserWarning, match=r"factor=0.5 must be >= 1.*accepted, as transformers accepts it"):
        ropekit.hf.patch(ours)
    with torch.no_grad():
        _close(ours(ids).logits, ref(ids).logits)
    # strict validation stays available where users ask for it
    with pytest.raises(ValueError, match="factor=0.5"):
        ropekit.RopeSpec.from_hf(ref.config)
