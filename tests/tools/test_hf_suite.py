"""tools/hf_suite: the pytest plugin patches models the tests build; the runner parses, compares and reports.

The plugin is checked on a model built here (oracle: the same model unpatched, transformers' own code); the
runner's parsing and comparison on hand-written pytest output with hand-labelled outcomes. The heavy part (running
transformers' own test files) is ``make test-hf-suite``, not this suite.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import unittest
import warnings
from pathlib import Path
from types import ModuleType

import pytest
import torch

transformers = pytest.importorskip("transformers")

SUITE = Path(__file__).resolve().parents[2] / "tools" / "hf_suite"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"hf_suite_{name}", SUITE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


plugin, run = _load("conftest_ropekit"), _load("run")


def _llama() -> torch.nn.Module:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.LlamaConfig(
            vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, initializer_range=0.5,
        )  # fmt: skip
        return transformers.LlamaForCausalLM(cfg).eval()


def test_plugin_patches_every_model_built_and_logits_stay_transformers() -> None:
    from transformers.modeling_utils import PreTrainedModel

    original = PreTrainedModel.post_init
    ref = _llama()
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(1))
    plugin.OUTCOMES.clear()
    try:
        plugin.patch_every_model()
        model = _llama()
    finally:
        PreTrainedModel.post_init = original  # type: ignore[method-assign]
    assert type(model.model.rotary_emb).__name__ == "Ropekit" + type(ref.model.rotary_emb).__name__
    assert type(ref.model.rotary_emb).__name__ == "LlamaRotaryEmbedding"  # built before: untouched
    assert plugin.OUTCOMES["patched"] >= 1
    with torch.no_grad():
        a, b = model(ids).logits, ref(ids).logits
    assert float((a - b).abs().max()) <= 1e-5 * float(b.abs().max())
    assert (
        _llama().model.rotary_emb.__class__.__name__ == "LlamaRotaryEmbedding"
    )  # restored: no longer patched


def test_stand_in_skips_the_test_that_calls_it_naming_the_missing_module() -> None:
    mod = plugin._stand_in("tests.some_absent_helper")
    with pytest.raises(unittest.SkipTest, match=r"tests\.some_absent_helper\.run_distributed is absent"):
        mod.run_distributed(1, 2)
    with pytest.raises(AttributeError):
        mod.__wrapped__  # noqa: B018 -- dunder lookups are not stood in for


OUTPUT = """\
tests/models/x/test_modeling_x.py::XTest::test_a PASSED                  [ 20%]
tests/models/x/test_modeling_x.py::XTest::test_b PASSED                  [ 40%]
tests/models/x/test_modeling_x.py::XTest::test_c SKIPPED (no GPU)        [ 60%]
tests/models/x/test_modeling_x.py::XTest::test_d_0_greedy FAILED         [ 80%]
tests/models/x/test_modeling_x.py::XTest::test_e
=========================== short test summary info ============================
FAILED tests/models/x/test_modeling_x.py::XTest::test_d_0_greedy - AssertionError: 1 != 2
ERROR tests/models/x/test_modeling_x.py::XTest::test_f - RuntimeError: boom
"""


def test_parse_reads_verbose_lines_and_the_summary() -> None:
    res, why = run.parse(OUTPUT)
    assert res == {
        "tests/models/x/test_modeling_x.py::XTest::test_a": "PASSED",
        "tests/models/x/test_modeling_x.py::XTest::test_b": "PASSED",
        "tests/models/x/test_modeling_x.py::XTest::test_c": "SKIPPED",
        "tests/models/x/test_modeling_x.py::XTest::test_d_0_greedy": "FAILED",
        "tests/models/x/test_modeling_x.py::XTest::test_f": "ERROR",
    }
    assert why["tests/models/x/test_modeling_x.py::XTest::test_d_0_greedy"] == "AssertionError: 1 != 2"
    assert run.count(res) == {"ERROR": 1, "FAILED": 1, "PASSED": 2, "SKIPPED": 1}


def test_regressions_are_passes_that_ran_patched_without_passing_unreached_ones_apart() -> None:
    base = {"a": "PASSED", "b": "PASSED", "c": "FAILED", "d": "PASSED", "e": "SKIPPED", "f": "PASSED"}
    ours = {"a": "PASSED", "b": "FAILED", "c": "PASSED", "e": "FAILED", "f": "ERROR"}
    assert run.regressions(base, ours) == ["b", "f"]
    assert run.not_reached(base, ours) == ["d"]


def test_matrix_is_written_between_the_markers_only(tmp_path: Path) -> None:
    doc = tmp_path / "hf.md"
    doc.write_text(f"intro\n{run.BEGIN}\nold table\n{run.END}\noutro\n")
    result = {
        "family": "x",
        "unpatched": {"PASSED": 2, "FAILED": 1, "SKIPPED": 3},
        "patched": {"PASSED": 1, "FAILED": 2, "SKIPPED": 3},
        "broken": {"t": "FAILED: boom"},
        "not_reached": ["u", "v"],
        "patched_status": "timeout after 9 s",
        "models": {"patched": 5},
    }
    table = run.matrix([result, {"family": "y", "status": "no tests/models/y/test_modeling_y.py"}], "src")
    run.write_docs(doc, table)
    text = doc.read_text()
    assert text.startswith("intro\n") and text.endswith("\noutro\n") and "old table" not in text
    assert (
        "| x | 2 / 1 / 3 | 1 / 2 / 3 | 1 (timeout after 9 s; 2 tests passing unpatched not reached patched) |"
        in text
    )
    assert "| y | no tests/models/y/test_modeling_y.py |" in text
    bare = tmp_path / "bare.md"
    bare.write_text("no markers\n")
    with pytest.raises(SystemExit, match="markers"):
        run.write_docs(bare, table)


def test_refusals_are_recorded_with_the_tests_they_came_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from transformers.modeling_utils import PreTrainedModel

    import ropekit.hf

    def refuse(model: torch.nn.Module) -> None:
        raise ValueError(
            "ropekit.hf.patch refuses this model (nothing was modified):\n  rotary_emb: some reason"
        )

    monkeypatch.setattr(ropekit.hf, "patch", refuse)
    original = PreTrainedModel.post_init
    plugin.OUTCOMES.clear()
    plugin.REFUSALS.clear()
    try:
        plugin.patch_every_model()
        for test in ("t.py::A::test_x", "t.py::A::test_x", "t.py::A::test_y"):
            plugin.pytest_runtest_setup(type("Item", (), {"nodeid": test})())
            _llama()
    finally:
        PreTrainedModel.post_init = original  # type: ignore[method-assign]
    (why,) = plugin.REFUSALS
    assert "some reason" in why and plugin.REFUSALS[why] == ["t.py::A::test_x", "t.py::A::test_y"]
    refused = sum(v for k, v in plugin.OUTCOMES.items() if k.startswith("refused"))
    assert refused == 6  # three builds, each a causal LM and its inner model
    log = tmp_path / "log.json"
    monkeypatch.setenv("ROPEKIT_PATCH_LOG", str(log))
    monkeypatch.setenv("ROPEKIT_PATCH", "1")
    plugin.pytest_unconfigure(None)
    assert json.loads(log.read_text())["_refusals"] == {why: ["t.py::A::test_x", "t.py::A::test_y"]}


def test_rows_of_families_not_rerun_are_kept_marked_as_earlier(tmp_path: Path) -> None:
    head = "| family | unpatched pass / fail / skip | patched pass / fail / skip | broken by the patch | models |\n"
    head += "|---|---|---|---|---|\n"
    old = f"src a\n\n{head}| llama | 1 / 0 / 0 | 1 / 0 / 0 | 0 | old |\n| phi | 2 / 0 / 0 | 2 / 0 / 0 | 0 | old |\n"
    new = f"src b\n\n{head}| phi | 3 / 0 / 0 | 3 / 0 / 0 | 0 | new |\n| gemma | 4 / 0 / 0 | 4 / 0 / 0 | 0 | new |\n"
    merged = run.merge_rows(old, new)
    rows = [ln for ln in merged.splitlines() if ln.startswith("| ") and "family" not in ln]
    assert rows == [
        "| gemma | 4 / 0 / 0 | 4 / 0 / 0 | 0 | new |",
        f"| llama {run.EARLIER} | 1 / 0 / 0 | 1 / 0 / 0 | 0 | old |",
        "| phi | 3 / 0 / 0 | 3 / 0 / 0 | 0 | new |",
    ]
    assert merged.startswith("src b\n") and merged.rstrip().endswith(
        "not stored in .cache/hf_suite/results/."
    )
    assert run.merge_rows(merged, new) == merged  # a second write changes nothing
    assert run.merge_rows(new, new) == new  # nothing earlier: no note


def test_a_selection_other_than_the_default_is_stored_beside_the_default_run() -> None:
    """``-k compil`` (transformers' compile tests) must not overwrite the family's default-selection result."""
    assert run.result_name("llama", run.DEFAULT_K) == "llama"
    assert run.result_name("llama", "compil") == "llama@compil"
    assert run.result_name("llama", None) == "llama@all"  # -k '': every test
    names = {run.result_name("llama", k) for k in (run.DEFAULT_K, "compil", "not compil and sdpa", None)}
    assert len(names) == 4
    old = "| llama | 1 / 0 / 0 | 1 / 0 / 0 | 0 | |"
    new = "| llama (-k 'compil') | 3 / 0 / 4 | 3 / 0 / 4 | 0 | |"
    header = "| family | a | b | c | d |\n|---|---|---|---|---|\n"
    merged = run.merge_rows(header + old, header + new)
    assert "| llama (-k 'compil') |" in merged and "| llama " + run.EARLIER in merged  # both rows kept
