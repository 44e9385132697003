"""Every CLI command on every preset (from the registry) and every scheme (from ropekit.scaling), text and JSON.

The JSON is checked against independent math: wavelength = 2*pi/theta, turns = span*theta/2*pi, theta against
the float32 recipe (which equals transformers' own init, tests/ropekit/analysis/test_recipe.py), the linear
column of --compare equal to s everywhere, YaRN's attention factor 0.1 ln s + 1.
"""

from __future__ import annotations

import inspect as pyinspect
import io
import json
import math
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

import ropekit.scaling
from ropekit import RopeSpec
from ropekit.analysis.precision import DEFAULT_POSITIONS
from ropekit.analysis.recipe import common_fp32_inv_freq
from ropekit.cli.main import main
from ropekit.presets import PRESETS
from ropekit.scaling import NTK, DynamicNTK, Linear, Llama3, LongRope, Scaling, Yarn

#: one representative spec per scheme class; the coverage test below fails when ropekit.scaling grows a class
SCHEME_SPECS: dict[type, RopeSpec] = {
    Linear: RopeSpec(64, base=1e4, scaling=Linear(4.0)),
    NTK: RopeSpec(64, base=1e4, scaling=NTK(factor=4.0)),
    DynamicNTK: RopeSpec(64, base=1e4, scaling=DynamicNTK(4.0, 2048)),
    Yarn: RopeSpec(64, base=1e4, scaling=Yarn(4.0, 2048)),
    LongRope: RopeSpec(
        8, base=1e4, scaling=LongRope((1.0, 1.5, 2.0, 3.0), (1.0, 2.0, 4.0, 8.0), 2048, factor=4.0)
    ),
    Llama3: RopeSpec(64, base=5e5, scaling=Llama3(4.0, 1.0, 4.0, 2048)),
}
#: the other spec features every command must handle
VARIANTS: dict[str, RopeSpec] = {
    "p-rope": RopeSpec(64, base=1e4, p=0.5),
    "proportional": RopeSpec(64, base=1e6, p=0.25, scaling=Linear(8.0)),
    "partial-rotary": RopeSpec(96, base=1e4, rotary_dim=24),
    "interleaved": RopeSpec(64, base=1e4, layout="interleaved"),
    "ntk-alpha": RopeSpec(64, base=1e4, scaling=NTK(alpha=2.0)),  # HunYuan
}


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _ok(argv: list[str]) -> str:
    rc, out, err = _run(argv)
    assert rc == 0, (argv, err)
    assert out.strip(), argv
    return out


def test_scheme_table_covers_every_scaling_class() -> None:
    classes = {
        obj
        for name in ropekit.scaling.__all__
        if pyinspect.isclass(obj := getattr(ropekit.scaling, name)) and issubclass(obj, Scaling)
    }
    assert classes - {Scaling} == set(SCHEME_SPECS), "add the new scheme to SCHEME_SPECS"


def _config_file(tmp_path: Path, name: str, spec: RopeSpec) -> str:
    hf = spec.to_hf()
    cfg = {"model_type": "llama", "max_position_embeddings": 8192, **hf}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    return str(path)


SOURCES = [f"preset:{n}" for n in PRESETS] + [f"scheme:{c.__name__}" for c in SCHEME_SPECS]
SOURCES += [f"variant:{n}" for n in VARIANTS]


def _source(kind_name: str, tmp_path: Path) -> tuple[str, list[RopeSpec | None]]:
    kind, name = kind_name.split(":")
    if kind == "preset":
        p = PRESETS[name]
        return name, [p.spec(t) for t in p.layer_types] if p.layer_types else [p.spec()]
    spec = SCHEME_SPECS[getattr(ropekit.scaling, name)] if kind == "scheme" else VARIANTS[name]
    return _config_file(tmp_path, name, spec), [spec]


def _check_bands(view: dict[str, Any]) -> None:
    span, spec = view["span"], view["spec"]
    for b in view["bands"]:
        t = b["theta"]
        if t > 0:
            assert b["wavelength"] == pytest.approx(2 * math.pi / t, rel=1e-12)
        else:
            assert b["wavelength"] is None
        assert b["rotations"] == pytest.approx(span * t / (2 * math.pi), rel=1e-12)
        assert b["wraps"] == (b["rotations"] >= 1)
    sm = view["summary"]
    assert sm["bands"] == len(view["bands"]) == spec["rotary_dim"] // 2
    assert sm["wrapping_bands"] == sum(b["wraps"] for b in view["bands"])
    a = spec["attention_factor"]
    assert sm["phase_error_ropekit"] < 1e-7 * a  # float32 rounding of the exact value
    assert sm["phase_error_common_fp32"] > sm["phase_error_ropekit"]


