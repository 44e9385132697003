"""Patched timm models give the unpatched outputs (float32, random weights): at the training resolution and at a
second resolution with ``dynamic_img_size=True``. Oracle: timm's own unpatched forward."""

from __future__ import annotations

import pytest
import torch

import ropekit.timm as rt
from ropekit.timm.apply import CALLS
from tests.ropekit.timm.zoo import MODELS, build, images, no_rotation, rel_err

pytestmark = pytest.mark.timm

TOL = 1e-4


@pytest.mark.parametrize("key", list(MODELS))
@pytest.mark.parametrize("dynamic", [False, True], ids=["train-res", "dynamic"])
def test_outputs_equal_unpatched(key: str, dynamic: bool) -> None:
    name, kwargs, img, img2 = MODELS[key]
    model = build(name, kwargs, img, dynamic=dynamic)
    x = images(img2 if dynamic else img)
    with torch.no_grad():
        ref = model(x)
        with no_rotation():
            unrotated = model(x)
    # the positions matter: without the rotation the output moves far more than the tolerance
    assert rel_err(unrotated, ref) > 100 * TOL
    with rt.patched(model), torch.no_grad():
        assert type(model.rope).__name__.startswith("Ropekit")
        before = sum(CALLS.values())
        got = model(x)
        rotations = sum(CALLS.values()) - before
    assert rel_err(got, ref) <= TOL, key
    assert rotations == 2 * kwargs["depth"]  # q and k of every block rotated by ropekit
