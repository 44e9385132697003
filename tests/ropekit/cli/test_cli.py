"""The command line: ropekit inspect / precision, as console script, module and function."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from ropekit.cli.main import main


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_inspect_default_json() -> None:
    rc, out, _ = _run(["inspect", "--json"])
    assert rc == 0
    full = json.loads(out)
    assert full["source"] is None and len(full["views"]) == 1
    rep = full["views"][0]
    assert rep["spec"] == {
        "head_dim": 128,
        "rotary_dim": 128,
        "base": 500000.0,
        "layout": "half",
        "p": 1.0,
        "positional_bands": 64,
        "freqs": None,
        "scaling": None,
        "attention_factor": 1.0,
        "axes": None,
    }
    assert rep["context"] == 131072 and len(rep["bands"]) == 64
    b0 = rep["bands"][0]
    assert (
        b0["theta"] == 1.0
        and b0["wraps"] is True
        and b0["rotations"] == pytest.approx(131072 / (2 * 3.141592653589793))
    )
    sm = rep["summary"]
    # Liu et al.: 2 * ceil(64 * ln(131072 / 2pi) / ln(5e5)) = 2 * ceil(48.51) = 98
    assert sm["critical_dim"] == 2 * sm["wrapping_bands"] == 98
    assert sm["phase_error_ropekit"] < 6e-8  # half a float32 ulp near 1
    assert sm["phase_error_common_fp32"] > 1e-3
    assert sm["base_lower_bound"] > 500000 and sm["base_meets_bound"] is False


def test_inspect_table_is_readable() -> None:
    rc, out, _ = _run(["inspect", "--head-dim", "8", "--base", "10000", "--context", "4096"])
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].startswith("RoPE head_dim=8 rotary_dim=8 base=10000")
    assert any(line.split()[:5] == ["3", "1.0000e-03", "6283", "0.6519", "no"] for line in lines)
    assert "critical dimension (Liu et al. 2024)" in out and "d_extra = 6 of 8" in out
    assert "common float32 recipe" in out


def test_bad_arguments_exit_2_with_the_field() -> None:
    rc, _, err = _run(["inspect", "--head-dim", "7"])
    assert rc == 2 and "--head-dim" in err and "7" in err
    rc, _, err = _run(["inspect", "--context", "0"])
    assert rc == 2 and "context" in err


def test_precision_markdown() -> None:
    rc, out, _ = _run(["precision", "--markdown", "--positions", "1e3,1e6"])
    assert rc == 0
    rows = out.strip().splitlines()
    assert (
        rows[0].startswith("| position |")
        and rows[2].startswith("| 1,000 |")
        and rows[3].startswith("| 1,000,000 |")
    )


def test_module_and_console_script() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "ropekit", "inspect", "--head-dim", "8", "--context", "64", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(r.stdout)["views"][0]["context"] == 64
    script = Path(sys.executable).with_name("ropekit")
    if not script.exists():
        pytest.skip("console script not installed in this environment")
    r = subprocess.run([str(script)], capture_output=True, text=True, check=True, env={**os.environ})
    assert "inspect" in r.stdout and "precision" in r.stdout
    r = subprocess.run(
        [str(script), "presets", "--json"], capture_output=True, text=True, check=True, env={**os.environ}
    )
    assert "gemma-3-4b" in [p["name"] for p in json.loads(r.stdout)] and r.stderr == ""


def test_presets_command_lists_them() -> None:
    rc, out, _ = _run(["presets"])
    assert rc == 0 and "llama-3.1-8b" in out and "gemma-3-4b" in out and "layer types" in out


def test_inspect_preset_and_config_file(tmp_path: Path) -> None:
    rc, out, _ = _run(["inspect", "gemma-3-4b", "--layer-type", "sliding_attention", "--json"])
    (rep,) = json.loads(out)["views"]
    assert rc == 0 and rep["spec"]["base"] == 10000.0 and rep["context"] == 131072 and rep["span"] == 1024
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 512,
                "num_attention_heads": 8,
                "max_position_embeddings": 2048,
                "rope_theta": 10000.0,
            }
        )
    )
    rc, out, _ = _run(["inspect", str(cfg), "--json"])
    (rep,) = json.loads(out)["views"]
    assert rc == 0 and rep["spec"]["head_dim"] == 64 and rep["context"] == 2048
    rc, _, err = _run(["inspect", "llama-2-7b", "--base", "5"])
    assert rc == 2 and "--base cannot be combined" in err
    rc, _, err = _run(["inspect", "no-such-model"])
    assert rc == 2 and "no such file or folder, and not a preset" in err


def test_inspect_extend_compare() -> None:
    rc, out, _ = _run(
        ["inspect", "llama-2-7b", "--extend-to", "32768", "--compare", "linear,ntk,yarn,llama3", "--json"]
    )
    assert rc == 0
    (rep,) = json.loads(out)["views"]
    assert rep["factor"] == 8.0 and rep["schemes"] == ["linear", "ntk", "yarn", "llama3"]
    first, last = rep["bands"][0], rep["bands"][-1]
    assert (
        first["linear"] == pytest.approx(8) and first["yarn"] == 1 and first["llama3"] == 1
    )  # fast band kept
    assert (
        last["linear"] == pytest.approx(8)
        and last["yarn"] == pytest.approx(8)
        and last["llama3"] == pytest.approx(8)
    )
    assert last["ntk"] == pytest.approx(8 ** (126 / 126), rel=1e-9)  # NTK interpolates the slowest band by ~s
    assert rep["attention_factor"]["yarn"] == pytest.approx(0.1 * __import__("math").log(8) + 1)
    rc, out, _ = _run(["inspect", "llama-3.1-8b", "--extend-to", "131072"])
    assert rc == 0 and "model:Llama3" in out and "attn factor" in out
    rc, _, err = _run(["inspect", "llama-2-7b", "--extend-to", "1000"])
    assert rc == 2 and "below the model's original length" in err
    rc, _, err = _run(["inspect", "llama-2-7b", "--extend-to", "8192", "--compare", "magic"])
    assert rc == 2 and "unknown scheme 'magic'" in err


def test_gemma3_shows_both_layer_types_and_the_linear_x8() -> None:
    rc, out, _ = _run(["inspect", "gemma-3-4b"])
    assert rc == 0
    sliding, full = out.split("== layer type full_attention")
    assert "== layer type sliding_attention (29 layers): window 1,024 tokens" in sliding
    assert "base=10000" in sliding and "at span 1,024" in sliding and "scaling:" not in sliding
    assert "(5 layers)" in full and "base=1e+06" in full and "scaling: linear (factor=8)" in full
    # sliding bands judged at the window: band 0 turns 1024 / 2pi times
    rc, out, _ = _run(["inspect", "gemma-3-4b", "--json"])
    s, f = json.loads(out)["views"]
    assert s["bands"][0]["rotations"] == pytest.approx(1024 / (2 * math.pi))
    assert f["bands"][0]["rotations"] == pytest.approx(131072 / 8 / (2 * math.pi))  # theta_0 = 1 / 8
    assert f["spec"]["scaling"] == {"rope_type": "linear", "factor": 8.0}


def test_gpt_oss_sliding_layers_judged_at_128() -> None:
    rc, out, _ = _run(["inspect", "gpt-oss-20b", "--layer-type", "sliding_attention", "--json"])
    (v,) = json.loads(out)["views"]
    assert rc == 0 and v["span"] == 128 and v["layers"] == 12 and v["spec"]["scaling"]["rope_type"] == "yarn"


def test_compare_without_extend_to_uses_the_documented_default() -> None:
    rc, out, _ = _run(["inspect", "llama-2-7b", "--compare", "linear", "--json"])
    (v,) = json.loads(out)["views"]
    assert rc == 0 and v["target"] == 4 * 4096 and v["schemes"] == ["linear"]
    rc, out, _ = _run(["inspect", "llama-3.1-8b", "--compare", "--json"])  # scaled model: its own 128k
    (v,) = json.loads(out)["views"]
    assert v["original_length"] == 8192 and v["target"] == 131072 and "model:Llama3" in v["schemes"]
    rc, out, _ = _run(["inspect", "llama-2-7b", "--compare"])
    assert "s^2 - s + 1 = 13" in out  # the dynamic column explained


def test_scheme_flags() -> None:
    rc, out, _ = _run(["inspect", "--scaling", "yarn", "--factor", "4", "--context", "8192", "--json"])
    (v,) = json.loads(out)["views"]
    assert rc == 0 and v["spec"]["scaling"]["original_max_position_embeddings"] == 2048  # context / factor
    assert v["spec"]["attention_factor"] == pytest.approx(0.1 * math.log(4) + 1)
    for argv, words in [
        (["inspect", "--factor", "4"], ["--factor needs --scaling"]),
        (["inspect", "--scaling", "yarn"], ["--scaling yarn needs --factor"]),
        (["inspect", "--scaling", "linear", "--factor", "0.5"], ["--factor", "0.5"]),
        (["inspect", "--scaling", "ntk", "--factor", "2", "--original-length", "8"], ["no effect", "ntk"]),
        (["precision", "--json", "--markdown"], ["exclusive"]),
        (["precision", "--positions", "1.5"], ["--positions", "1.5"]),
        (
            ["inspect", "llama-2-7b", "--layer-type", "sliding_attention"],
            ["single kind", "sliding_attention"],
        ),
        (["inspect", "gemma-3-4b", "--layer-type", "local"], ["'local'", "full_attention"]),
        (["inspect", "--layer-type", "full_attention"], ["--layer-type needs"]),
        (["inspect", "llama-2-7b", "--compare", "longrope"], ["longrope", "per-band factors"]),
        (["inspect", "llama-2-7b", "--compare", ","], ["at least one scheme"]),
        (["inspect", "llama-2-7b", "--compare", "yarn,yarn"], ["twice", "yarn,yarn"]),
    ]:
        rc, _, err = _run(argv)
        assert rc == 2 and all(w in err for w in words), (argv, err)


def test_bad_config_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    rc, _, err = _run(["inspect", str(bad)])
    assert rc == 2 and "not valid JSON" in err
    bad.write_text("[1, 2]")
    rc, _, err = _run(["precision", str(bad)])
    assert rc == 2 and "JSON object" in err


def test_multimodal_config_reads_its_text_config(tmp_path: Path) -> None:
    """A Gemma 3 4B config.json nests the language model's keys under text_config."""
    from ropekit.presets import PRESETS

    text = dict(PRESETS["gemma-3-4b"].config)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "gemma3", "text_config": text}))
    rc, out, err = _run(["inspect", str(cfg), "--json"])
    assert rc == 0, err
    s, f = json.loads(out)["views"]
    assert (s["span"], s["spec"]["base"], f["spec"]["scaling"]) == (
        1024,
        1e4,
        {"rope_type": "linear", "factor": 8.0},
    )


