"""``ropekit lab`` argument checks: refused before any training or writing, naming the flag as typed."""

from __future__ import annotations

from pathlib import Path

import pytest

from ropekit.cli.main import main


def _lab_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["lab", *argv]) == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("steps", ["-1", "0"])
def test_steps_below_one_is_refused_before_anything_is_written(
    steps: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "lab"
    err = _lab_error(["extrapolation", "--quick", "--steps", steps, "--out", str(out)], capsys)
    assert f"ropekit lab: error: --steps must be >= 1, got {steps}" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["vision", "--corpus", "some.txt"], "--corpus some.txt"),
        (["vision", "--train-len", "64"], "--train-len 64"),
        (["vision", "--precision", "bf16"], "--precision bf16"),
        (["invariance", "--steps", "5"], "--steps 5"),
        (["invariance", "--corpus", "x"], "--corpus x"),
        (["passkey", "--corpus", "x"], "--corpus x"),
    ],
)
def test_flags_an_experiment_does_not_use_are_named_as_typed(
    argv: list[str], flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "lab"
    err = _lab_error([*argv, "--out", str(out)], capsys)
    assert f"ropekit lab: error: lab {argv[0]} does not take {flag} (" in err
    assert "[" not in err  # no Python list of parameter names
    assert not out.exists()


def test_encodings_help_names_the_default_set(capsys: pytest.CaptureFixture[str]) -> None:
    """The help's default is each experiment's own default (the original six), not "all"."""
    from ropekit.lab.encodings import ENCODINGS
    from ropekit.lab.experiments import extrapolation, passkey

    with pytest.raises(SystemExit):
        main(["lab", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert extrapolation.ENCODINGS == passkey.ENCODINGS != tuple(ENCODINGS)
    assert f"default: the original six, {','.join(extrapolation.ENCODINGS)})" in text
    assert "default: all" not in text


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (None, "cannot read it (No such file or directory)"),
        ("not json", "not a JSON file"),
        ("[1, 2]", "not an extrapolation result (experiment='list')"),
        ('{"experiment": "passkey"}', "not an extrapolation result (experiment='passkey')"),
        ('{"experiment": "extrapolation"}', "an extrapolation result without train_len, budget"),
    ],
)
def test_merge_errors_name_the_merge_file(
    content: str | None, error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    good = tmp_path / "good.json"
    good.write_text("{}")
    err = _lab_error(
        ["extrapolation", "--merge", str(bad), "--merge", str(good), "--out", str(tmp_path / "o")], capsys
    )
    assert f"ropekit lab: error: --merge {bad}: {error}" in err
    assert not (tmp_path / "o" / "extrapolation.md").exists()


@pytest.mark.parametrize(
    ("argv", "msg"),
    [
        (["scaling", "--first-seed", "1"], "--first-seed applies to extrapolation only, not scaling"),
        (["extrapolation", "--first-seed", "-1"], "--first-seed must be >= 0, got -1"),
        (["extrapolation", "--first-seed", "1", "--merge", "a.json", "--merge", "b.json"], "--first-seed"),
    ],
)
def test_first_seed_is_checked_before_any_work(
    argv: list[str], msg: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "lab"
    assert msg in _lab_error([*argv, "--out", str(out)], capsys)
    assert not out.exists()
