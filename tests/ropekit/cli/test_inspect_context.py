"""The context ``ropekit inspect`` reads from a config.json, as ``ropekit report`` does (a trial found inspect
judging a config without max_position_embeddings at a silent 131,072): transformers' class default for its family
(the oracle: the config class itself), said on stderr; else refused naming the key and --context."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ropekit.cli.main import main

_LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "rope_theta": 10000.0}


def _inspect(tmp_path: Path, cfg: dict[str, object], *flags: str) -> tuple[int, str, str]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["inspect", str(path), "--json", *flags])
    return rc, out.getvalue(), err.getvalue()


def test_a_config_without_the_key_is_judged_at_its_class_default(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    want = transformers.LlamaConfig().max_position_embeddings
    rc, out, err = _inspect(tmp_path, _LLAMA)
    assert rc == 0, err
    assert json.loads(out)["views"][0]["context"] == want == 2048
    assert "context 2,048 tokens: the config has no max_position_embeddings" in err
    rc, out, _ = _inspect(tmp_path, _LLAMA, "--context", "8192")
    assert rc == 0 and json.loads(out)["views"][0]["context"] == 8192


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"model_type": "not-a-family"}, "is missing and ropekit does not know transformers' default"),
        ({"max_position_embeddings": None}, "is null"),
    ],
)
def test_no_known_context_is_refused_naming_the_flag(
    tmp_path: Path, extra: dict[str, object], match: str
) -> None:
    rc, out, err = _inspect(tmp_path, {**_LLAMA, **extra})
    assert rc == 2 and out == ""
    assert match in err and "pass --context" in err


def test_a_bad_value_is_refused_with_or_without_context(tmp_path: Path) -> None:
    for flags in ((), ("--context", "4096")):
        rc, _, err = _inspect(tmp_path, {**_LLAMA, "max_position_embeddings": 0}, *flags)
        assert rc == 2
        assert "config max_position_embeddings must be a positive int (the context length), got 0" in err
