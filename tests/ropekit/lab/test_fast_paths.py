"""The lab trainer's fast paths compute what the plain path computes: fused RMSNorm against the formula in float64,
torch.compile against eager (logits and gradients), thread settings restored, bad settings refused."""

from __future__ import annotations

import os
import re

import pytest
import torch
import torch.nn.functional as F

from ropekit.lab.data import train_batch
from ropekit.lab.model import LMConfig, RMSNorm, TinyLM
from ropekit.lab.throughput import choose_threads, parse_variant, threads_set
from ropekit.lab.train import train


def test_rmsnorm_equals_the_formula_in_float64() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 16, generator=g) * 3
    norm = RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(16, generator=g) + 0.5)
    x64, w64 = x.double(), norm.weight.detach().double()
    want = x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * w64
    assert torch.allclose(norm(x).double(), want, rtol=1e-6, atol=1e-6)
    xg = x.clone().requires_grad_(True)
    norm(xg).sum().backward()  # type: ignore[no-untyped-call]
    x64g = x64.clone().requires_grad_(True)
    (x64g / torch.sqrt(x64g.pow(2).mean(-1, keepdim=True) + 1e-6) * w64).sum().backward()  # type: ignore[no-untyped-call]
    assert xg.grad is not None and x64g.grad is not None
    assert torch.allclose(xg.grad.double(), x64g.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_compiled_model_equals_eager() -> None:
    torch.manual_seed(0)
    model = TinyLM(LMConfig(n_layers=2, max_positions=32))
    x = torch.randint(0, 256, (2, 32))
    compiled = torch.compile(model)
    outs = []
    for fwd in (model, compiled):
        model.zero_grad(set_to_none=True)
        logits, _ = fwd(x)
        F.cross_entropy(logits.flatten(0, 1), x.flatten()).backward()  # type: ignore[no-untyped-call]
        outs.append((logits.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (le, ge), (lc, gc) = outs
    assert torch.allclose(lc, le, rtol=1e-4, atol=1e-5)
    assert len(ge) == len(gc) and all(torch.allclose(a, b, rtol=1e-3, atol=1e-6) for a, b in zip(gc, ge))


def test_threads_setting_is_applied_and_restored() -> None:
    before = torch.get_num_threads()
    seen = []
    data = torch.randint(0, 256, (4096,), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))

    def batcher(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append(torch.get_num_threads())
        return train_batch(data, 2, 8, gen)

    model = TinyLM(LMConfig(n_layers=1, max_positions=8))
    train(model, batcher, steps=2, seed=0, threads=1, desc="t")
    assert seen == [1, 1] and torch.get_num_threads() == before
    with threads_set(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    assert 1 <= choose_threads(budget_s=0.02) <= (os.cpu_count() or 1)
    for bad in (0, -1, "all", 1.5, True):
        with pytest.raises(ValueError, match="threads must be"):
            train(model, batcher, steps=1, seed=0, threads=bad)  # type: ignore[arg-type]


def test_variants_parse_and_refuse() -> None:
    assert parse_variant("bf16+compile@1") == ("bf16", True, 1)
    assert parse_variant("fp32") == ("fp32", False, None)
    for bad in ("fp16", "bf16+jit", "fp32@0", "fp32@x"):
        with pytest.raises(ValueError, match=re.escape(f"got {bad!r}")):
            parse_variant(bad)
