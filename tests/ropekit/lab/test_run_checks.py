"""What the lab's experiments refuse before training (a checkpoint of another run, a repeated encoding, a corpus too
small for the training length, the passkey task's unused corpus and too-short length) and what they record (the
corpus of every result). Tiny models: train_len 16, one step."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

from ropekit.lab.data import passkey_training_batch
from ropekit.lab.experiments import extrapolation, frequencies, passkey, scaling, vision
from ropekit.lab.experiments.common import budget, model_plan, trained_model
from ropekit.lab.model import LMConfig, TinyLM
from ropekit.lab.train import save_checkpoint

L = 16  # training length of these tests: evaluation at 8 x 16 = 128 bytes


def _text(path: Path, n: int, salt: bytes = b"") -> str:
    """A text file of ``n`` bytes (this file's source, repeated)."""
    body = salt + Path(__file__).read_bytes()
    path.write_bytes((body * (n // len(body) + 1))[:n])
    return str(path)


def _extrapolation(out: Path, corpus: str, encodings: tuple[str, ...], **kw: object) -> dict[str, object]:
    return extrapolation.run(out, tiny=True, steps=1, train_len=L, corpus=corpus, encodings=encodings, **kw)  # type: ignore[arg-type]


def test_a_checkpoint_of_another_corpus_is_refused_before_training(tmp_path: Path) -> None:
    a, b = _text(tmp_path / "a.txt", 4000), _text(tmp_path / "b.txt", 4000, salt=b"# other\n")
    _extrapolation(tmp_path / "out", a, ("rope",))
    ckpt = next((tmp_path / "out" / "ckpt").glob("rope-*.safetensors"))
    before = ckpt.read_bytes()
    with pytest.raises(
        ValueError, match=f"'{ckpt}' was written by another run: data.source '{a}' .this run: '{b}'"
    ) as e:
        _extrapolation(tmp_path / "out", b, ("alibi", "rope"))
    assert re.search(r"data.sha256 '[0-9a-f]{64}' \(this run: '[0-9a-f]{64}'\); delete it", str(e.value))
    assert ckpt.read_bytes() == before  # neither overwritten ...
    assert not list((tmp_path / "out" / "ckpt").glob("alibi-*"))  # ... nor any model trained first
    assert _extrapolation(tmp_path / "out", a, ("rope",))["tokens_per_second"] == {"rope": "checkpoint"}


def test_a_checkpoint_of_another_encoding_under_its_name_is_refused(tmp_path: Path) -> None:
    a = _text(tmp_path / "a.txt", 4000)
    _extrapolation(tmp_path / "out", a, ("rope",))
    ckpt = tmp_path / "out" / "ckpt"
    rope = next(ckpt.glob("rope-*.safetensors"))
    shutil.copy(rope, ckpt / rope.name.replace("rope-", "nope-"))  # the same tensors under NoPE's name
    with pytest.raises(ValueError, match=r"encoding 'rope' \(this run: 'nope'\).*config.encoding 'rope'"):
        _extrapolation(tmp_path / "out", a, ("nope",))


def test_a_checkpoint_without_the_recorded_identity_is_refused(tmp_path: Path) -> None:
    """Checkpoints written before the identity was recorded cannot be checked: refused, saying how to go on."""
    a = _text(tmp_path / "a.txt", 4000)
    from ropekit.lab.data import load_corpus

    plan = model_plan("rope", load_corpus(a), train_len=L, b=budget(False, 1, True), seed=0, out=tmp_path)
    model = TinyLM(plan.cfg)
    old_meta = {"encoding": "rope", "train_len": L, "tag": "rope", "steps": 1, "seed": 0}
    save_checkpoint(plan.ckpt, model, torch.optim.AdamW(model.parameters()), 1, torch.Generator(), old_meta)
    with pytest.raises(
        ValueError, match=r"records no encoding_kw, data, batch, lr, precision.*delete it or choose"
    ):
        _extrapolation(tmp_path, a, ("rope",))
    with pytest.raises(ValueError, match="records no"):
        trained_model(plan)  # the Python API too


def test_the_same_checkpoint_is_shared_by_the_experiments_that_train_that_model(tmp_path: Path) -> None:
    """extrapolation's RoPE model is frequencies' p = 1 model: the same identity, resumed, not refused."""
    a = _text(tmp_path / "a.txt", 4000)
    _extrapolation(tmp_path, a, ("rope", "nope"))
    res = frequencies.run(tmp_path, tiny=True, steps=1, train_len=L, corpus=a)
    assert res["corpus"] == a and res["corpus_identity"]["split"] == "one file, split 90/10 by position"
    assert len(list((tmp_path / "ckpt").glob("rope-*"))) == 1


@pytest.mark.parametrize("run", [extrapolation.run, passkey.run, vision.run])
def test_a_repeated_encoding_is_refused_naming_it(tmp_path: Path, run: object) -> None:
    enc = "learned"
    with pytest.raises(ValueError, match=r"encodings \(--encodings\) lists 'learned' more than once"):
        run(tmp_path, tiny=True, steps=1, encodings=(enc, "rope" if run is not vision.run else "none", enc))  # type: ignore[operator]
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "parts").exists()


def test_verdicts_count_distinct_seeds_not_rows() -> None:
    row = {"encoding": "learned", "seed": 0}
    rows = [{**row, "eval_len": n, "ppl": p, "ppl_sliding": p} for n, p in ((L, 2.0), (2 * L, 3.0))] * 3
    assert extrapolation.ratios(rows, "learned", L, 2) == [1.5]
    (line,) = [v.line() for v in extrapolation.claims({"results": rows, "train_len": L})]
    assert "(3 seeds)" not in line and "inconclusive" in line


@pytest.mark.parametrize(
    ("size", "error"),
    [
        (1000, r"validation split 100 \(needs >= 129 for evaluation at 8 x 16 \+ 1\)"),
        (20, r"training split holds 18 bytes \(needs >= 18: 1 x 16 \+ 2\)"),
    ],
)
def test_a_corpus_too_small_for_the_training_length_is_refused_before_training(
    tmp_path: Path, size: int, error: str
) -> None:
    c = _text(tmp_path / "small.txt", size)
    with pytest.raises(ValueError, match=rf"corpus '{c}' \(--corpus; one file, .*--train-len 16: .*{error}"):
        _extrapolation(tmp_path / "out", c, ("rope",))
    assert not (tmp_path / "out").exists()


def test_scaling_needs_training_windows_of_four_times_the_length(tmp_path: Path) -> None:
    c = _text(tmp_path / "c.txt", 1500)  # 1350 training bytes: 4 x 16 + 2 fits; 4 x 512 + 2 does not
    with pytest.raises(
        ValueError, match=r"training split holds 1,350 bytes \(needs >= 2,050: 4 x 512 \+ 2\)"
    ):
        scaling.run(tmp_path / "out", tiny=True, steps=1, train_len=512, corpus=c)
    assert not (tmp_path / "out").exists()


def test_passkey_refuses_a_corpus_and_a_too_short_length_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"lab passkey does not take a corpus \(--corpus 'x.txt'\)"):
        passkey.run(tmp_path, tiny=True, corpus="x.txt")  # not even opened
    with pytest.raises(ValueError, match=r"--train-len 50 is too short for the passkey task \(needs >= 103"):
        passkey.run(tmp_path, tiny=True, train_len=50)
    assert not (tmp_path / "ckpt").exists()
    g = torch.Generator().manual_seed(0)
    assert passkey_training_batch(1, 103, g)[0].shape == (1, 103)  # the minimum is the real one
    with pytest.raises(ValueError, match="too short"):
        passkey_training_batch(1, 102, g)


def test_extrapolation_markdown_says_how_a_single_file_was_split(tmp_path: Path) -> None:
    a = _text(tmp_path / "a.txt", 4000)
    res = _extrapolation(tmp_path, a, ("rope",))
    md = Path(res["files"]["markdown"]).read_text()  # type: ignore[index]
    assert f"corpus `{a}` (one file, split 90/10 by position, 3,600 / 400 bytes)" in md
    assert "split by file" not in md


def test_model_config_of_a_plan_is_checked() -> None:
    with pytest.raises(ValueError, match="LMConfig.encoding"):
        model_plan(
            "foo", {"task": "x"}, train_len=L, b=budget(False, 1, True), seed=0, out=Path("/tmp/unused")
        )
    assert LMConfig(encoding="rope", max_positions=L).max_positions == L
