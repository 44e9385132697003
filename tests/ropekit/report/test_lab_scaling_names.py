"""A lab checkpoint's scaling scheme in ``ropekit report``: read by the class name the lab records (two schemes with
the same fields stay apart), and -- in a checkpoint written before the name was recorded -- by its fields' names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from ropekit.lab.experiments.common import budget, model_plan
from ropekit.lab.model import TinyLM
from ropekit.lab.train import save_checkpoint
from ropekit.report import lab_source
from ropekit.report.sources import resolve
from ropekit.scaling import Linear
from ropekit.spec import RopeSpec
from tests.ropekit.lab.test_scaling_json import SCHEMES, Stretch, old_json


def _checkpoint(tmp_path: Path, spec: RopeSpec, *, old: bool = False, scaling: object = None) -> Path:
    """A checkpoint of the lab's model for ``spec``, its meta from ``model_plan`` (``old``: encoding_kw written the
    way of before the class name was recorded; ``scaling``: this recorded scaling instead)."""
    plan = model_plan(
        "rope", {"task": "t"}, train_len=32, b=budget(False, 1, True), seed=0, out=tmp_path, spec=spec
    )
    kw = old_json({"spec": spec}) if old else plan.meta["encoding_kw"]
    if scaling is not None:
        kw = {"spec": {**kw["spec"], "scaling": scaling}}
    torch.manual_seed(0)
    model = TinyLM(plan.cfg, spec=spec)
    meta = {**plan.meta, "encoding_kw": kw}
    save_checkpoint(plan.ckpt, model, torch.optim.AdamW(model.parameters()), 1, torch.Generator(), meta)
    return plan.ckpt


@pytest.mark.parametrize("old", [False, True], ids=["with the class name", "written the old way"])
@pytest.mark.parametrize("scheme", SCHEMES, ids=lambda s: type(s).__name__)
def test_the_report_reads_the_recorded_scheme(tmp_path: Path, scheme: object, old: bool) -> None:
    spec = RopeSpec(32, scaling=scheme)  # type: ignore[arg-type]
    got = resolve(str(_checkpoint(tmp_path, spec, old=old)), weights=False).specs[""]
    assert got == spec and type(got.scaling) is type(scheme)
    assert torch.equal(got.frequencies(64), spec.frequencies(64))


def test_two_schemes_with_the_same_fields_are_told_apart_by_the_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding: the scheme was identified by its set of field names; a scheme with Linear's fields (Stretch) was
    then Linear or unknown. With the recorded name each reads as itself; without it (an old checkpoint) the
    ambiguity is refused, never guessed."""
    monkeypatch.setattr(lab_source, "_SCALINGS", (*lab_source._SCALINGS, Stretch))
    stretch = RopeSpec(32, scaling=Stretch(2.0))
    got = resolve(str(_checkpoint(tmp_path / "new", stretch)), weights=False).specs[""]
    assert got == stretch and type(got.scaling) is Stretch
    linear = RopeSpec(32, scaling=Linear(2.0))
    got = resolve(str(_checkpoint(tmp_path / "lin", linear)), weights=False).specs[""]
    assert got == linear and type(got.scaling) is Linear
    ckpt = _checkpoint(tmp_path / "old", stretch, old=True)
    with pytest.raises(
        ValueError, match=r"those of more than one \(Linear, Stretch\) ropekit scaling scheme"
    ):
        resolve(str(ckpt), weights=False)


@pytest.mark.parametrize(
    ("scaling", "error"),
    [
        (
            {"class": "Bogus", "factor": 2.0},
            (
                "'encoding_kw.spec.scaling.class' is 'Bogus'; expected the name of a ropekit scaling scheme, one of "
                "['DynamicNTK', 'Linear', 'Llama3', 'LongRope', 'NTK', 'Yarn']"
            ),
        ),
        (
            {"class": 3, "factor": 2.0},
            "'encoding_kw.spec.scaling.class' is 3; expected the name of a ropekit scaling scheme",
        ),
        (
            {"class": "Yarn", "factor": 2.0},
            (
                "'encoding_kw.spec.scaling' names the scheme Yarn but has the fields ['factor']; Yarn's fields are "
                "['attention_factor_', 'beta_fast', 'beta_slow', 'factor', 'mscale', 'mscale_all_dim', "
                "'original_max_position_embeddings', 'truncate']"
            ),
        ),
        (
            {"class": "Linear", "factor": 0.5},
            "'encoding_kw.spec.scaling' is not a valid Linear (Linear.factor",
        ),
    ],
    ids=["unknown name", "name not a string", "fields of another scheme", "invalid values"],
)
def test_a_bad_recorded_class_name_is_refused_naming_the_key(
    tmp_path: Path, scaling: dict[str, object], error: str
) -> None:
    ckpt = _checkpoint(tmp_path, RopeSpec(32, scaling=Linear(2.0)), scaling=scaling)
    with pytest.raises(
        ValueError, match=r"lab checkpoint metadata gives no usable RoPE .*" + re.escape(error)
    ):
        resolve(str(ckpt), weights=False)
