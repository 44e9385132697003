"""``--lenient``: a config transformers loads with a warning, which strict reading refuses, read by the CLI.

The trial: a Llama 3-scaled config.json whose ``max_position_embeddings`` equals its
``original_max_position_embeddings`` (seen in the wild) was refused by ``ropekit inspect`` with no way through.
transformers 5.23 only warns about it, and its llama3 frequencies never read ``max_position_embeddings``. The oracle:
transformers' own rotary module built from the same config.json (``AutoConfig.from_pretrained``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from ropekit.scaling import Llama3
from tests.ropekit.cli.test_cli import _run

L0 = 8192
LLAMA3 = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "max_position_embeddings": L0,  # == original_max_position_embeddings: transformers warns, ropekit refused
    "rope_theta": 500000.0,
    "rope_scaling": Llama3(8.0, 1.0, 4.0, L0).to_hf(),  # Llama 3.1's block, as its config.json spells it
}
MESSAGE = f"llama3 original_max_position_embeddings={L0} must be < max_position_embeddings={L0}"
HINT = "--lenient reads it as transformers does"


def _write(tmp_path: Path, cfg: dict[str, Any]) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_strict_refusal_names_the_keys_and_the_flag(tmp_path: Path) -> None:
    rc, out, err = _run(["inspect", _write(tmp_path, LLAMA3)])
    assert rc == 2 and out == ""
    assert MESSAGE in err and HINT in err
    assert "frequencies do not read max_position_embeddings" in err  # why --lenient is safe here


def test_lenient_inspects_transformers_frequencies_with_the_warning(tmp_path: Path) -> None:
    from tests.ropekit.hf.config_oracle import hf_config

    path = _write(tmp_path, LLAMA3)
    rc, out, err = _run(["inspect", path, "--json", "--lenient"])
    assert rc == 0, err
    assert f"ropekit inspect: warning: {MESSAGE}" in err  # said, not silent
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    want = LlamaRotaryEmbedding(hf_config(LLAMA3, tmp_path)).inv_freq.double()  # transformers loads it
    view = json.loads(out)["views"][0]
    got = torch.tensor([b["theta"] for b in view["bands"]], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)  # transformers' table is float32
    assert view["context"] == L0  # the config's own length (llama3: vLLM serves max_position_embeddings too)


def test_lenient_precision_reads_it_too(tmp_path: Path) -> None:
    path = _write(tmp_path, LLAMA3)
    rc, _, err = _run(["precision", path, "--positions", "1000", "--json"])
    assert rc == 2 and HINT in err
    rc, out, err = _run(["precision", path, "--positions", "1000", "--json", "--lenient"])
    assert rc == 0 and MESSAGE in err and json.loads(out)


def test_missing_original_max_is_a_strict_refusal_lenient_fills(tmp_path: Path) -> None:
    scaling = {k: v for k, v in LLAMA3["rope_scaling"].items() if k != "original_max_position_embeddings"}  # type: ignore[union-attr]
    cfg = {**LLAMA3, "max_position_embeddings": 131072, "rope_scaling": scaling}
    path = _write(tmp_path, cfg)
    rc, _, err = _run(["inspect", path])
    assert rc == 2 and "requires ['original_max_position_embeddings']" in err and HINT in err
    rc, out, err = _run(["inspect", path, "--json", "--lenient", "--context", "4096"])
    assert rc == 0 and "transformers fills it with max_position_embeddings=131072" in err
    assert json.loads(out)["views"][0]["spec"]["scaling"]["original_max_position_embeddings"] == 131072


def test_what_lenient_cannot_read_gets_no_hint(tmp_path: Path) -> None:
    cfg = {**LLAMA3, "rope_scaling": {**LLAMA3["rope_scaling"], "rope_type": "magic"}}  # type: ignore[dict-item]
    for flags in ((), ("--lenient",)):
        rc, _, err = _run(["inspect", _write(tmp_path, cfg), *flags])
        assert rc == 2 and "unknown rope_type 'magic'" in err and HINT not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["inspect", "llama-2-7b", "--lenient"],
        ["inspect", "--base", "10000", "--lenient"],
        ["precision", "llama-2-7b", "--lenient"],
    ],
)
def test_lenient_without_a_config_is_refused(argv: list[str]) -> None:
    rc, out, err = _run(argv)
    assert rc == 2 and out == ""
    assert "--lenient applies to a config.json SOURCE" in err and "drop it" in err


def test_report_lenient(tmp_path: Path) -> None:
    path = _write(tmp_path, LLAMA3)
    rc, _, err = _run(["report", path, "--out", str(tmp_path / "strict")])
    assert rc == 2 and MESSAGE in err and HINT in err
    rc, _, err = _run(["report", "llama-2-7b", "--out", str(tmp_path / "p"), "--lenient"])
    assert rc == 2 and "has no config to read" in err
    rc, out, err = _run(["report", path, "--out", str(tmp_path / "lenient"), "--lenient"])
    assert rc == 0, err
    assert f"ropekit report: warning: {MESSAGE}" in err and out.strip().endswith("index.html")
