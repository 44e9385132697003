"""RoPE-Mixed's learned frequencies get the same gradients patched and unpatched (oracle: timm's autograd)."""

from __future__ import annotations

import pytest
import torch

import ropekit.timm as rt
from ropekit.timm.apply import CALLS
from tests.ropekit.timm.zoo import SMALL, build, images, rel_err

pytestmark = pytest.mark.timm


def _freq_grad(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    out = model(x)
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(5))
    (out * w).sum().backward()
    g = model.rope.freqs.grad
    assert g is not None
    return g.clone()


@pytest.mark.parametrize(
    ("name", "img", "dynamic"),
    [
        ("vit_small_patch16_rope_mixed_224", 64, False),
        ("vit_small_patch16_rope_mixed_224", 96, True),
        ("naflexvit_base_patch16_gap", 64, False),
    ],
)
def test_mixed_frequency_gradients_equal_unpatched(name: str, img: int, dynamic: bool) -> None:
    kw = dict(SMALL, rope_type="mixed") if name.startswith("naflex") else SMALL
    model = build(name, kw, 64, dynamic=dynamic)
    x = images(img)
    ref = _freq_grad(model, x)
    assert float(ref.abs().max()) > 0
    with rt.patched(model):
        before = CALLS["per_head_grad"]
        got = _freq_grad(model, x)
        assert CALLS["per_head_grad"] - before == 2 * SMALL["depth"]  # ropekit's differentiable rotation ran
    assert rel_err(got, ref) <= 1e-4


@pytest.mark.parametrize("name", ["vit_small_patch16_rope_224", "vit_small_patch16_dinov3"])
def test_weight_gradients_equal_unpatched(name: str) -> None:
    """Training an axial / DINOv3 model: every parameter's gradient through ropekit's rotation equals timm's."""
    model = build(name, SMALL, 64)
    x = images(64)

    def grads() -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        out = model(x)
        (out * torch.randn(out.shape, generator=torch.Generator().manual_seed(5))).sum().backward()
        return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}

    ref = grads()
    with rt.patched(model):
        got = grads()
    assert ref.keys() == got.keys() and len(ref) > 10
    for k in ref:
        assert rel_err(got[k], ref[k]) <= 1e-4, k