def _check_spec_base_and_axes(view: dict[str, Any], spec: RopeSpec, text: str) -> None:
    """Explicit frequency tables have no base (the field holds an unused default): none is printed or judged.
    Multi-axis specs list their band-to-axis map; the letters name each band's axis (first letter, upper case)."""
    s, sm = view["spec"], view["summary"]
    if spec.freqs is None and spec.p != 1.0:  # p-RoPE: zero-frequency bands, outside Men et al.'s bound
        assert s["base"] == spec.base and sm["base_meets_bound"] is None
        assert "not judged: p-RoPE" in text
    elif spec.freqs is None:
        assert s["base"] == spec.base and f"base={spec.base:g}" in text
        assert isinstance(sm["base_meets_bound"], bool)
    else:
        assert s["base"] is None and "freqs=explicit" in text and f"base={spec.base:g}" not in text
        assert "not judged: explicit frequencies" in text
        assert (
            sm["base_meets_bound"] is None
            and sm["critical_dim"] is None
            and sm["extrapolation_bound"] is None
        )
    if spec.axes is None:
        assert s["axes"] is None
    else:
        a = s["axes"]
        assert (a["scheme"], tuple(a["sections"]), tuple(a["names"])) == (
            spec.axes.scheme,
            spec.axes.sections,
            spec.axes.names,
        )
        assert len(a["letters"]) == spec.n_bands
        assert a["letters"] == AXIS_LETTERS[(spec.axes.scheme, spec.axes.sections, spec.axes.names)]


#: Each multi-axis layout's band letters, written from the model's own code, not from ropekit's AxisMap: Qwen2-VL /
#: Qwen2.5-VL / GLM-4.1V split the bands into consecutive t, h, w chunks (transformers' ``apply_multimodal_rotary_pos_emb``
#: concatenates ``mrope_section`` chunks); Qwen3-VL starts from t and overwrites bands 1, 4, ... < 3 * 20 with h and
#: 2, 5, ... with w (``apply_interleaved_mrope``), so the last 4 bands stay t; the 2-D vision towers (Pixtral, DINOv3,
#: Qwen2-VL's, Llama 4's, RoPE-ViT) and the axial video preset put the first axis in the first half (rows / x / t).
#: A new multi-axis preset fails here until its letters are written down.
AXIS_LETTERS: dict[tuple[str, tuple[int, ...], tuple[str, ...]], str] = {
    ("contiguous", (16, 24, 24), ("t", "h", "w")): "T" * 16 + "H" * 24 + "W" * 24,
    ("interleaved", (24, 20, 20), ("t", "h", "w")): "THW" * 20 + "TTTT",
    ("contiguous", (8, 12, 12), ("t", "h", "w")): "T" * 8 + "H" * 12 + "W" * 12,
    ("contiguous", (16, 16), ("x", "y")): "X" * 16 + "Y" * 16,
    ("contiguous", (16, 16), ("row", "col")): "R" * 16 + "C" * 16,
    ("contiguous", (22, 22), ("x", "y")): "X" * 22 + "Y" * 22,
    ("contiguous", (20, 20), ("row", "col")): "R" * 20 + "C" * 20,
    ("contiguous", (8, 12, 12), ("t", "row", "col")): "T" * 8 + "R" * 12 + "C" * 12,
}


