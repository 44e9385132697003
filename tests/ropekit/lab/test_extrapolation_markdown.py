"""The extrapolation Markdown's baseline sentence and learned-table note, on synthetic results (no training)."""

from __future__ import annotations

from typing import Any

import pytest

from ropekit.lab.experiments.extrapolation import _markdown


def _result(ppl_1x: dict[str, float], unigram: float) -> dict[str, Any]:
    rows = [
        {"encoding": e, "seed": 0, "eval_len": m * 128, "ppl": p * m, "ppl_sliding": p}
        for e, p in ppl_1x.items()
        for m in (1, 2, 4, 8)
    ]
    return {
        "train_len": 128,
        "budget": {"steps": 10, "batch": 4, "lr": 1e-3, "precision": "fp32"},
        "corpus": "test",
        "tokens_per_second": {},
        "unigram_ppl": unigram,
        "results": rows,
    }


def _md(ppl_1x: dict[str, float], unigram: float) -> str:
    return _markdown(_result(ppl_1x, unigram), tuple(ppl_1x), (1, 2, 4, 8))


@pytest.mark.parametrize(
    ("best", "unigram", "phrase"),
    [
        (4.0, 24.0, "the best model reaches 4.00 at 1x (6.0x lower)"),
        (80.34, 24.47, "the best model reaches 80.34 at 1x (3.3x higher: worse than the unigram baseline)"),
    ],
)
def test_baseline_sentence_says_lower_or_higher(best: float, unigram: float, phrase: str) -> None:
    md = _md({"rope": best, "nope": best + 1}, unigram)
    assert phrase in md


def test_learned_note_only_when_learned_was_trained() -> None:
    note = "The learned table has 128 rows; positions past it reuse the last row."
    assert note in _md({"learned": 5.0, "rope": 4.0}, 24.0)
    assert note not in _md({"rope": 4.0, "alibi": 4.5}, 24.0)
