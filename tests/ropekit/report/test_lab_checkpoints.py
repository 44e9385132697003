"""Lab checkpoints in ``ropekit report``: any model size (the config is recorded), the rotary encodings whose
rotation is a RopeSpec, and a clear error naming the file for everything that cannot be loaded."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from ropekit.lab.experiments.common import _json as _lab_json
from ropekit.lab.model import LMConfig, TinyLM
from ropekit.lab.train import checkpoint_info, load_checkpoint, save_checkpoint
from ropekit.report.sources import resolve
from ropekit.scaling import NTK, DynamicNTK, Linear, Llama3, LongRope, Yarn
from ropekit.spec import RopeSpec

SMALL = LMConfig(d_model=64, n_heads=2, n_kv_heads=1, max_positions=32)


def _save(path: Path, cfg: LMConfig, *, old: bool = False, **meta: object) -> TinyLM:
    """A checkpoint of the default encoding: its meta records encoding_kw {} as model_plan does; ``old``: written
    before the lab recorded encoding_kw (its tag then says what was trained)."""
    torch.manual_seed(0)
    model = TinyLM(cfg)
    opt = torch.optim.AdamW(model.parameters())
    recorded = {} if old else {"encoding_kw": {}}
    save_checkpoint(
        path,
        model,
        opt,
        1,
        torch.Generator(),
        {"encoding": cfg.encoding, "train_len": 32, **recorded, **meta},
    )
    return model


def _json_tokens() -> torch.Tensor:
    return torch.tensor(list(Path(json.__file__).read_bytes()[:64])).view(2, 32)


def test_a_non_default_model_size_is_rebuilt_from_the_recorded_config(tmp_path: Path) -> None:
    """Layer 0's per-band |q| equals hypot(x_i, y_i) of wq(attn_norm(embed(tokens))) of the saved model itself."""
    ckpt = tmp_path / "small.safetensors"
    model = _save(ckpt, SMALL)
    assert checkpoint_info(ckpt).config == SMALL
    src = resolve(str(ckpt))
    assert src.specs[""] == RopeSpec(32) and src.weights is not None
    w = src.weights
    assert w.q_norms.shape == (4, 16)  # layers x bands (head_dim 32)
    with torch.no_grad():
        blk = model.blocks[0]
        q = blk.attn.wq(blk.attn_norm(model.embed(_json_tokens()))).view(2, 32, 2, 32).double()
    for band in (0, 9, 15):
        want = torch.hypot(q[..., band], q[..., band + 16]).mean().item()
        assert w.q_norms[0, band].item() == pytest.approx(want, rel=1e-5)
    assert w.previous.shape == (4, 2)  # 4 layers x 2 heads


def test_p_rope_checkpoint_has_the_p_rope_spec(tmp_path: Path) -> None:
    """The lab's p-rope is RoPE with p = 0.75: 12 of the 16 bands rotate, the 4 lowest frequencies are 0."""
    ckpt = tmp_path / "p-rope.safetensors"
    _save(ckpt, LMConfig(encoding="p-rope", max_positions=32))
    src = resolve(str(ckpt))
    spec = src.specs[""]
    assert spec == RopeSpec(32, p=0.75)
    theta = spec.frequencies().tolist()
    assert sum(t == 0.0 for t in theta) == 4 and theta[:12] == pytest.approx(
        [1e4 ** (-i / 16) for i in range(12)]
    )
    assert src.weights is not None and src.weights.q_norms.shape[0] == 4


def test_single_frequency_checkpoint_has_one_frequency(tmp_path: Path) -> None:
    ckpt = tmp_path / "sf.safetensors"
    _save(ckpt, LMConfig(encoding="single-frequency", max_positions=32))
    assert resolve(str(ckpt), weights=False).specs[""].frequencies().tolist() == pytest.approx([0.01] * 16)


@pytest.mark.parametrize(
    ("tag", "why"),
    [
        ("prope", "a tag starting with 'prope' must be 'prope<p>' with p the fraction of frequencies kept"),
        ("propex", "a tag starting with 'prope' must be 'prope<p>'"),
        ("prope1.5", "RopeSpec.p must be a number in \\(0, 1\\], got 1.5"),
    ],
)
def test_a_bad_p_rope_tag_is_refused_naming_the_key(tmp_path: Path, tag: str, why: str) -> None:
    """Trial finding 11: tag "prope" said only "could not convert string to float: ''"."""
    ckpt = tmp_path / "tag.safetensors"
    _save(ckpt, LMConfig(max_positions=32), old=True, tag=tag)
    with pytest.raises(ValueError, match=f"no usable RoPE \\(metadata 'tag' is '{tag}': {why}"):
        resolve(str(ckpt), weights=False)
    _save(
        ckpt, LMConfig(max_positions=32), old=True, tag="prope0.5"
    )  # the frequencies experiment's own (old) tags still read
    assert resolve(str(ckpt), weights=False).specs[""] == RopeSpec(32, p=0.5)


