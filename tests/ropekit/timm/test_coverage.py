"""Every rotary class timm ships is either patched or refused by name, and every rotary model timm registers
(``*rope*``, ``*dinov3*``, EVA-02, Gemma 4 vision) is patched after passing the probe or refused naming why.
A new rotary class or model in a future timm makes these tests fail until it is looked at."""

from __future__ import annotations

import inspect
import sys

import pytest
import timm
import timm.models  # imports every model module, so every class is visible
from torch import nn

import ropekit.timm as rt

pytestmark = pytest.mark.timm


def _timm_rotary_classes() -> set[str]:
    found = set()
    for mod_name, mod in list(sys.modules.items()):
        if not (mod_name == "timm" or mod_name.startswith("timm.")):
            continue
        for name, obj in vars(mod).items():
            if not (
                inspect.isclass(obj) and issubclass(obj, nn.Module) and obj.__module__.startswith("timm.")
            ):
                continue
            low = name.lower()
            if "rotary" in low or ("rope" in low and hasattr(obj, "get_embed")):
                found.add(f"{obj.__module__}.{obj.__name__}")
    return found


def test_every_timm_rotary_class_is_patched_or_refused() -> None:
    classes = _timm_rotary_classes()
    assert classes, "no rotary class found: the enumeration itself is broken"
    unknown = classes - set(rt.SUPPORTED_CLASSES) - set(rt.REFUSED)
    assert not unknown, f"timm has rotary classes ropekit neither patches nor refuses: {sorted(unknown)}"
    assert set(rt.SUPPORTED_CLASSES) | set(rt.REFUSED) <= classes  # none of ours has disappeared from timm


ROTARY_MODELS = sorted(
    set(timm.list_models("*rope*") + timm.list_models("*dinov3*") + timm.list_models("eva02*"))
    | set(timm.list_models("gemma4*"))
)


@pytest.mark.parametrize("name", ROTARY_MODELS)
def test_every_registered_rotary_model(name: str) -> None:
    model = timm.create_model(
        name, pretrained=False, embed_dim=64, num_heads=2, depth=1, img_size=32, num_classes=0
    )
    kinds = {f"{type(m).__module__}.{type(m).__name__}" for m in model.modules()}
    if kinds & set(rt.REFUSED):
        with pytest.raises(ValueError, match="refuses this model"):
            rt.patch(model)
        assert not any(type(m).__name__.startswith("Ropekit") for m in model.modules())
        return
    if not kinds & set(rt.SUPPORTED_CLASSES):
        with pytest.raises(ValueError, match="found no timm rotary module"):
            rt.patch(model)  # eva02_enormous_patch14_clip_224 is built without rope
        return
    with rt.patched(model):
        assert any(type(m).__name__.startswith("Ropekit") for m in model.modules())
