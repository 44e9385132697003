"""``ropekit report``: exit codes, printed path, errors, and a transformers model folder with weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ropekit.cli.main import main
from tests.ropekit.cli.tiny_llama import tiny_llama


def test_prints_the_page_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "llama"
    assert main(["report", "llama-2-7b", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == str(out / "index.html") and Path(printed).stat().st_size > 50_000


def test_bad_source_exits_2_with_a_clear_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "llama-9", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "ropekit report: error: SOURCE 'llama-9' is not a preset" in err
    assert not (tmp_path / "index.html").exists()


def test_hf_model_folder_with_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A tiny random Llama saved with safetensors: weights section, per-band |q| checked by hand for layer 0."""
    model = tiny_llama(tmp_path / "tiny")
    assert main(["report", str(tmp_path / "tiny"), "--out", str(tmp_path / "out"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "hf-model"
    w = data["weights"]
    assert len(w["q_norms"]) == 2 and len(w["q_norms"][0]) == 4  # 2 layers, head_dim 8 -> 4 bands
    assert len(w["previous_token_score"][0]) == 4  # 4 heads
    from ropekit.report.models import sample_tokens

    tokens = sample_tokens(64, 2, 64)
    with torch.no_grad():
        layer = model.model.layers[0]
        q = layer.self_attn.q_proj(layer.input_layernorm(model.model.embed_tokens(tokens))).view(2, 64, 4, 8)
    for band in range(4):  # Llama pairs (i, i + 4) ("half" layout)
        want = torch.hypot(q[..., band].double(), q[..., band + 4].double()).mean().item()
        assert w["q_norms"][0][band] == pytest.approx(want, rel=1e-5)
    page = (tmp_path / "out" / "index.html").read_text()
    assert '<section id="weights">' in page


def test_bad_context_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "llama-2-7b", "--out", str(tmp_path / "x"), "--context", "0"]) == 2
    assert "--context must be a positive int <= 2^53" in (err := capsys.readouterr().err) and "got 0" in err
    assert not (tmp_path / "x").exists()
