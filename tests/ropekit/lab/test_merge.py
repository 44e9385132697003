"""``ropekit lab extrapolation --merge``: runs of the same budget and corpus, trained apart, give the result of one
run that trained them all. Oracle: that single run (same seeds, same data; training is deterministic on the CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ropekit.cli.main import main
from ropekit.lab.experiments import extrapolation


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    f = tmp_path_factory.mktemp("corpus") / "text.txt"
    f.write_bytes((Path(__file__).read_bytes() + Path(extrapolation.__file__).read_bytes()) * 8)
    return str(f)


def _run(out: Path, corpus: str, encodings: tuple[str, ...]) -> Path:
    extrapolation.run(out, tiny=True, corpus=corpus, encodings=encodings, seeds=2)
    return out / "extrapolation.json"


def test_merged_runs_equal_one_run_of_all_encodings(tmp_path: Path, corpus: str) -> None:
    a = _run(tmp_path / "a", corpus, ("rope",))
    b = _run(tmp_path / "b", corpus, ("alibi", "learned"))
    both = json.loads(_run(tmp_path / "both", corpus, ("rope", "alibi", "learned")).read_text())
    assert (
        main(["lab", "extrapolation", "--merge", str(a), "--merge", str(b), "--out", str(tmp_path / "m")])
        == 0
    )
    merged = json.loads((tmp_path / "m" / "extrapolation.json").read_text())
    assert merged["results"] == both["results"]  # every (encoding, seed, length) row, same values
    assert merged["per_position_loss"] == both["per_position_loss"]
    md = (tmp_path / "m" / "extrapolation.md").read_text()
    claims = lambda text: text[text.index("## Claims") :].split("\n![")[0]
    assert claims(md) == claims((tmp_path / "both" / "extrapolation.md").read_text())
    assert [m["encodings"] for m in merged["merged_from"]] == [["rope"], ["alibi", "learned"]]


def test_merge_refuses_other_budgets_duplicates_and_training_flags(tmp_path: Path, corpus: str) -> None:
    a = _run(tmp_path / "a", corpus, ("rope",))
    other = json.loads(a.read_text())
    other["budget"]["steps"] += 1
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(ValueError, match="budget"):
        extrapolation.merge(tmp_path / "m", [a, tmp_path / "other.json"])
    with pytest.raises(ValueError, match="'rope' seed 0 is also in"):
        extrapolation.merge(tmp_path / "m", [a, _run(tmp_path / "again", corpus, ("rope",))])
    with pytest.raises(ValueError, match="at least two"):
        extrapolation.merge(tmp_path / "m", [a])
    assert not (tmp_path / "m").exists()  # nothing written by a refused merge
    for extra in (["--seeds", "3"], ["--encodings", "rope"], ["--steps", "5"]):  # not silently ignored
        assert main(["lab", "extrapolation", "--merge", str(a), "--merge", str(a), *extra]) == 2
    assert main(["lab", "scaling", "--merge", str(a), "--merge", str(a)]) == 2


def test_runs_of_disjoint_seeds_merge_into_one_run_of_all_seeds(tmp_path: Path, corpus: str) -> None:
    """Seeds split over runs (``first_seed``): the merge equals one run of every seed, per-position loss included
    (seed 0's, whatever the order of the files)."""
    kw = {"tiny": True, "corpus": corpus, "encodings": ("rope",), "train_len": 16, "steps": 1}
    later = extrapolation.run(tmp_path / "s1", seeds=1, first_seed=1, **kw)  # type: ignore[arg-type]
    assert [r["seed"] for r in later["results"]] == [1] * 4 and later["first_seed"] == 1
    extrapolation.run(tmp_path / "s0", seeds=1, **kw)  # type: ignore[arg-type]
    both = extrapolation.run(tmp_path / "both", seeds=2, **kw)  # type: ignore[arg-type]
    s0, s1 = tmp_path / "s0" / "extrapolation.json", tmp_path / "s1" / "extrapolation.json"
    key = lambda r: (r["seed"], r["eval_len"])
    for i, files in enumerate(([s1, s0], [s0, s1])):
        merged = extrapolation.merge(tmp_path / f"m{i}", files)
        assert sorted(merged["results"], key=key) == sorted(both["results"], key=key)
        assert merged["per_position_loss"] == both["per_position_loss"] and merged["first_seed"] == 0
    assert [m["seeds"] for m in merged["merged_from"]] == [[0], [1]]
    with pytest.raises(ValueError, match=r"first_seed \(--first-seed\) must be an int >= 0, got -1"):
        extrapolation.run(tmp_path / "x", seeds=1, first_seed=-1, **kw)  # type: ignore[arg-type]


def test_merge_refuses_runs_on_other_bytes_of_the_same_corpus_path(tmp_path: Path, corpus: str) -> None:
    extrapolation.run(tmp_path / "a", tiny=True, corpus=corpus, encodings=("rope",), train_len=16, steps=1)
    a = tmp_path / "a" / "extrapolation.json"
    other = json.loads(a.read_text())
    other["results"] = [dict(r, encoding="alibi") for r in other["results"]]
    other["corpus_identity"]["sha256"] = "0" * 64  # same path and unigram ppl, other content
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(ValueError, match="corpus_identity"):
        extrapolation.merge(tmp_path / "m", [a, tmp_path / "other.json"])
