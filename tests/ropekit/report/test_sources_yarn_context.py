"""The context ``ropekit report`` judges a Qwen-style YaRN config at (``max_position_embeddings`` == L0 == 32768,
factor 4): L0 x factor, as ``ropekit inspect`` does. Before: the report used 32768 while inspect used 131072.

Oracle: transformers' YaRN semantics (``factor`` = post-yarn context / pre-yarn context; vLLM serves L0 x factor),
written out from the config's literal values, and ``ropekit inspect``'s own judgement of the same file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ropekit.report.sources import resolve
from tests.ropekit.cli.test_cli import _run
from tests.ropekit.cli.test_inspect_yarn_context import FACTOR, L0, QWEN

EXTENDED = int(L0 * FACTOR)  # 131072


def _write(tmp_path: Path, cfg: dict[str, Any]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_report_judges_qwen_yarn_at_l0_times_factor_like_inspect(tmp_path: Path) -> None:
    path = _write(tmp_path, QWEN)
    rc, out, err = _run(["report", str(path), "--out", str(tmp_path / "r"), "--json"])
    assert rc == 0, err
    data = json.loads(out)
    assert data["context"] == EXTENDED == 131072
    assert [s["span"] for s in data["specs"].values()] == [EXTENDED]
    assert "YaRN factor 4 over original_max_position_embeddings=32,768" in data["context_note"]
    assert "ropekit report: context 131,072 tokens: YaRN factor 4" in err and "--context 32768" in err
    rc, out, err = _run(["inspect", str(path), "--json"])  # the same file, the same length
    assert rc == 0, err
    assert json.loads(out)["views"][0]["context"] == data["context"]


@pytest.mark.parametrize(
    ("change", "context", "want"),
    [
        ({}, L0, L0),  # an explicit context (--context) is never replaced
        ({"max_position_embeddings": 131072}, None, 131072),  # already the extended length
        ({"max_position_embeddings": 65536}, None, 65536),  # another stated length: the config's own
        ({"rope_scaling": {"type": "yarn", "factor": 1.0, "original_max_position_embeddings": L0}}, None, L0),
        ({"rope_scaling": {"type": "linear", "factor": 4.0}}, None, L0),  # YaRN only
    ],
)
def test_other_lengths_are_kept(
    tmp_path: Path, change: dict[str, Any], context: int | None, want: int
) -> None:
    src = resolve(str(_write(tmp_path, {**QWEN, **change})), context=context)
    assert src.context == want
    assert src.context_note is None


def test_a_family_default_equal_to_l0_is_extended_with_both_notes(tmp_path: Path) -> None:
    cfg = {k: v for k, v in QWEN.items() if k != "max_position_embeddings"}  # Qwen2Config's default: 32768
    src = resolve(str(_write(tmp_path, cfg)))
    assert src.context == EXTENDED
    assert src.context_note is not None
    assert (
        "transformers' default for model_type 'qwen2'" in src.context_note
        and "YaRN factor 4" in src.context_note
    )


def test_a_model_folder_is_extended_too(tmp_path: Path) -> None:
    _write(tmp_path, QWEN)  # a folder holding config.json only: the configuration-only report
    assert resolve(str(tmp_path)).context == EXTENDED
    assert resolve(str(tmp_path), context=L0).context == L0