@pytest.mark.parametrize(("encoding", "why"), [("xpos", "per-band decay"), ("dense-rotation", "no bands")])
def test_rotary_encodings_without_a_rope_spec_are_refused(tmp_path: Path, encoding: str, why: str) -> None:
    ckpt = tmp_path / f"{encoding}.safetensors"
    _save(ckpt, LMConfig(encoding=encoding, max_positions=32))
    with pytest.raises(ValueError, match=f"{encoding}.safetensors'.*encoding '{encoding}'; .*{why}"):
        resolve(str(ckpt))


def _write_raw(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> Path:
    from safetensors.torch import save_file

    save_file(tensors, str(path), metadata=metadata)
    return path


def test_an_old_checkpoint_of_another_size_is_refused_naming_the_file(tmp_path: Path) -> None:
    """Written before the config was recorded: read as the default model; its tensors do not fit -> ValueError."""
    model = TinyLM(SMALL)
    tensors = {f"model.{k}": v.contiguous() for k, v in model.state_dict().items()}
    old = _write_raw(  # the old lab's meta: encoding, train_len and tag
        tmp_path / "old.safetensors",
        tensors,
        {"step": "1", "meta": '{"encoding": "rope", "train_len": 32, "tag": "rope"}'},
    )
    with pytest.raises(
        ValueError, match=r"'.*old.safetensors' does not fit.*wq.weight \[64, 64\].*records no model config"
    ):
        resolve(str(old))


def test_an_old_checkpoint_of_the_default_size_still_loads(tmp_path: Path) -> None:
    model = TinyLM(LMConfig(max_positions=32))
    tensors = {f"model.{k}": v.contiguous() for k, v in model.state_dict().items()}
    old = _write_raw(  # the old lab's meta: encoding, train_len and tag
        tmp_path / "old.safetensors",
        tensors,
        {"step": "1", "meta": '{"encoding": "rope", "train_len": 32, "tag": "rope"}'},
    )
    assert checkpoint_info(old).config is None
    src = resolve(str(old))
    assert src.weights is not None and src.weights.q_norms.shape[0] == 4


@pytest.mark.parametrize(
    ("tensors", "metadata", "error"),
    [
        (
            {"a": torch.zeros(1)},
            {"step": "1", "meta": '{"encoding":"rope","train_len":32,"encoding_kw":{}}'},
            "lacks 38 model tensor",
        ),
        ({"a": torch.zeros(1)}, {"step": "1", "meta": "{not json"}, "metadata 'meta' is not valid JSON"),
        ({"a": torch.zeros(1)}, {"step": "1", "meta": "[1]"}, "metadata 'meta' must be a JSON object"),
        ({"a": torch.zeros(1)}, {"x": "1"}, r"without the lab's checkpoint metadata \['step', 'meta'\]"),
        (
            {"a": torch.zeros(1)},
            {"step": "1", "meta": '{"encoding":"rope"}'},
            "'train_len' must be a positive int",
        ),
        (
            {"a": torch.zeros(1)},
            {"step": "1", "meta": '{"encoding":"rope","train_len":32}', "config": '{"d_model": "big"}'},
            r"not a buildable model \(LMConfig.d_model must be a positive int, got 'big'\)",
        ),
        (
            {"a": torch.zeros(1)},
            {
                "step": "1",
                "meta": '{"encoding":"rope","train_len":32}',
                "config": '{"d_model": 100, "n_heads": 3}',
            },
            "not a buildable model",
        ),
    ],
)
def test_unloadable_checkpoints_are_refused_naming_the_file(
    tmp_path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str], error: str
) -> None:
    path = _write_raw(tmp_path / "broken.safetensors", tensors, metadata)
    with pytest.raises(ValueError, match=rf"broken\.safetensors'.*{error}"):
        resolve(str(path))


def test_not_a_safetensors_file_is_refused_naming_it(tmp_path: Path) -> None:
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"junk\n")
    with pytest.raises(ValueError, match=r"junk\.safetensors': not a readable safetensors file"):
        resolve(str(junk))


