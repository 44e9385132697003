"""Copies of a patched model: ``torch.save`` / ``pickle`` (loaded in a fresh process too) and ``copy.deepcopy`` give a
model that is patched on its own -- it rotates through ropekit, whatever becomes of the model it was copied from,
and unpatches by itself. Oracle: the patched original's output; ropekit's rotation counter
(:data:`ropekit.timm.apply.CALLS`) shows which path rotated."""

from __future__ import annotations

import copy
import io
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import ropekit.timm as rt
from ropekit.timm.apply import CALLS
from tests.ropekit.timm.zoo import SMALL, build, images

pytestmark = pytest.mark.timm

ROOT = Path(__file__).resolve().parents[3]
MODELS = ["vit_small_patch16_rope_224", "vit_small_patch16_rope_mixed_224", "vit_small_patch16_dinov3"]


def _rotations(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The output and how many rotations ropekit did for it."""
    before = sum(CALLS.values())
    with torch.no_grad():
        out = model(x)
    return out, sum(CALLS.values()) - before


def _ropekit_classes(model: nn.Module) -> list[str]:
    return [type(m).__name__ for m in model.modules() if type(m).__name__.startswith("Ropekit")]


@pytest.mark.parametrize("name", MODELS)
def test_pickled_patched_model_is_patched_on_its_own(name: str) -> None:
    model = rt.patch(build(name, SMALL, 64))
    x = images(64)
    ref, _ = _rotations(model, x)
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    again = pickle.loads(pickle.dumps(model))
    rt.unpatch(model)  # the copies do not depend on the original staying patched
    for copied in (loaded, again):
        assert _ropekit_classes(copied) == ["Ropekit" + type(model.rope).__name__]
        out, rotations = _rotations(copied, x)
        assert rotations == 2 * SMALL["depth"] and torch.equal(out, ref)
        rt.unpatch(copied)
        assert not _ropekit_classes(copied)


def test_saved_patched_model_loads_in_a_fresh_process(tmp_path: Path) -> None:
    model = rt.patch(build("vit_small_patch16_rope_224", SMALL, 64))
    x = images(64)
    ref, _ = _rotations(model, x)
    path = tmp_path / "model.pt"
    torch.save({"model": model, "x": x, "ref": ref}, path)
    rt.unpatch(model)
    code = "\n".join(
        [
            "import sys, torch",
            "import tests.ropekit.timm.conftest  # torchvision's operator schemas, before timm is imported",
            "from ropekit.timm.apply import CALLS",
            f"saved = torch.load({str(path)!r}, weights_only=False)",
            "with torch.no_grad():",
            "    out = saved['model'](saved['x'])",
            "print(sum(CALLS.values()), torch.equal(out, saved['ref']), type(saved['model'].rope).__name__)",
        ]
    )
    run = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [str(2 * SMALL["depth"]), "True", "RopekitRotaryEmbeddingCat"]


def test_deepcopy_is_patched_on_its_own() -> None:
    model = rt.patch(build("vit_small_patch16_rope_224", SMALL, 64))
    x = images(64)
    ref, _ = _rotations(model, x)
    dup = copy.deepcopy(model)
    rt.unpatch(model)
    out, rotations = _rotations(dup, x)
    assert rotations == 2 * SMALL["depth"] and torch.equal(out, ref)
    assert rt.patch(dup) is dup and _rotations(dup, x)[1] == 2 * SMALL["depth"]  # idempotent
    rt.unpatch(dup)
    assert not _ropekit_classes(dup) and _rotations(dup, x)[1] == 0


def test_unpatching_a_deepcopy_leaves_the_original_patched() -> None:
    model = rt.patch(build("vit_small_patch16_rope_224", SMALL, 64))
    x = images(64)
    rt.unpatch(copy.deepcopy(model))
    assert _rotations(model, x)[1] == 2 * SMALL["depth"]
    rt.unpatch(model)
