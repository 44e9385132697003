"""Lab checkpoints in ``ropekit report``: any model size (the config is recorded), the rotary encodings whose
rotation is a RopeSpec, and a clear error naming the file for everything that cannot be loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ropekit.lab.model import LMConfig, TinyLM
from ropekit.lab.train import checkpoint_info, load_checkpoint, save_checkpoint
from ropekit.report.sources import resolve
from ropekit.spec import RopeSpec

SMALL = LMConfig(d_model=64, n_heads=2, n_kv_heads=1, max_positions=32)


def _save(path: Path, cfg: LMConfig, **meta: object) -> TinyLM:
    torch.manual_seed(0)
    model = TinyLM(cfg)
    opt = torch.optim.AdamW(model.parameters())
    save_checkpoint(
        path, model, opt, 1, torch.Generator(), {"encoding": cfg.encoding, "train_len": 32, **meta}
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
    _save(ckpt, LMConfig(max_positions=32), tag=tag)
    with pytest.raises(ValueError, match=f"no usable RoPE \\(metadata 'tag' is '{tag}': {why}"):
        resolve(str(ckpt), weights=False)
    _save(
        ckpt, LMConfig(max_positions=32), tag="prope0.5"
    )  # the frequencies experiment's own tags still read
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
    old = _write_raw(
        tmp_path / "old.safetensors", tensors, {"step": "1", "meta": '{"encoding": "rope", "train_len": 32}'}
    )
    with pytest.raises(
        ValueError, match=r"'.*old.safetensors' does not fit.*wq.weight \[64, 64\].*records no model config"
    ):
        resolve(str(old))


def test_an_old_checkpoint_of_the_default_size_still_loads(tmp_path: Path) -> None:
    model = TinyLM(LMConfig(max_positions=32))
    tensors = {f"model.{k}": v.contiguous() for k, v in model.state_dict().items()}
    old = _write_raw(
        tmp_path / "old.safetensors", tensors, {"step": "1", "meta": '{"encoding": "rope", "train_len": 32}'}
    )
    assert checkpoint_info(old).config is None
    src = resolve(str(old))
    assert src.weights is not None and src.weights.q_norms.shape[0] == 4


@pytest.mark.parametrize(
    ("tensors", "metadata", "error"),
    [
        (
            {"a": torch.zeros(1)},
            {"step": "1", "meta": '{"encoding":"rope","train_len":32}'},
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