def test_resuming_into_a_model_of_another_size_names_the_checkpoint(tmp_path: Path) -> None:
    ckpt = tmp_path / "run.safetensors"
    _save(ckpt, SMALL)
    with pytest.raises(ValueError, match=r"run\.safetensors' does not fit.*written by a model with LMConfig"):
        load_checkpoint(ckpt, TinyLM(LMConfig()), None, None)


# ---- the spec the lab records (trial finding: meta["encoding_kw"]["spec"] was ignored, plain RoPE reported)

LAB_SPECS = {
    "base 5e5": RopeSpec(32, base=500_000.0),
    "linear x4": RopeSpec(32, scaling=Linear(4.0)),
    "yarn x4 with mscale": RopeSpec(32, base=5e5, scaling=Yarn(4.0, 32, mscale=0.8)),
    "ntk alpha": RopeSpec(32, scaling=NTK(alpha=2.0)),
    "dynamic ntk": RopeSpec(32, scaling=DynamicNTK(2.0, 32)),
    "llama3": RopeSpec(32, scaling=Llama3(8.0, 1.0, 4.0, 32)),
    "longrope": RopeSpec(32, scaling=LongRope((1.0,) * 16, (1.5,) * 16, 32, factor=4.0)),
    "partial interleaved p-rope": RopeSpec(32, rotary_dim=16, layout="interleaved", p=0.5),
}


def _lab_plan_checkpoint(
    tmp_path: Path, encoding: str = "rope", **encoding_kw: object
) -> tuple[Path, TinyLM]:
    """A checkpoint written the lab's way: model_plan's meta (encoding_kw through common._json) and model."""
    from ropekit.lab.experiments.common import budget, model_plan

    plan = model_plan(
        encoding,
        {"task": "test"},
        train_len=32,
        b=budget(False, 1, True),
        seed=0,
        out=tmp_path,
        **encoding_kw,
    )
    torch.manual_seed(0)
    model = TinyLM(plan.cfg, **plan.encoding_kw)
    save_checkpoint(plan.ckpt, model, torch.optim.AdamW(model.parameters()), 1, torch.Generator(), plan.meta)
    return plan.ckpt, model


@pytest.mark.parametrize("name", list(LAB_SPECS))
def test_the_report_reads_the_spec_the_lab_recorded(tmp_path: Path, name: str) -> None:
    """The report's spec is the RopeSpec the model was built with (the lab's own model_plan + save_checkpoint)."""
    spec = LAB_SPECS[name]
    ckpt, _ = _lab_plan_checkpoint(tmp_path, spec=spec)
    src = resolve(str(ckpt), weights=False)
    assert src.specs[""] == spec
    assert torch.equal(src.specs[""].frequencies(64), spec.frequencies(64))


def test_the_weight_analysis_runs_the_model_with_its_recorded_spec(tmp_path: Path) -> None:
    """The report's weight analysis equals the analysis of the very model object that wrote the checkpoint
    (base 5e5), not of the same weights rotated at base 1e4."""
    from ropekit.report.models import analyse_lab_model

    ckpt, model = _lab_plan_checkpoint(tmp_path, spec=RopeSpec(32, base=500_000.0))
    w = resolve(str(ckpt)).weights
    assert w is not None
    model.eval()
    want = analyse_lab_model(model, _json_tokens(), "x")
    assert torch.equal(w.previous, want.previous) and torch.equal(w.diagonal, want.diagonal)
    assert torch.equal(w.q_norms, want.q_norms)


@pytest.mark.parametrize(
    ("encoding", "kw", "want"),
    [
        ("rope", {}, RopeSpec(32)),
        ("p-rope", {"p": 0.5}, RopeSpec(32, p=0.5)),
        ("single-frequency", {"theta": 0.05}, RopeSpec(32, freqs=(0.05,) * 16)),
    ],
)
def test_the_recorded_parameters_of_every_rope_encoding_are_read(
    tmp_path: Path, encoding: str, kw: dict[str, object], want: RopeSpec
) -> None:
    ckpt, _ = _lab_plan_checkpoint(tmp_path, encoding, **kw)
    assert resolve(str(ckpt), weights=False).specs[""] == want


