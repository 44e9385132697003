"""The context ``inspect`` judges a Qwen-style YaRN config at: its ``max_position_embeddings`` is the pretraining
length L0 (32768) and the YaRN block (factor 4) extends it. The trial: ``inspect`` judged it at 32768.

Oracle: transformers' YaRN semantics (``factor`` = post-yarn context / pre-yarn context; its config class does not
warn when ``max_position_embeddings == original_max_position_embeddings``, the implicit factor being 1), so the
usable context is L0 x factor, written out here from the config's literal values (vLLM serves the same length).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.ropekit.cli.test_cli import _run

L0, FACTOR = 32768, 4.0
QWEN = {
    "model_type": "qwen2",
    "hidden_size": 256,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
    "max_position_embeddings": L0,
    "rope_theta": 1000000.0,
    "rope_scaling": {"type": "yarn", "factor": FACTOR, "original_max_position_embeddings": L0},
}


def _inspect(tmp_path: Path, cfg: dict[str, Any], *flags: str) -> tuple[int, dict[str, Any], str]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    rc, out, err = _run(["inspect", str(path), "--json", *flags])
    assert rc == 0, err
    return rc, json.loads(out), err


def test_transformers_accepts_the_config_without_a_factor_warning(tmp_path: Path) -> None:
    from tests.ropekit.hf.config_oracle import hf_config

    cfg = hf_config(QWEN, tmp_path)  # the oracle's premise: a config transformers loads as it is
    assert cfg.max_position_embeddings == cfg.rope_parameters["original_max_position_embeddings"] == L0
    assert cfg.rope_parameters["factor"] == FACTOR and cfg.rope_parameters["rope_type"] == "yarn"


def test_qwen_yarn_is_judged_at_l0_times_factor(tmp_path: Path) -> None:
    _, rep, err = _inspect(tmp_path, QWEN)
    view = rep["views"][0]
    assert view["context"] == view["span"] == int(L0 * FACTOR) == 131072
    assert "context 131,072 tokens: YaRN factor 4 over original_max_position_embeddings=32,768" in err
    assert "--context 32768" in err  # how to judge the unextended length
    # the bands are judged over the extended length: a turn count scales with the context
    first = view["bands"][0]
    assert first["rotations"] == pytest.approx(131072 * first["theta"] / (2 * 3.141592653589793), rel=1e-9)


def test_compare_extends_from_the_extended_context(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN))
    rc, out, err = _run(["inspect", str(path), "--json", "--compare", "linear,yarn"])
    assert rc == 0, err
    entry = json.loads(out)["views"][0]
    assert entry["context"] == entry["target"] == int(L0 * FACTOR) and entry["original_length"] == L0


@pytest.mark.parametrize(
    ("change", "flags", "want"),
    [
        ({}, ("--context", str(L0)), L0),  # an explicit --context is never replaced
        ({"max_position_embeddings": 131072}, (), 131072),  # already the extended length
        ({"max_position_embeddings": 65536}, (), 65536),  # another stated length: the config's own
        ({"rope_scaling": {"type": "yarn", "factor": 1.0, "original_max_position_embeddings": L0}}, (), L0),
        ({"rope_scaling": {"type": "linear", "factor": 4.0}}, (), L0),  # YaRN only
    ],
)
def test_other_lengths_are_kept(
    tmp_path: Path, change: dict[str, Any], flags: tuple[str, ...], want: int
) -> None:
    _, rep, err = _inspect(tmp_path, {**QWEN, **change}, *flags)
    assert rep["views"][0]["context"] == want
    assert "YaRN factor" not in err


def test_a_family_default_equal_to_l0_is_extended_too(tmp_path: Path) -> None:
    cfg = {k: v for k, v in QWEN.items() if k != "max_position_embeddings"}  # Qwen2Config's default: 32768
    _, rep, err = _inspect(tmp_path, cfg)
    assert rep["views"][0]["context"] == 131072
    assert "transformers' default for model_type 'qwen2'" in err and "YaRN factor 4" in err
