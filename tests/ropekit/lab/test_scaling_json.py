"""The lab records a scaling scheme in a checkpoint's JSON ``meta`` with its class name (``common._json``), beside
the same fields as before; checkpoints written before (the fields alone) still resume."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from ropekit.lab.checkpoint import SCALING_CLASS_KEY, check_resume, save_checkpoint
from ropekit.lab.experiments.common import ModelPlan, _json, budget, model_plan
from ropekit.lab.model import TinyLM
from ropekit.scaling import NTK, DynamicNTK, Linear, Llama3, LongRope, Scaling, Yarn
from ropekit.spec import RopeSpec

SCHEMES: list[Scaling] = [
    Linear(4.0),
    NTK(alpha=2.0),
    DynamicNTK(2.0, 32),
    Yarn(4.0, 32, mscale=0.8),
    Llama3(8.0, 1.0, 4.0, 32),
    LongRope((1.0,) * 16, (1.5,) * 16, 32, factor=4.0),
]


@dataclasses.dataclass(frozen=True)
class Stretch(Linear):
    """A scheme with exactly Linear's fields: told apart from Linear only by its class name."""


def old_json(value: Any) -> Any:
    """What the lab wrote before it recorded the class name: ``dataclasses.asdict``, the fields alone."""

    def default(v: Any) -> Any:
        return dataclasses.asdict(v) if dataclasses.is_dataclass(v) and not isinstance(v, type) else repr(v)

    return json.loads(json.dumps(value, default=default))


@pytest.mark.parametrize("scheme", SCHEMES, ids=lambda s: type(s).__name__)
def test_the_recorded_scaling_names_its_class_beside_its_fields(scheme: Scaling) -> None:
    spec = RopeSpec(32, scaling=scheme)
    got = _json({"spec": spec, "p": 0.5})
    want = old_json({"spec": spec, "p": 0.5})
    assert got["spec"]["scaling"] == {SCALING_CLASS_KEY: type(scheme).__name__, **want["spec"]["scaling"]}
    assert {k: v for k, v in got["spec"].items() if k != "scaling"} == {
        k: v for k, v in want["spec"].items() if k != "scaling"
    }
    assert got["p"] == 0.5 and SCALING_CLASS_KEY not in got["spec"]  # only a scheme names its class
    assert _json({"spec": RopeSpec(32)}) == old_json({"spec": RopeSpec(32)})  # no scheme: as before


def _plan(tmp_path: Path, spec: RopeSpec) -> ModelPlan:
    return model_plan(
        "rope", {"task": "t"}, train_len=32, b=budget(False, 1, True), seed=0, out=tmp_path, spec=spec
    )


def _checkpoint(tmp_path: Path, spec: RopeSpec, *, old: bool) -> Path:
    """A checkpoint of ``model_plan``'s model for ``spec``, its meta written the lab's way (``old``: the way of
    before the class name was recorded)."""
    plan = _plan(tmp_path, spec)
    meta = {**plan.meta, "encoding_kw": old_json({"spec": spec})} if old else plan.meta
    torch.manual_seed(0)
    model = TinyLM(plan.cfg, spec=spec)
    save_checkpoint(plan.ckpt, model, torch.optim.AdamW(model.parameters()), 1, torch.Generator(), meta)
    return plan.ckpt


@pytest.mark.parametrize("scheme", SCHEMES, ids=lambda s: type(s).__name__)
def test_a_checkpoint_written_before_the_class_name_was_recorded_still_resumes(
    tmp_path: Path, scheme: Scaling
) -> None:
    """Finding: the class name is new in ``meta``; the same run's older checkpoint (fields alone) is its own."""
    spec = RopeSpec(32, scaling=scheme)
    ckpt = _checkpoint(tmp_path, spec, old=True)
    plan = _plan(tmp_path, spec)
    assert plan.ckpt == ckpt
    check_resume(ckpt, plan.cfg, plan.meta)  # no error: the same run


def test_resume_still_compares_the_fields_and_the_recorded_class(tmp_path: Path) -> None:
    """An old checkpoint of another factor is refused (its fields are still compared), and a new one of another
    class with the same fields (Linear, Stretch) is refused by the name."""
    old = _checkpoint(tmp_path / "a", RopeSpec(32, scaling=Linear(2.0)), old=True)
    plan = _plan(tmp_path / "a", RopeSpec(32, scaling=Linear(4.0)))
    with pytest.raises(ValueError, match=r"encoding_kw\.spec\.scaling\.factor 2\.0 \(this run: 4\.0\)"):
        check_resume(old, plan.cfg, plan.meta)
    new = _checkpoint(tmp_path / "b", RopeSpec(32, scaling=Linear(2.0)), old=False)
    plan = _plan(tmp_path / "b", RopeSpec(32, scaling=Stretch(2.0)))
    with pytest.raises(
        ValueError, match=r"encoding_kw\.spec\.scaling\.class 'Linear' \(this run: 'Stretch'\)"
    ):
        check_resume(new, plan.cfg, plan.meta)
