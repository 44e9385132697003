"""Per-band ratios and attention factors of the scaling schemes against the schemes' published formulas."""

from __future__ import annotations

import math
import re

import pytest
import torch

from ropekit import RopeSpec
from ropekit.analysis.compare import (
    MODEL_ONLY,
    SCHEMES,
    compare_schemes,
    default_target,
    original_length,
)
from ropekit.analysis.rotations import turns
from ropekit.analysis.schemes import SCHEME_NAMES, scheme_table
from ropekit.presets import preset_spec
from ropekit.scaling import NTK, Linear


def test_linear_and_ntk_ratios() -> None:
    """PI divides every theta by s; NTK's base * s^(r/(r-2)) gives theta/theta'_i = s^(2i/(r-2))."""
    r, s = 64, 4.0
    t = scheme_table(RopeSpec(r), context=2048, target=8192)
    assert t.original_length == 2048 and t.factor == s
    assert t.ratio["linear"].tolist() == pytest.approx([s] * (r // 2), rel=1e-12)
    assert t.ratio["ntk"].tolist() == pytest.approx([s ** (2 * i / (r - 2)) for i in range(r // 2)], rel=1e-9)
    assert set(t.ratio) == set(SCHEME_NAMES)  # no model column for an unscaled spec


def test_yarn_attention_factor_and_ramp_ends() -> None:
    """YaRN (Peng et al. 2023): attention factor 0.1 ln s + 1; fast bands untouched, slow bands interpolated."""
    t = scheme_table(RopeSpec(128), context=4096, target=32768)
    assert t.attention_factor["yarn"] == pytest.approx(0.1 * math.log(8) + 1, rel=1e-12)
    assert t.ratio["yarn"][0].item() == pytest.approx(1.0, rel=1e-12)
    assert t.ratio["yarn"][-1].item() == pytest.approx(8.0, rel=1e-12)
    assert t.attention_factor["linear"] == 1.0


def test_llama3_bands_and_model_column() -> None:
    """Llama 3: bands with wavelength < L0/4 keep theta (ratio 1); wavelength > L0 are divided by s."""
    t = scheme_table(preset_spec("llama-3.1-8b"), context=131072, target=131072)
    own = t.ratio["model:Llama3"]
    assert t.factor == 16.0  # 131072 / 8192
    for wl, r_own, r_l3 in zip(t.wavelength.tolist(), own.tolist(), t.ratio["llama3"].tolist()):
        if wl < 8192 / 4:
            assert r_own == pytest.approx(1.0) and r_l3 == pytest.approx(1.0)
        elif wl > 8192:
            assert r_own == pytest.approx(8.0) and r_l3 == pytest.approx(16.0)


def test_target_below_original_length_is_refused() -> None:
    for fn in (scheme_table, compare_schemes):
        with pytest.raises(ValueError, match="target=4096 is below the model's original length 8192"):
            fn(preset_spec("llama-3.1-8b"), context=131072, target=4096)


def test_unknown_scheme_is_refused() -> None:
    for fn in (scheme_table, compare_schemes):
        with pytest.raises(
            ValueError, match="unknown scheme 'pi' in schemes; known: linear, ntk, .*, longrope"
        ):
            fn(RopeSpec(8), context=16, target=64, schemes=("pi",))
        with pytest.raises(ValueError, match="schemes names a scheme twice"):
            fn(RopeSpec(8), context=16, target=64, schemes=("yarn", "yarn"))
        with pytest.raises(ValueError, match="schemes must be a tuple of scheme names, got 'yarn'"):
            fn(RopeSpec(8), context=16, target=64, schemes="yarn")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -5, 3.5, True, "4096"])
def test_context_is_validated(bad: object) -> None:
    """context 0 was a ZeroDivisionError, -5 a Linear.factor error, 3.5 accepted."""
    for fn in (scheme_table, compare_schemes):
        with pytest.raises(ValueError, match=f"context must be a positive int, got {bad!r}"):
            fn(RopeSpec(8), context=bad, target=1024)  # type: ignore[arg-type]
    for fn2 in (default_target, original_length):
        with pytest.raises(ValueError, match=f"context must be a positive int, got {bad!r}"):
            fn2(RopeSpec(8), bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [400.5, "400", None, 0, True])
def test_target_is_validated_by_name(bad: object) -> None:
    """target 400.5 said "seq_len must be ...", '400' raised a TypeError from '<'; the Python API names target,
    not the CLI's --extend-to."""
    for fn in (scheme_table, compare_schemes):
        with pytest.raises(ValueError, match=f"target must be a positive int, got {bad!r}") as e:
            fn(RopeSpec(8), context=16, target=bad)  # type: ignore[arg-type]
        assert "--" not in str(e.value)


def test_a_command_line_can_name_its_flags() -> None:
    """compare_schemes(names=...) lets `ropekit inspect` say --extend-to / --compare instead of the Python names."""
    flags = {"context": "--context", "target": "--extend-to", "schemes": "--compare"}
    spec = preset_spec("llama-2-7b")
    for kw, message in [
        ({"target": 1000}, "--extend-to=1000 is below the model's original length 4096"),
        ({"target": 8192, "schemes": ("magic",)}, "unknown scheme 'magic' in --compare"),
        ({"target": 8192, "schemes": ("yarn", "yarn")}, "--compare names a scheme twice"),
        ({"target": 8192, "schemes": ("longrope",)}, "(--compare=('longrope',))"),
        ({"target": 8192, "context": 0}, "--context must be a positive int, got 0"),
    ]:
        args = {"context": 4096, "schemes": SCHEMES, **kw}
        with pytest.raises(ValueError, match=re.escape(message)):
            compare_schemes(spec, names=flags, **args)  # type: ignore[arg-type]


def test_turns_length_is_validated() -> None:
    theta = torch.tensor([1.0, 0.5], dtype=torch.float64)
    assert turns(theta, 4).tolist() == pytest.approx([4 / (2 * math.pi), 2 / (2 * math.pi)], rel=1e-15)
    for bad in (-5, 0, 2.5, True):
        with pytest.raises(ValueError, match=f"length must be a positive int, got {bad!r}"):
            turns(theta, bad)  # type: ignore[arg-type]


def test_both_tables_agree_on_an_explicit_frequency_table() -> None:
    """A vision tower's explicit freqs: NTK, dynamic NTK and YaRN are defined from a base, so both tables leave
    them out with the spec's reason (compare_schemes used to raise where scheme_table listed them)."""
    spec = preset_spec("rope-vit-b16")
    table = scheme_table(spec, context=196, target=784)
    rep = compare_schemes(spec, context=196, target=784)
    assert set(table.not_applicable) == set(rep["not_applicable"]) == {"ntk", "dynamic", "yarn"}
    assert all("explicit freqs" in why for why in rep["not_applicable"].values())
    assert list(table.ratio) == rep["schemes"] == ["linear", "llama3"]
    for name in rep["schemes"]:
        assert [b[name] for b in rep["bands"]] == pytest.approx(table.ratio[name].tolist(), rel=1e-12)
    assert all(b["linear"] == pytest.approx(4.0, rel=1e-12) for b in rep["bands"])  # PI: s = 784 / 196


def test_both_tables_agree_on_longrope() -> None:
    """'longrope' names the model's own column: accepted by both for a LongRoPE spec (it adds no column next to
    model:LongRope), refused by both otherwise (scheme_table used to refuse it always)."""
    phi = preset_spec("phi-3-mini-128k")
    table = scheme_table(phi, context=131072, target=131072, schemes=("linear", "longrope"))
    rep = compare_schemes(phi, context=131072, target=131072, schemes=("linear", "longrope"))
    assert list(table.ratio) == rep["schemes"] == ["model:LongRope", "linear"]
    assert "not_applicable" not in rep and table.not_applicable == {}
    for fn in (scheme_table, compare_schemes):
        with pytest.raises(ValueError, match="longrope needs the model's own per-band factors"):
            fn(RopeSpec(64), context=4096, target=8192, schemes=("longrope",))
    assert SCHEME_NAMES == SCHEMES and "longrope" in MODEL_ONLY and "longrope" not in SCHEMES


def test_original_length_of_factor_only_schemes() -> None:
    """Linear(4) (and NTK's factor) at context 8192 means a model pretrained at 2048 (it used to be 8192)."""
    assert original_length(RopeSpec(8, scaling=Linear(4.0)), 8192) == 2048
    assert original_length(RopeSpec(8, scaling=NTK(factor=2.0)), 8192) == 4096
    assert original_length(RopeSpec(8, scaling=NTK(alpha=2.0)), 8192) == 8192  # alpha is not a length ratio
    assert original_length(RopeSpec(8, scaling=Linear(3.0)), 100) == 33
    assert original_length(RopeSpec(8), 8192) == 8192
    assert default_target(RopeSpec(8, scaling=Linear(4.0)), 8192) == 8192  # the model's own extension
    # extended 2x (L0 = 4096 < context = 8192 < 4 L0): still its own context, where s is its own factor (inspect
    # used 4 L0 here while the report used the context: one rule for both now)
    assert default_target(RopeSpec(8, scaling=Linear(2.0)), 8192) == 8192
    assert default_target(RopeSpec(8), 8192) == 4 * 8192  # unscaled: a 4x extension
    t = scheme_table(RopeSpec(8, scaling=Linear(4.0)), context=8192, target=8192)
    assert t.factor == 4.0 and t.ratio["model:Linear"].tolist() == pytest.approx([4.0] * 4, rel=1e-12)


def test_dynamic_ntk_at_the_target_follows_hfs_formula() -> None:
    """HF dynamic NTK with factor s at length T = s L0: base * (s T / L0 - (s - 1))^(r/(r-2)), i.e. an NTK factor
    of s^2 - s + 1 -- it stretches more than static NTK at the same target."""
    r, s = 64, 4.0
    t = scheme_table(RopeSpec(r), context=2048, target=8192)
    alpha = s * s - s + 1
    assert t.ratio["dynamic"].tolist() == pytest.approx(
        [alpha ** (2 * i / (r - 2)) for i in range(r // 2)], rel=1e-9
    )
