"""The context a config.json is reported at (trial findings 6 and 11): the stated one, else transformers'
class default for its family (checked against the classes themselves), else a refusal naming the key and
--context; never a silent 131,072. A bad value is refused with a plain message."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from ropekit.analysis.config_context import CONTEXT_KEYS, DEFAULT_CONTEXTS, config_context
from ropekit.cli.main import main
from ropekit.report.sources import resolve

_LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "rope_theta": 10000.0}


def _config_class(model_type: str) -> type:
    transformers = pytest.importorskip("transformers")
    return transformers.CONFIG_MAPPING[model_type]  # type: ignore[no-any-return]


@pytest.mark.parametrize("model_type", sorted(DEFAULT_CONTEXTS))
def test_family_defaults_are_transformers_class_defaults(model_type: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = _config_class(model_type)()
    assert cfg.max_position_embeddings == DEFAULT_CONTEXTS[model_type]


@pytest.mark.parametrize("model_type", sorted(CONTEXT_KEYS))
def test_context_key_aliases_are_transformers_attribute_maps(model_type: str) -> None:
    assert _config_class(model_type).attribute_map["max_position_embeddings"] == CONTEXT_KEYS[model_type]


def _write(tmp_path: Path, cfg: dict[str, object], name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


def test_a_config_without_max_position_embeddings_gets_its_class_default(tmp_path: Path) -> None:
    """The trial: a llama config.json without the key was reported at 131,072; LlamaConfig's default is 2,048."""
    want = _config_class("llama")().max_position_embeddings
    src = resolve(str(_write(tmp_path, _LLAMA)))
    assert src.context == want == 2048
    assert src.context_note is not None and "no max_position_embeddings" in src.context_note
    assert "'llama'" in src.context_note
    assert resolve(str(_write(tmp_path, _LLAMA)), context=8192).context == 8192  # --context wins


def test_gptj_states_its_context_as_n_positions(tmp_path: Path) -> None:
    cfg = {"model_type": "gptj", "n_embd": 64, "n_head": 4, "rotary_dim": 8, "n_positions": 4096}
    src = resolve(str(_write(tmp_path, cfg)))
    assert (src.context, src.context_note) == (4096, None)


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (
            {"model_type": "not-a-family"},
            "is missing and ropekit does not know transformers' default for model_type",
        ),
        ({"max_position_embeddings": None}, "is null and transformers' config classes refuse null here"),
    ],
)
def test_no_known_context_is_refused_naming_the_key_and_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: dict[str, object], match: str
) -> None:
    path = _write(tmp_path, {**_LLAMA, **extra})
    with pytest.raises(ValueError, match=f"config max_position_embeddings \\(the context length\\) {match}"):
        resolve(str(path))
    assert main(["report", str(path), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "max_position_embeddings" in err and "pass --context N" in err
    assert not (tmp_path / "r" / "index.html").exists()


@pytest.mark.parametrize(
    ("value", "shown"), [(0, "0"), (-5, "-5"), (True, "True"), (4096.0, "4096.0"), ("32k", "'32k'")]
)
def test_a_bad_max_position_embeddings_is_refused_plainly(tmp_path: Path, value: object, shown: str) -> None:
    """The trial: 0 gave "must be a positive integer, got a int"."""
    path = _write(tmp_path, {**_LLAMA, "max_position_embeddings": value})
    why = " (transformers' config classes refuse a float here too; write it as an int)"
    for ctx in (None, 4096):  # refused with --context too: the file itself is wrong
        with pytest.raises(ValueError) as e:
            resolve(str(path), context=ctx)
        assert str(e.value).endswith(
            f"config max_position_embeddings must be a positive int (the context length), got {shown}"
            + (why if isinstance(value, float) else "")
        )
        assert "a int" not in str(e.value)


def test_a_config_whose_rope_cannot_be_read_names_that_first(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="config needs head_dim"):
        resolve(str(_write(tmp_path, {})))


def test_config_context_is_the_stated_one() -> None:
    assert config_context({**_LLAMA, "max_position_embeddings": 4096}) == (4096, None)


def test_the_page_and_stderr_say_where_an_unstated_context_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, {**_LLAMA, "hidden_size": 16, "num_attention_heads": 2})
    assert main(["report", str(path), "--out", str(tmp_path / "r"), "--json"]) == 0
    captured = capsys.readouterr()
    assert "context 2,048 tokens: the config has no max_position_embeddings" in captured.err
    data = json.loads(captured.out)
    assert data["context"] == 2048 and "transformers' default" in data["context_note"]
    page = (tmp_path / "r" / "index.html").read_text()
    assert "context 2,048 tokens (the config has no max_position_embeddings" in page
