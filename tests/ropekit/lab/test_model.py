"""The lab's model: causal, and KV-cache decoding equals the full forward for every encoding."""

from __future__ import annotations

import pytest
import torch

from ropekit.lab.encodings import ENCODINGS
from ropekit.lab.model import LMConfig, TinyLM

CFG = {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "ffn": 64, "max_positions": 64}


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_kv_cache_decoding_equals_full_forward(encoding: str) -> None:
    torch.manual_seed(0)
    model = TinyLM(LMConfig(encoding=encoding, **CFG)).eval()
    with torch.no_grad():
        for p in model.parameters():  # larger weights than the init so that positions matter
            p.mul_(5)
    tokens = torch.randint(0, 256, (2, 12))
    with torch.no_grad():
        full, _ = model(tokens)
        logits, cache = model(tokens[:, :5])
        steps = [logits]
        for t in range(5, 12):
            logits, cache = model(tokens[:, t : t + 1], cache=cache)  # positions continue from the cache
            steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_causal(encoding: str) -> None:
    torch.manual_seed(0)
    model = TinyLM(LMConfig(encoding=encoding, **CFG)).eval()
    a = torch.randint(0, 256, (1, 10))
    b = a.clone()
    b[0, 7:] = (b[0, 7:] + 1) % 256
    with torch.no_grad():
        la, lb = model(a)[0], model(b)[0]
    torch.testing.assert_close(la[:, :7], lb[:, :7], rtol=0, atol=1e-5)
    assert (la[:, 7:] - lb[:, 7:]).abs().max() > 1e-4


def test_generate_uses_the_cache() -> None:
    torch.manual_seed(0)
    model = TinyLM(LMConfig(encoding="rope", **CFG)).eval()
    prompt = torch.randint(0, 256, (1, 6))
    out = model.generate(prompt, 4)
    seq = prompt
    for _ in range(4):  # the same greedy tokens without a cache
        nxt = model(seq)[0][:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], 1)
    assert torch.equal(out, seq[:, 6:])


def test_generate_zero_tokens_is_empty_and_negative_is_refused() -> None:
    model = TinyLM(LMConfig(encoding="rope", **CFG)).eval()
    prompt = torch.randint(0, 256, (2, 5))
    assert model.generate(prompt, 0).shape == (2, 0)
    assert model.generate(prompt, 1).shape == (2, 1)
    with pytest.raises(ValueError, match="max_new must be a non-negative int, got -1"):
        model.generate(prompt, -1)


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"n_kv_heads": 3}, "LMConfig.n_kv_heads=3 must divide n_heads=4"),
        ({"encoding": "learned", "max_positions": 0}, "LMConfig.max_positions must be a positive int, got 0"),
        ({"vocab": 0}, "LMConfig.vocab must be a positive int, got 0"),
        ({"n_layers": 0}, "LMConfig.n_layers must be a positive int, got 0"),
        ({"d_model": 128.0}, "LMConfig.d_model must be a positive int, got 128.0"),
        (
            {"d_model": 100, "n_heads": 3},
            "LMConfig.d_model=100 must split into n_heads=3 heads of even width",
        ),
        ({"d_model": 12, "n_heads": 4}, "LMConfig.d_model=12 must split into n_heads=4 heads of even width"),
        ({"encoding": "foo"}, "LMConfig.encoding must be one of .*got 'foo'"),
    ],
)
def test_unbuildable_configs_are_refused_naming_the_field(fields: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        LMConfig(**fields)  # type: ignore[arg-type]
