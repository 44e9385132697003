"""patch / unpatch / patched: verification before modification, idempotence, bit-exact unpatch, refusals that
name the module and leave the model untouched."""

from __future__ import annotations

import copy
import sys

import pytest
import torch
from timm.layers.pos_embed_sincos import RotaryEmbeddingCat
from timm.models.gemma4_vit import Gemma4RotaryEmbedding2D
from torch import nn

import ropekit.timm as rt
from tests.ropekit.timm.zoo import SMALL, build, images

pytestmark = pytest.mark.timm


def _fns() -> dict[str, object]:
    return {
        n: m.apply_rot_embed_cat
        for n, m in sys.modules.items()
        if n.startswith("timm.") and hasattr(m, "apply_rot_embed_cat")
    }


def _snapshot(model: nn.Module) -> tuple[list[type], list[list[str]], dict[str, torch.Tensor]]:
    mods = list(model.modules())
    return (
        [type(m) for m in mods],
        [sorted(m.__dict__) for m in mods],
        {k: v.clone() for k, v in model.state_dict().items()},
    )


@pytest.fixture
def mixed() -> nn.Module:
    return build("vit_small_patch16_rope_mixed_224", SMALL, 64)


def test_unpatch_is_bit_exact(mixed: nn.Module) -> None:
    fns = _fns()
    pristine = copy.deepcopy(mixed)
    x = images(64)
    rt.patch(mixed)
    assert _fns() != fns  # the wrapper is installed
    with torch.no_grad():
        mixed(x)
    rt.unpatch(mixed)
    assert _fns() == fns
    types, attrs, state = _snapshot(mixed)
    types0, attrs0, state0 = _snapshot(pristine)
    assert types == types0 and attrs == attrs0
    assert state.keys() == state0.keys() and all(torch.equal(state[k], state0[k]) for k in state)
    with torch.no_grad():
        assert torch.equal(mixed(x), pristine(x))


def test_patch_is_idempotent(mixed: nn.Module) -> None:
    fns = _fns()
    assert rt.patch(mixed) is mixed
    wrapped = _fns()
    assert rt.patch(mixed) is mixed
    assert _fns() == wrapped  # not wrapped twice
    assert all(getattr(f, "__ropekit_original__", None) is fns[n] for n, f in wrapped.items())
    rt.unpatch(mixed)
    assert _fns() == fns and not any(type(m).__name__.startswith("Ropekit") for m in mixed.modules())
    assert rt.unpatch(mixed) is mixed  # unpatching an unpatched model is a no-op


def test_wrapper_stays_while_another_patched_model_lives(mixed: nn.Module) -> None:
    fns = _fns()
    other = build("vit_small_patch16_rope_224", SMALL, 64)
    rt.patch(mixed)
    rt.patch(other)
    rt.unpatch(mixed)
    assert _fns() != fns  # `other` still uses it
    rt.unpatch(other)
    assert _fns() == fns


def test_patched_context_restores_on_error(mixed: nn.Module) -> None:
    fns = _fns()
    with pytest.raises(RuntimeError, match="boom"), rt.patched(mixed):
        assert type(mixed.rope).__name__ == "RopekitRotaryEmbeddingMixed"
        raise RuntimeError("boom")
    assert type(mixed.rope).__name__ == "RotaryEmbeddingMixed" and _fns() == fns
    rt.patch(mixed)
    with rt.patched(mixed):
        pass
    assert type(mixed.rope).__name__ == "RopekitRotaryEmbeddingMixed"  # patched before: stays patched
    rt.unpatch(mixed)


class MyRope(RotaryEmbeddingCat):
    """A subclass ropekit has never seen: its get_embed might do anything."""


@pytest.mark.parametrize(
    ("rope", "match"),
    [
        (Gemma4RotaryEmbedding2D(32), "apply_multidimensional_rope"),
        (MyRope(32, in_pixels=False), "does not recognise"),
        (RotaryEmbeddingCat(30, in_pixels=False), "dim=30 is not a multiple of 4"),
        # bfloat16 bands: timm's tables are far from the exact ones, the probe notices
        (
            RotaryEmbeddingCat(32, in_pixels=False, temperature=100.0).to(torch.bfloat16),
            "differ from timm's.*holds torch.bfloat16 tensors",
        ),
    ],
    ids=["gemma4", "unknown-subclass", "dim-not-multiple-of-4", "bf16-bands"],
)
def test_refusals_name_the_module_and_modify_nothing(rope: nn.Module, match: str) -> None:
    good = RotaryEmbeddingCat(32, in_pixels=False)
    holder = nn.Sequential(good, rope)
    fns = _fns()
    with pytest.raises(ValueError, match=match) as e:
        rt.patch(holder)
    assert f"1 ({type(rope).__name__})" in str(e.value) and "nothing was modified" in str(e.value)
    assert type(good) is RotaryEmbeddingCat and _fns() == fns and "_ropekit_timm_patch" not in holder.__dict__


@pytest.mark.parametrize("bad", ["model.pt", None])
def test_non_modules_are_refused(bad: object) -> None:
    """unpatch and patched raised AttributeError ('str' object has no attribute '__dict__')."""
    match = f"model must be a torch.nn.Module, got {type(bad).__name__}"
    with pytest.raises(TypeError, match=match):
        rt.patch(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=match):
        rt.unpatch(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=match), rt.patched(bad):  # type: ignore[arg-type]
        pass


def test_container_of_a_patched_model(mixed: nn.Module) -> None:
    """patch() of a module whose rotary modules are all patched already (through the model inside it) has nothing
    left to do, as patch() of the model itself; unpatching stays with the model that was patched."""
    fns = _fns()
    rt.patch(mixed)
    holder = nn.Sequential(mixed)
    assert rt.patch(holder) is holder and "_ropekit_timm_patch" not in holder.__dict__
    with rt.patched(holder):
        pass
    assert type(mixed.rope).__name__ == "RopekitRotaryEmbeddingMixed"
    rt.unpatch(mixed)
    assert _fns() == fns and type(mixed.rope).__name__ == "RotaryEmbeddingMixed"


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="found no timm rotary module in Linear"):
        rt.patch(nn.Linear(2, 2))


def test_import_ropekit_does_not_import_timm() -> None:
    import subprocess

    code = "import sys, ropekit, ropekit.timm; print(any(m == 'timm' or m.startswith('timm.') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
