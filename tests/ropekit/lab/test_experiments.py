"""Every lab experiment runs end to end with a tiny budget and writes its JSON, Markdown and PNG."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from ropekit.cli.main import main
from ropekit.lab.experiments import extrapolation, frequencies, passkey, scaling


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    f = tmp_path_factory.mktemp("corpus") / "text.txt"
    f.write_bytes((Path(__file__).read_bytes() + Path(extrapolation.__file__).read_bytes()) * 8)
    return str(f)


def _files_exist(res: dict, name: str) -> None:
    for kind in ("json", "markdown", "png"):
        assert Path(res["files"][kind]).exists(), kind
    md = Path(res["files"]["markdown"]).read_text()
    assert "## Claims" in md and "Published" in md and f"{name}.png" in md


def test_extrapolation(tmp_path: Path, corpus: str) -> None:
    res = extrapolation.run(tmp_path, tiny=True, corpus=corpus)
    _files_exist(res, "extrapolation")
    rows = json.loads(Path(res["files"]["json"]).read_text())["results"]
    assert {r["encoding"] for r in rows} == set(extrapolation.ENCODINGS)
    assert {r["eval_len"] for r in rows} == {128, 256, 512, 1024}
    assert all(r["ppl"] > 1 and r["ppl_sliding"] > 1 for r in rows)
    assert len(list((tmp_path / "ckpt").glob("*.safetensors"))) == len(extrapolation.ENCODINGS)


def test_scaling_reuses_the_rope_checkpoint(tmp_path: Path, corpus: str) -> None:
    extrapolation.run(tmp_path, tiny=True, corpus=corpus, encodings=("rope",))
    before = {p.name: p.stat().st_mtime for p in (tmp_path / "ckpt").glob("*")}
    res = scaling.run(tmp_path, tiny=True, corpus=corpus)
    _files_exist(res, "scaling")
    assert {
        p.name: p.stat().st_mtime for p in (tmp_path / "ckpt").glob("*")
    } == before  # resumed, not retrained
    assert res["corpus"] == corpus and res["corpus_identity"]["sha256"]  # the data it measured
    schemes = {r["scheme"] for r in res["zero_shot"]}
    assert schemes == set(scaling.SCHEMES) and {r["eval_len"] for r in res["finetuned_x4"]} == {512, 1024}


def test_frequencies(tmp_path: Path, corpus: str) -> None:
    res = frequencies.run(tmp_path, tiny=True, corpus=corpus)
    _files_exist(res, "frequencies")
    assert len(res["band_norms"]["q"]) == 4 and len(res["band_norms"]["q"][0]) == 16  # layers x bands
    assert {r["p"] for r in res["p_sweep"]} == {0.25, 0.5, 0.75, 1.0, 0.0}
    assert [a["seed"] for a in res["per_seed"]] == [0]
    assert res["per_seed"][0]["band_norms"] == res["band_norms"]
    md = Path(res["files"]["markdown"]).read_text()
    # one seed: every claim inconclusive, its numbers still named
    assert md.count("**inconclusive**") == len(frequencies.claims(res)) == 5


def test_passkey(tmp_path: Path) -> None:
    res = passkey.run(tmp_path, tiny=True, encodings=("rope", "alibi"))  # synthetic data: no corpus
    _files_exist(res, "passkey")
    assert res["corpus"] is None
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in res["results"])


def test_cli_json(tmp_path: Path, corpus: str) -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        args = [
            "lab",
            "extrapolation",
            "--out",
            str(tmp_path),
            "--steps",
            "2",
            "--corpus",
            corpus,
            "--json",
            "--quick",
        ]
        assert main([*args, "--encodings", "rope,alibi"]) == 0
    rep = json.loads(out.getvalue())
    assert rep["experiment"] == "extrapolation" and rep["train_len"] == 128
    assert {"encoding", "seed", "eval_len", "ppl"} <= set(rep["results"][0])
    assert {r["encoding"] for r in rep["results"]} == {"rope", "alibi"}
    assert main(["lab", "scaling", "--encodings", "rope"]) == 2  # refused with a message