@pytest.mark.parametrize("tag", ["rope-base5e5", None])
def test_a_rope_checkpoint_whose_spec_is_not_recorded_is_refused(tmp_path: Path, tag: str | None) -> None:
    """No encoding_kw, no spec, and a tag the lab never wrote: the RoPE is unknown, no default is assumed."""
    ckpt = tmp_path / "ck.safetensors"
    torch.manual_seed(0)
    model = TinyLM(LMConfig(max_positions=32), spec=RopeSpec(32, base=500_000.0))
    meta = {"encoding": "rope", "train_len": 32} | ({"tag": tag} if tag else {})
    save_checkpoint(ckpt, model, torch.optim.AdamW(model.parameters()), 1, torch.Generator(), meta)
    with pytest.raises(
        ValueError,
        match=rf"SOURCE '{re.escape(str(ckpt))}': lab checkpoint metadata gives no usable RoPE \(it records no "
        rf"'encoding_kw' .* and no 'spec' .*'tag' {re.escape(repr(tag))} is none of the lab's own tags",
    ):
        resolve(str(ckpt), weights=False)


@pytest.mark.parametrize("tag", ["rope", "passkey-copies-rope"])
def test_the_old_labs_plain_rope_tags_still_read(tmp_path: Path, tag: str) -> None:
    """Before encoding_kw was recorded, the lab trained plain RoPE under these tags (p-RoPE under prope<p>)."""
    ckpt = tmp_path / "old.safetensors"
    _save(ckpt, LMConfig(max_positions=32), old=True, tag=tag)
    assert resolve(str(ckpt), weights=False).specs[""] == RopeSpec(32)


def _with_meta(tmp_path: Path, **meta: object) -> Path:
    ckpt = tmp_path / "m.safetensors"
    _save(ckpt, LMConfig(max_positions=32), old=True, **meta)
    return ckpt


_SPEC = _lab_json({"spec": RopeSpec(32, scaling=Linear(2.0))})["spec"]


@pytest.mark.parametrize(
    ("meta", "error"),
    [
        ({"encoding_kw": ["spec"]}, r"metadata 'encoding_kw' must be a JSON object"),
        ({"encoding_kw": {"spec": repr(RopeSpec(32))}}, r"'encoding_kw.spec' must be a JSON object"),
        (
            {"encoding_kw": {"spec": {k: v for k, v in _SPEC.items() if k != "base"}}},
            r"'encoding_kw.spec' must have exactly a RopeSpec's fields .*lacks \['base'\]",
        ),
        (
            {"encoding_kw": {"spec": {**_SPEC, "theta": 1.0}}},
            r"'encoding_kw.spec' must have exactly .*has unknown \['theta'\]",
        ),
        (
            {"encoding_kw": {"spec": {**_SPEC, "scaling": {"factor": 2.0, "typo": 1}}}},
            r"'encoding_kw.spec.scaling' has the fields \['factor', 'typo'\], those of no ropekit scaling scheme",
        ),
        (
            {"encoding_kw": {"spec": {**_SPEC, "scaling": {"factor": 0.5}}}},
            r"'encoding_kw.spec.scaling' is not a valid Linear \(Linear.factor",
        ),
        ({"encoding_kw": {"spec": {**_SPEC, "base": -1}}}, r"'encoding_kw.spec' is not a valid RopeSpec"),
        (
            {"encoding_kw": {"spec": _SPEC, "extra": 1}},
            r"cannot be built with the recorded keyword arguments",
        ),
        ({"encoding_kw": {"spec": {**_SPEC, "head_dim": 16, "rotary_dim": 16}}}, r"must equal the model's"),
        ({"spec": "rope"}, r"metadata 'spec' must be a JSON object"),
        (
            {"encoding_kw": {}, "spec": {"head_dim": 32, "rope_theta": 5e5}},
            r"metadata 'spec' gives .*base=500000.0.* but 'encoding_kw' .* gives .*base=10000.0",
        ),
    ],
    ids=[
        "encoding_kw not an object",
        "spec as repr",
        "spec lacks a field",
        "spec has an unknown field",
        "scaling of no scheme",
        "invalid scaling",
        "invalid spec",
        "unknown keyword",
        "other head_dim",
        "hf spec not an object",
        "hf spec disagrees",
    ],
)
def test_a_malformed_recorded_spec_is_refused_naming_the_key(
    tmp_path: Path, meta: dict[str, object], error: str
) -> None:
    ckpt = _with_meta(tmp_path, **meta)
    with pytest.raises(
        ValueError, match=rf"m\.safetensors': lab checkpoint metadata gives no usable RoPE.*{error}"
    ):
        resolve(str(ckpt), weights=False)


def test_a_spec_given_as_transformers_rope_parameters_is_read(tmp_path: Path) -> None:
    ckpt = _with_meta(tmp_path, spec={"head_dim": 32, "rope_theta": 5e5})
    assert resolve(str(ckpt), weights=False).specs[""] == RopeSpec(32, base=5e5)
