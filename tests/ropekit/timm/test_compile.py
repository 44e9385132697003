"""Patched models under ``torch.compile(fullgraph=True)``: the output equals the eager patched model's, ropekit
draws no warning from dynamo, and the rotation runs where docs/vision.md says -- ropekit's for axial and DINOv3
models, timm's own arithmetic on ropekit's tables for RoPE-Mixed (dynamo does not carry ropekit's tag from the
embedding to the depth slices the model passes). :data:`ropekit.timm.apply.CALLS` counts ropekit's rotations when
they are traced."""

from __future__ import annotations

import warnings

import pytest
import torch

import ropekit.timm as rt
from ropekit.timm.apply import CALLS
from tests.ropekit.timm.zoo import SMALL, build, images, rel_err

pytestmark = pytest.mark.timm

#: model -> whether ropekit's rotation runs in the compiled graph (docs/vision.md, "Where timm's own arithmetic stays")
ROTATES_UNDER_COMPILE = {
    "vit_small_patch16_rope_224": True,
    "vit_small_patch16_dinov3": True,
    "vit_small_patch16_rope_mixed_224": False,
}


@pytest.mark.parametrize("name", list(ROTATES_UNDER_COMPILE))
def test_compiled_patched_model(name: str) -> None:
    model = rt.patch(build(name, SMALL, 64))
    x = images(64)
    torch._dynamo.reset()
    with torch.no_grad():
        ref = model(x)
        before = sum(CALLS.values())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = torch.compile(model, backend="eager", fullgraph=True)(x)
        traced = sum(CALLS.values()) - before
    rt.unpatch(model)
    torch._dynamo.reset()
    messages = [f"{w.filename}:{w.lineno}: {w.message}" for w in caught]
    assert not [m for m in messages if "ropekit" in m or "lru_cache" in m], messages
    assert traced == (2 * SMALL["depth"] if ROTATES_UNDER_COMPILE[name] else 0)
    assert rel_err(got, ref) <= 1e-5