def test_precision_flags_positions_the_float64_reference_cannot_resolve() -> None:
    rc, out, _ = _run(["precision", "--positions", "1e6,1e12", "--window", "4"])
    lines = out.splitlines()
    assert rc == 0 and not lines[2].endswith("*") and lines[3].endswith("*")
    # 1e12 * theta_0 (= 1) * 2^-53 = 1.1e-4
    assert "accurate to about 1.1e-04" in out


def test_dynamic_ntk_shows_the_length_it_starts_from() -> None:
    """Dynamic NTK's starting length is a top-level config key, not part of its rope_scaling fragment: inspect
    printed "dynamic (factor=4)" for two different schemes (the user trial). Now the header and the JSON say it."""
    texts, lengths = [], []
    for extra in ([], ["--original-length", "2048"]):
        rc, out, _ = _run(["inspect", "--scaling", "dynamic", "--factor", "4", "--context", "32768", *extra])
        assert rc == 0
        texts.append(next(line for line in out.splitlines() if line.startswith("scaling:")))
        rc, out, _ = _run(
            ["inspect", "--scaling", "dynamic", "--factor", "4", "--context", "32768", "--json", *extra]
        )
        lengths.append(json.loads(out)["views"][0]["spec"]["scaling"]["max_position_embeddings"])
    assert lengths[1] == 2048 and lengths[0] != 2048
    assert texts[0] != texts[1] and "max_position_embeddings=2048" in texts[1]


