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
    meta = {"encoding": "rope", "train_len": 64, "encoding_kw": {}}  # encoding_kw as model_plan records it
    save_checkpoint(ckpt, model, opt, 1, torch.Generator(), meta)
    assert main(["report", str(ckpt), "--out", str(tmp_path / "r"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (
        data["kind"] == "lab-checkpoint" and len(data["weights"]["previous_token_score"][0]) == 2
    )  # 2 heads
    ckpt.write_bytes(ckpt.read_bytes()[:200])  # truncated
    err = _report_error([str(ckpt), "--out", str(tmp_path / "r2")], capsys)
    assert f"lab checkpoint '{ckpt}': not a readable safetensors file" in err


class _Trap:
    """Unpickling this creates the file ``path``: proof that a pickle was loaded."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return open, (str(self.path), "w")


_TINY_CONFIG = {
    "model_type": "llama",
    "hidden_size": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "max_position_embeddings": 256,
    "rope_theta": 10000.0,
}


def test_a_model_folder_with_only_pickle_weights_says_they_were_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Trial finding: config.json + pytorch_model.bin gave a config-only report without a word. Now stderr, the
    page and the JSON say the weights section was skipped and why; the pickle is never loaded."""
    import pickle

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_TINY_CONFIG))
    marker = tmp_path / "unpickled"
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(_Trap(marker)))
    out = tmp_path / "r"
    assert main(["report", str(folder), "--out", str(out), "--json"]) == 0
    cap = capsys.readouterr()
    data = json.loads(cap.out)
    assert not marker.exists()  # never unpickled
    assert data["kind"] == "config" and "weights" not in data
    note = data["weights_note"]
    assert note.startswith("weights section skipped: the folder's weights are only pytorch_model.bin, pickle")
    assert "never loads pickle files" in note and "safetensors" in note
    assert f"ropekit report: {note}" in cap.err
    assert json.loads((out / "report.json").read_text())["weights_note"] == note
    page = (out / "index.html").read_text()
    assert '<section id="weights">' in page and "weights section skipped" in page


def test_the_cli_and_build_report_give_the_same_weights_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The note is build_report's (ropekit.report.build), not the CLI's: the CLI's JSON is build_report's, the page
    holds the note once, in the last section, and stderr prints it once."""
    from ropekit.report.build import build_report
    from ropekit.report.sources import resolve

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_TINY_CONFIG))
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04N.")
    out = tmp_path / "r"
    assert main(["report", str(folder), "--out", str(out), "--json"]) == 0
    cap = capsys.readouterr()
    api = build_report(resolve(str(folder))).data
    assert json.loads(cap.out) == api and "weights_note" in api
    assert cap.err.count(api["weights_note"]) == 1
    page = (out / "index.html").read_text()
    assert page.count("weights section skipped") == 1
    assert page.rindex("<section id=") == page.index('<section id="weights">')


def test_a_folder_with_only_a_config_gets_no_weights_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ropekit.report.sources import resolve

    (tmp_path / "config.json").write_text(json.dumps(_TINY_CONFIG))
    assert resolve(str(tmp_path)).weights_note is None
    (tmp_path / "tf_model.h5").write_bytes(b"\x89HDF\r\n")
    (tmp_path / "training_args.bin").write_bytes(b"\x80\x04.")
    note = resolve(str(tmp_path)).weights_note
    assert (
        note is not None and "only tf_model.h5, training_args.bin, pickle files or TensorFlow / Flax" in note
    )
    assert resolve(str(tmp_path), weights=False).weights_note is None  # no weights asked for


def test_a_binary_source_names_the_argument_the_file_and_what_was_expected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], binary_source: tuple[Path, Path]
) -> None:
    """Trial finding: a non-UTF-8 SOURCE gave a bare "'utf-8' codec can't decode byte 0x80"."""
    source, bad = binary_source
    err = _report_error([str(source), "--out", str(tmp_path / "r")], capsys)
    assert (
        f"SOURCE '{bad}' is not a UTF-8 text file, so not a config.json (invalid start byte at byte 0)" in err
    )
    assert "SOURCE is a preset name, a config.json, a model folder or a lab checkpoint" in err