@pytest.mark.parametrize("src", SOURCES)
def test_inspect_text_and_json(src: str, tmp_path: Path) -> None:
    source, specs = _source(src, tmp_path)
    text = _ok(["inspect", source])
    rep = json.loads(_ok(["inspect", source, "--json"]))
    views = rep["views"]
    assert len(views) == len(specs) and text.count("Summary") == len(views)
    for view, spec in zip(views, specs):
        assert spec is not None
        assert view["spec"]["head_dim"] == spec.head_dim and view["spec"]["rotary_dim"] == spec.rotary_dim
        assert view["spec"]["p"] == spec.p
        _check_spec_base_and_axes(view, spec, text)
        _check_bands(view)
        # theta after the scheme, at the span, against the float32 recipe (= transformers' own init)
        fp32 = common_fp32_inv_freq(spec, view["span"]).tolist()
        assert [b["theta"] for b in view["bands"]] == pytest.approx(fp32, rel=3e-6, abs=1e-30)
        if view["window"] is not None:
            assert view["span"] == min(view["window"], view["context"])
            assert f"window {view['window']:,} tokens" in text
        if spec.scaling is not None:
            assert f"scaling: {spec.scaling.to_hf()['rope_type']}" in text


@pytest.mark.parametrize("src", SOURCES)
def test_compare_default_target_and_extend_to(src: str, tmp_path: Path) -> None:
    source, _ = _source(src, tmp_path)
    _ok(["inspect", source, "--compare"])
    rep = json.loads(_ok(["inspect", source, "--compare", "--json"]))
    compared = [v for v in rep["views"] if "skipped" not in v]
    assert compared or all(v["window"] for v in rep["views"]), "full-attention layers are compared"
    for v in rep["views"]:
        if "skipped" in v:
            assert v["window"] is not None and "sliding window" in v["skipped"]
            continue
        L0, s = v["original_length"], v["factor"]
        # an extended model (context > L0) at its own context, an unscaled one at 4 x L0 (as the report)
        assert v["target"] == (v["context"] if v["context"] > L0 else 4 * L0) and s == pytest.approx(
            v["target"] / L0
        )
        assert all(b["linear"] == pytest.approx(s, rel=1e-12) for b in v["bands"] if b["theta"] > 0)
        # vision towers' explicit per-axis tables (ropekit.presets_vision) have no base for NTK / dynamic / YaRN
        na = v.get("not_applicable", {})
        assert set(na) <= {"ntk", "dynamic", "yarn"} and all("explicit freqs" in r for r in na.values())
        if "yarn" not in na:
            assert v["attention_factor"]["yarn"] == pytest.approx(0.1 * math.log(s) + 1 if s > 1 else 1.0)
        if "dynamic" not in na:
            assert "dynamic" in v["notes"] and f"{s * s - s + 1:.4g}" in v["notes"]["dynamic"]
    target = 2 * max([v["target"] for v in compared] or [PRESETS[source].context])
    rep = json.loads(_ok(["inspect", source, "--extend-to", str(target), "--json"]))
    assert all(v["target"] == target for v in rep["views"] if "skipped" not in v)


@pytest.mark.parametrize("src", SOURCES)
def test_precision_text_markdown_json(src: str, tmp_path: Path) -> None:
    source, specs = _source(src, tmp_path)
    text = _ok(["precision", source])
    md = _ok(["precision", source, "--markdown"])
    rep = json.loads(_ok(["precision", source, "--json"]))
    distinct = list(dict.fromkeys(specs))
    assert len(rep["views"]) == len(distinct)
    assert md.count("| position |") == len(distinct) and text.count("common fp32") == len(distinct)
    for table in rep["views"]:
        rows = table["results"]
        assert [r["position"] for r in rows] == list(DEFAULT_POSITIONS)
        a = table["spec"]["attention_factor"]
        assert all(r["ropekit"] < 1e-7 * a for r in rows)
        assert rows[-1]["common_fp32"] > 1e-2  # float32 products at 2^24 are off by radians' worth of ulps


def test_presets_text_and_json() -> None:
    text = _ok(["presets"])
    data = json.loads(_ok(["presets", "--json"]))
    assert [p["name"] for p in data] == list(PRESETS)
    for p in data:
        assert p["name"] in text and p["context"] == PRESETS[p["name"]].context
        assert [v["layer_type"] for v in p["views"]] == (list(p["layer_types"]) or [None])
        for v in p["views"]:
            cfg = PRESETS[p["name"]].config
            cfg = {**cfg, **cfg.get("text_config", {})}  # VL configs nest the text model's keys
            if v["window"] is not None:
                assert v["window"] == cfg.get("sliding_window")
            hd = (
                cfg.get("qk_rope_head_dim")
                or cfg.get("head_dim")
                or cfg["hidden_size"] // cfg["num_attention_heads"]
            )
            assert v["spec"]["head_dim"] == hd