def test_long_contexts_skip_the_base_bound_scan_and_huge_ones_are_refused() -> None:
    """The exact base-bound scan grows with the length (8.5 s at 2^20 here, never finishing at 1e29 before): above
    BOUND_SCAN_MAX it is shown as not judged, with the rest of inspect; --context above 2^53 is refused at once,
    for inspect and report (report used to raise OverflowError after resolving the source)."""
    from ropekit.cli.inspect_cmd import BOUND_SCAN_MAX

    rc, out, _ = _run(["inspect", "--json", "--head-dim", "8", "--context", str(BOUND_SCAN_MAX + 1)])
    assert rc == 0
    sm = json.loads(out)["views"][0]["summary"]
    assert (
        sm["base_bound_scanned"] is False
        and sm["base_lower_bound"] is None
        and sm["base_meets_bound"] is None
    )
    rc, out, _ = _run(["inspect", "--head-dim", "8", "--context", str(BOUND_SCAN_MAX + 1)])
    assert rc == 0 and "not computed" in out and "not judged: the exact scan" in out
    rc, out, _ = _run(["inspect", "--json", "--head-dim", "8", "--base", "10000", "--context", "4096"])
    assert json.loads(out)["views"][0]["summary"]["base_bound_scanned"] is True
    for cmd in (["inspect"], ["report", "llama-2-7b", "--out", "unused-dir"]):
        rc, _, err = _run([*cmd, "--context", str(10**29)])
        assert rc == 2 and "--context" in err and str(10**29) in err
