"""The command line, from a user trial: honest phase errors, flags that take effect or are refused, flag-named
errors, model folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ropekit.analysis.compare import compare_schemes
from ropekit.presets import get_preset, preset_spec
from tests.ropekit.cli.test_cli import _run


def test_inspect_marks_a_phase_error_the_reference_cannot_resolve() -> None:
    """At 1e9 the float64 reference is only good to ~1.1e-7: ropekit's 7.6e-8 is not a measurement of ropekit."""
    rc, out, _ = _run(["inspect", "--context", "1000000000", "--json"])
    sm = json.loads(out)["views"][0]["summary"]
    assert rc == 0 and sm["phase_error_oracle_bound"] > sm["phase_error_ropekit"]
    assert sm["phase_error_ropekit_resolved"] is False
    rc, text, _ = _run(["inspect", "--context", "1000000000"])
    assert (
        "* (not resolved)" in text
        and "the float64 reference is itself only accurate to about 1.1e-07" in text
    )
    rc, out, _ = _run(["inspect", "--context", "4096", "--json"])  # resolved at a short context: no mark
    assert json.loads(out)["views"][0]["summary"]["phase_error_ropekit_resolved"] is True
    assert "not resolved" not in _run(["inspect", "--context", "4096"])[1]


def test_precision_context_takes_effect_for_a_source(tmp_path: Path) -> None:
    rc, out, _ = _run(["precision", "llama-2-7b", "--context", "100000", "--json"])
    got = [r["position"] for r in json.loads(out)["views"][0]["results"]]
    assert rc == 0 and got == [1_000, 10_000, 100_000]
    assert _run(["precision", "llama-2-7b", "--json"])[1] != out  # without it: the default positions
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(get_preset("llama-2-7b").config))
    rc, text, _ = _run(["precision", str(cfg), "--context", "7"])
    assert rc == 0 and [ln.split()[0] for ln in text.splitlines()[2:]] == ["7"]
    # with --positions --context has nothing left to do for a SOURCE: refused, naming both
    rc, _, err = _run(["precision", "llama-2-7b", "--context", "100", "--positions", "1000"])
    assert rc == 2 and "--context 100 has no effect with --positions '1000'" in err
    # with spec flags it still sets L0 of a length-dependent scheme, so it is accepted with --positions
    argv = ["precision", "--scaling", "yarn", "--factor", "4", "--positions", "1000", "--json"]
    a, b = (json.loads(_run([*argv, "--context", c])[1]) for c in ("8192", "131072"))
    assert a["views"][0]["spec"]["scaling"] != b["views"][0]["spec"]["scaling"]
    assert [r["position"] for r in b["views"][0]["results"]] == [1000]


def test_precision_reports_the_window_it_used() -> None:
    rc, out, _ = _run(["precision", "llama-2-7b", "--positions", "100", "--window", "5000", "--json"])
    rep = json.loads(out)
    assert rc == 0 and rep["window"] == 101 and rep["window_requested"] == 5000
    assert rep["views"][0]["results"][0]["window"] == 101
    text = _run(["precision", "llama-2-7b", "--positions", "100", "--window", "5000"])[1]
    assert "over 101 positions ending at each position (--window 5000 cut at position 0)" in text
    assert "5000 positions" not in text.replace("--window 5000", "")
    rc, out, _ = _run(["precision", "llama-2-7b", "--positions", "100,10000", "--window", "5000", "--json"])
    rep = json.loads(out)
    assert rep["window"] is None and [r["window"] for r in rep["views"][0]["results"]] == [101, 5000]
    text = _run(["precision", "llama-2-7b", "--positions", "100,10000", "--window", "5000"])[1]
    assert "over 5000 positions ending at each position, or from position 0 where fewer" in text


def test_extend_to_is_bounded_like_context() -> None:
    rc, out, err = _run(["inspect", "llama-2-7b", "--extend-to", str(10**20)])
    assert rc == 2 and not out
    assert f"--extend-to must be a positive int <= 2^53 = {2**53:,}, got {10**20}" in err
    assert _run(["inspect", "llama-2-7b", "--extend-to", str(2**53)])[0] == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--base", "1"], "--base must be a finite number > 1, got 1.0"),
        (["--head-dim", "7"], "--head-dim must be a positive even integer, got 7"),
        (["--rotary-dim", "256"], "--rotary-dim must be an even integer in [2, --head-dim=128]"),
        (["--p", "1.5"], "--p must be a number in (0, 1], got 1.5"),
        (["--scaling", "yarn", "--factor", "inf"], "--factor must be a finite number >= 1, got inf"),
    ],
)
def test_spec_flag_errors_name_the_flag(argv: list[str], message: str) -> None:
    for cmd in ("inspect", "precision"):
        rc, out, err = _run([cmd, *argv])
        assert rc == 2 and not out and message in err, err
        assert "RopeSpec." not in err and "Yarn." not in err


def test_dynamic_note_at_s_1_does_not_say_more_than() -> None:
    rc, out, _ = _run(["inspect", "llama-2-7b", "--extend-to", "4096", "--compare", "dynamic", "--json"])
    note = json.loads(out)["views"][0]["notes"]["dynamic"]
    assert rc == 0 and "interpolated by 1, the same as s = 1" in note and "more than" not in note
    rep = compare_schemes(preset_spec("llama-2-7b"), context=4096, target=16384, schemes=("dynamic",))
    assert "interpolated by 13, more than s = 4" in rep["notes"]["dynamic"]


def test_compare_schemes_refuses_no_schemes() -> None:
    with pytest.raises(ValueError, match=r"schemes needs at least one scheme .*got \(\)"):
        compare_schemes(preset_spec("llama-2-7b"), context=4096, target=16384, schemes=())


def test_qwen_yarn_preset_is_used_at_the_context_it_is_for() -> None:
    p = get_preset("qwen2.5-7b-yarn")
    assert "128k" in p.description and p.context == 131_072
    sc = p.spec().scaling
    assert sc.factor * sc.original_max_position_embeddings == p.context  # type: ignore[union-attr]


def test_inspect_and_precision_read_a_model_folder(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(get_preset("llama-2-7b").config))
    for cmd in ("inspect", "precision"):
        rc, out, _ = _run([cmd, str(folder), "--json"])
        assert rc == 0 and json.loads(out)["source"] == str(folder / "config.json")
        assert out == _run([cmd, str(folder / "config.json"), "--json"])[1]
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, _, err = _run(["inspect", str(empty)])
    assert rc == 2 and "is a folder without config.json" in err
