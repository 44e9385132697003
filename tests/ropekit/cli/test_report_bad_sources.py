"""``ropekit report`` refuses what it cannot analyse -- a corrupt or incomplete model folder, a path that does not
exist, an unreadable lab checkpoint -- with exit status 2 and a message naming the file or folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ropekit.cli.main import main
from tests.ropekit.cli.tiny_llama import tiny_llama


def _report_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["report", *argv]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # transformers may log its load report above it
    assert last.startswith("ropekit report: error: ")
    return last


def test_corrupt_safetensors_in_a_model_folder_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "m"
    tiny_llama(model)
    (model / "model.safetensors").write_text("junk\n")
    err = _report_error([str(model), "--out", str(tmp_path / "r")], capsys)
    assert f"{model / 'model.safetensors'}' is not a readable safetensors file" in err
    assert not (tmp_path / "r" / "index.html").exists()


def test_a_model_folder_without_its_weights_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A safetensors without the model's tensors would load as random init: refused, q/k projections named."""
    from safetensors.torch import save_file

    model = tmp_path / "m"
    tiny_llama(model)
    save_file({"x": torch.zeros(1)}, str(model / "model.safetensors"))
    err = _report_error([str(model), "--out", str(tmp_path / "r")], capsys)
    assert f"ropekit report: error: SOURCE '{model}': its safetensors lack" in err
    assert "model.layers.0.self_attn.q_proj.weight" in err and "k_proj" in err


def test_a_model_folder_lacking_one_layer_norm_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.torch import load_file, save_file

    model = tmp_path / "m"
    tiny_llama(model)
    tensors = load_file(str(model / "model.safetensors"))
    del tensors["model.layers.1.input_layernorm.weight"]
    save_file(tensors, str(model / "model.safetensors"), metadata={"format": "pt"})
    err = _report_error([str(model), "--out", str(tmp_path / "r")], capsys)
    assert "lack 1 weight(s) the analysis needs (model.layers.1.input_layernorm.weight)" in err


def test_a_complete_model_folder_still_reports_its_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "m"
    tiny_llama(model)
    assert main(["report", str(model), "--out", str(tmp_path / "r"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "hf-model"


@pytest.mark.parametrize("source", ["/nonexistent/config.json", "missing.safetensors", "no/such/folder"])
def test_a_path_that_does_not_exist_says_so(
    source: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _report_error([source, "--out", str(tmp_path / "r")], capsys)
    assert f"SOURCE {source!r} does not exist" in err and "is not a preset" not in err


def test_a_config_without_a_head_dimension_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "empty.json"
    cfg.write_text("{}")
    err = _report_error([str(cfg), "--out", str(tmp_path / "r")], capsys)
    assert f"SOURCE '{cfg}': config needs head_dim" in err


def test_a_lab_checkpoint_of_another_size_reports_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ropekit.lab.model import LMConfig, TinyLM
    from ropekit.lab.train import save_checkpoint

    model = TinyLM(LMConfig(d_model=64, n_heads=2, n_kv_heads=1))
    opt = torch.optim.AdamW(model.parameters())
    ckpt = tmp_path / "small.safetensors"
    save_checkpoint(ckpt, model, opt, 1, torch.Generator(), {"encoding": "rope", "train_len": 64})
    assert main(["report", str(ckpt), "--out", str(tmp_path / "r"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (
        data["kind"] == "lab-checkpoint" and len(data["weights"]["previous_token_score"][0]) == 2
    )  # 2 heads
    ckpt.write_bytes(ckpt.read_bytes()[:200])  # truncated
    err = _report_error([str(ckpt), "--out", str(tmp_path / "r2")], capsys)
    assert f"lab checkpoint '{ckpt}': not a readable safetensors file" in err
