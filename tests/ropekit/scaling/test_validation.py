"""Bad scheme parameters are refused by name; NTK's config names and YaRN's ramp are what their docs say
(transformers 5.x is the oracle)."""

from __future__ import annotations

import math
import re
import warnings

import pytest
import torch

from ropekit import RopeSpec
from ropekit.scaling import NTK, LongRope, Yarn, mla_softmax_scale, yarn_correction_range, yarn_mscale

_SHORT, _LONG = (1.0,) * 4, (2.0,) * 4


@pytest.mark.parametrize("bad", [-1, 0, "x", 2.5, True])
def test_longrope_max_position_embeddings_is_validated(bad: object) -> None:
    with pytest.raises(
        ValueError,
        match=r"LongRope.max_position_embeddings must be a positive int, got " + re.escape(repr(bad)),
    ):
        LongRope(_SHORT, _LONG, 4096, max_position_embeddings=bad)  # type: ignore[arg-type]


def test_longrope_factor_from_lengths_must_extend() -> None:
    """max 2048 < L0 4096 gave s = 0.5, a factor < 1 that LongRope(factor=0.5) refuses."""
    with pytest.raises(
        ValueError, match="max_position_embeddings must be >= original_max_position_embeddings"
    ):
        LongRope(_SHORT, _LONG, 4096, max_position_embeddings=2048)
    with pytest.raises(ValueError, match="LongRope.factor must be a finite number >= 1, got 0.5"):
        LongRope(_SHORT, _LONG, 4096, factor=0.5)
    sc = LongRope(_SHORT, _LONG, 4096, max_position_embeddings=16384)
    assert sc.scale_factor == 4.0
    assert sc.attention_factor == pytest.approx(math.sqrt(1 + math.log(4) / math.log(4096)), rel=1e-15)


def test_longrope_attention_factor_and_factor_lists() -> None:
    """attention_factor 0 was accepted (Yarn refuses it); a string was read as a list of its characters."""
    with pytest.raises(ValueError, match="LongRope.attention_factor must be a finite number > 0, got 0"):
        LongRope(_SHORT, _LONG, 4096, factor=4.0, attention_factor_=0.0)
    with pytest.raises(ValueError, match="Yarn.attention_factor must be a finite number > 0"):
        Yarn(4.0, 4096, attention_factor_=0.0)
    for bad in ("1111", b"1111", (1.0, True, 1.0, 1.0), (1.0, "2", 1.0, 1.0), 4.0):
        with pytest.raises(ValueError, match="LongRope.short_factor must be a list of finite numbers > 0"):
            LongRope(bad, _LONG, 4096, factor=4.0)  # type: ignore[arg-type]
    assert LongRope([1, 2, 3, 4], _LONG, 4096, factor=4.0).short_factor == (1.0, 2.0, 3.0, 4.0)


def test_yarn_helpers_validate_their_arguments() -> None:
    """base 1 was a ZeroDivisionError, original_max 0 a math domain error, qk_head_dim 0 a ZeroDivisionError,
    yarn_mscale(-1) a silent 1.0."""
    cases = [
        (
            lambda: yarn_correction_range(32, 1, 128, 1.0, 4096),
            "yarn_correction_range.base must be a finite number > 1",
        ),
        (
            lambda: yarn_correction_range(32, 1, 128, 1e4, 0),
            "yarn_correction_range.original_max must be a positive int",
        ),
        (
            lambda: yarn_correction_range(32, 1, 127, 1e4, 4096),
            "yarn_correction_range.rotary_dim must be a positive even",
        ),
        (
            lambda: yarn_correction_range(0, 1, 128, 1e4, 4096),
            "yarn_correction_range.beta_fast must be a finite number > 0",
        ),
        (lambda: yarn_correction_range(1, 32, 128, 1e4, 4096), "beta_fast must be >= beta_slow"),
        (lambda: mla_softmax_scale(0, 40, 1), "mla_softmax_scale.qk_head_dim must be a positive int, got 0"),
        (
            lambda: mla_softmax_scale(192, math.nan, 1),
            "mla_softmax_scale.factor must be a finite number >= 1",
        ),
        (
            lambda: mla_softmax_scale(192, 40, -1.0),
            "mla_softmax_scale.mscale_all_dim must be a finite number >= 0",
        ),
        (lambda: yarn_mscale(-1), "yarn_mscale.scale must be a finite number > 0, got -1"),
        (lambda: yarn_mscale(4.0, math.inf), "yarn_mscale.mscale must be a finite number >= 0"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            call()

    # the formulas themselves, in Python floats (YaRN's correction dim; DeepSeek's softmax scale)
    def dim(n_rot: float) -> float:
        return 128 * math.log(4096 / (n_rot * 2 * math.pi)) / (2 * math.log(1e4))

    assert yarn_correction_range(32, 1, 128, 1e4, 4096) == (math.floor(dim(32)), math.ceil(dim(1)))
    assert yarn_correction_range(32, 1, 128, 1e4, 4096, truncate=False) == (dim(32), dim(1))
    assert mla_softmax_scale(192, 40, 1.0) == pytest.approx(
        192**-0.5 * (0.1 * math.log(40) + 1) ** 2, rel=1e-15
    )
    assert yarn_mscale(0.5) == 1.0 and yarn_mscale(8.0, 0.707) == pytest.approx(0.0707 * math.log(8) + 1)


def test_yarn_ramp_is_transformers_not_the_papers() -> None:
    """The docstring's claim: inv_freq follows transformers' band-index ramp between the rounded correction dims,
    which differs from Peng et al.'s ramp linear in r = L0 / lambda between beta_slow and beta_fast."""
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    s, L0, d, base = 8, 4096, 128, 1e4
    rope = {
        "rope_type": "yarn",
        "factor": float(s),
        "original_max_position_embeddings": L0,
        "rope_theta": base,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.LlamaConfig(
            hidden_size=4 * d,
            num_attention_heads=4,
            head_dim=d,
            max_position_embeddings=s * L0,
            rope_parameters=rope,
        )
        hf, _ = ROPE_INIT_FUNCTIONS["yarn"](cfg, None, None)
    ours = RopeSpec(d, base=base, scaling=Yarn(s, L0)).frequencies()
    torch.testing.assert_close(ours.float(), hf, rtol=5e-7, atol=0)
    theta = base ** (-torch.arange(d // 2, dtype=torch.float64) * 2 / d)
    r = L0 * theta / (2 * math.pi)  # rotations of each band inside L0
    gamma = ((r - 1.0) / (32.0 - 1.0)).clamp(0, 1)  # the paper: 1 keeps the band, 0 interpolates it
    paper = theta * (gamma + (1 - gamma) / s)
    assert float((ours / paper - 1).abs().max()) > 0.05


def test_ntk_config_names_are_not_transformers() -> None:
    """NTK's docs: transformers has no 'ntk' or 'ntk_alpha' type (a Llama config with the fragment fails to
    load), only HunYuan's rotary module knows ntk_alpha; the documented plain equivalent loads and matches."""
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.hunyuan_v1_dense.modeling_hunyuan_v1_dense import HunYuanDenseV1RotaryEmbedding
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    assert "ntk" not in ROPE_INIT_FUNCTIONS and "ntk_alpha" not in ROPE_INIT_FUNCTIONS
    kw = {"hidden_size": 32, "num_attention_heads": 4, "head_dim": 8, "max_position_embeddings": 4096}
    spec, alpha = RopeSpec(8, scaling=NTK(factor=2.0)), RopeSpec(8, scaling=NTK(alpha=2.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for frag in (spec.to_hf(), alpha.to_hf()):
            with pytest.raises(KeyError):
                LlamaRotaryEmbedding(transformers.LlamaConfig(**kw, rope_parameters=frag["rope_parameters"]))
        hy = HunYuanDenseV1RotaryEmbedding(
            transformers.HunYuanDenseV1Config(**kw, rope_parameters=alpha.to_hf()["rope_parameters"])
        )
        plain = {
            "rope_type": "default",
            "rope_theta": NTK(factor=2.0).effective_base(1e4, rotary_dim=8, seq_len=None),
        }
        llama = LlamaRotaryEmbedding(transformers.LlamaConfig(**kw, rope_parameters=plain))
    torch.testing.assert_close(hy.inv_freq, alpha.inv_freq(), rtol=5e-7, atol=0)
    torch.testing.assert_close(llama.inv_freq, spec.inv_freq(), rtol=5e-7, atol=0)
    assert RopeSpec.from_hf(spec.to_hf()) == spec and RopeSpec.from_hf(alpha.to_hf()) == alpha


@pytest.mark.parametrize("truncate", ["no", None, 1])
def test_yarn_correction_range_truncate_must_be_a_bool(truncate: object) -> None:
    """The user trial: 'no' was taken as True and None as False."""
    from ropekit.scaling.yarn import yarn_correction_range

    with pytest.raises(TypeError, match=r"truncate must be True or False, got"):
        yarn_correction_range(32.0, 1.0, 128, 1e4, 4096, truncate)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["linear", "ntk", "yarn"])
def test_build_scheme_checks_original_len_for_every_scheme(name: str) -> None:
    from ropekit.analysis.compare import build_scheme

    with pytest.raises(ValueError, match=r"original_len must be a positive int, got 'abc'"):
        build_scheme(name, 2.0, "abc")  # type: ignore[arg-type]


def test_numpy_scalars_are_numbers() -> None:
    """np.float64 was accepted (a float subclass) but np.float32 refused as "not a finite number" (the user trial);
    numpy numbers are accepted and stored as Python numbers (JSON-serialisable), numpy bools refused."""
    import json

    import numpy as np

    from ropekit.scaling import Linear, Yarn

    for x in (np.float32(2.0), np.float64(2.0), np.int64(2)):
        lin = Linear(x)  # type: ignore[arg-type]
        assert lin.factor == 2.0 and type(lin.factor) is float
    assert Yarn(np.float32(4.0), 4096).factor == 4.0  # type: ignore[arg-type]
    json.dumps(Linear(np.float32(2.0)).to_hf())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be a finite number >= 1, got"):
        Linear(np.bool_(True))  # type: ignore[arg-type]


def test_longrope_lengths_take_numpy_integers() -> None:
    """LongRope refused np.int64 for original_max_position_embeddings (the trial) while DynamicNTK, Yarn and Llama3
    took it. Now the same scheme as from Python ints (stored as int: equal, same hash, JSON-serialisable to_hf), and
    its attention factor is the formula's (oracle: sqrt(1 + ln s / ln L0) in Python float64)."""
    import json

    import numpy as np

    got = LongRope(_SHORT, _LONG, np.int64(4096), max_position_embeddings=np.int32(16384))  # type: ignore[arg-type]
    want = LongRope(_SHORT, _LONG, 4096, max_position_embeddings=16384)
    assert got == want and hash(got) == hash(want)
    assert type(got.original_max_position_embeddings) is int and type(got.max_position_embeddings) is int
    assert got.attention_factor == math.sqrt(1 + math.log(16384 / 4096) / math.log(4096))
    json.dumps(got.to_hf())
    with pytest.raises(
        ValueError, match=r"LongRope.original_max_position_embeddings must be an int >= 2, got np.int64\(1\)$"
    ):
        LongRope(_SHORT, _LONG, np.int64(1), factor=2.0)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"LongRope.original_max_position_embeddings must be an int >= 2, got True"
    ):
        LongRope(_SHORT, _LONG, True, factor=2.0)  # type: ignore[arg-type]


_HUGE = 10**400
_SHOWN = re.escape("10000000...0000 (401 digits)")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: _linear(_HUGE), r"^Linear\.factor must be a finite number >= 1 \(beyond the float64 range"),
        (lambda: NTK(factor=_HUGE), r"^NTK\.factor must be a finite number >= 1 \(beyond the float64 range"),
        (lambda: NTK(alpha=_HUGE), r"^NTK\.alpha must be a finite number >= 1 \(beyond the float64 range"),
        (lambda: Yarn(_HUGE, 4096), r"^Yarn\.factor must be a finite number >= 1 \(beyond the float64 range"),
        (lambda: Yarn(2.0, 4096, beta_fast=_HUGE), r"^Yarn\.beta_fast must be a finite number > 0 \(beyond"),
        (
            lambda: LongRope(_SHORT, _LONG, 4096, factor=_HUGE),
            r"^LongRope\.factor must be a finite number >= 1 \(",
        ),
        (
            lambda: LongRope((1.0, _HUGE, 1.0, 1.0), _LONG, 4096, factor=2.0),
            r"^LongRope\.short_factor must be a list of finite numbers > 0 \(beyond the float64 range, ~1\.8e308\), got "
            + _SHOWN
            + " at index 1 of 4$",
        ),
        (
            lambda: yarn_mscale(_HUGE),
            r"^yarn_mscale\.scale must be a finite number > 0 \(beyond the float64 range",
        ),
        (
            lambda: mla_softmax_scale(_HUGE, 2.0, 1.0),
            r"^mla_softmax_scale\.qk_head_dim must be a positive int \(at",
        ),
        (
            lambda: yarn_correction_range(32, 1, _HUGE, 1e4, 4096),
            r"^yarn_correction_range\.rotary_dim must be a pos",
        ),
        (
            lambda: yarn_correction_range(32, 1, 64, _HUGE, 4096),
            r"^yarn_correction_range\.base must be a finite num",
        ),
    ],
)
def test_huge_ints_are_refused_naming_the_field(build: object, message: str) -> None:
    """A 400-digit int used to escape as a bare OverflowError ("int too large to convert to float") from
    math.isfinite or later arithmetic. Oracle of the range: float() itself overflows on it."""
    with pytest.raises(OverflowError):
        float(_HUGE)
    with pytest.raises(ValueError, match=message) as e:
        build()  # type: ignore[operator]
    assert len(str(e.value)) < 300  # shortened, not 400 digits


@pytest.mark.parametrize(
    "build",
    [
        lambda n: _dynamic(2.0, n),
        lambda n: Yarn(2.0, n),
        lambda n: _llama3(n),
        lambda n: LongRope(_SHORT, _LONG, n, factor=2.0),
        lambda n: LongRope(_SHORT, _LONG, 4096, max_position_embeddings=n),
        lambda n: yarn_correction_range(32, 1, 64, 1e4, n),
    ],
    ids=["DynamicNTK", "Yarn", "Llama3", "LongRope-L0", "LongRope-max", "yarn_correction_range"],
)
def test_lengths_past_int64_are_refused(build: object) -> None:
    """Positions are int64, so no context length exceeds 2**63; 2**63 itself is accepted. Past it the schemes'
    arithmetic overflowed (OverflowError from int / float) or computed silently with an impossible length."""
    build(2**63)  # type: ignore[operator]
    for n in (2**63 + 1, _HUGE):
        with pytest.raises(ValueError, match=r"\(at most 2\*\*63: positions are int64\), got "):
            build(n)  # type: ignore[operator]


def _linear(x: object) -> object:
    from ropekit.scaling import Linear

    return Linear(x)  # type: ignore[arg-type]


def _dynamic(factor: float, n: object) -> object:
    from ropekit.scaling import DynamicNTK

    return DynamicNTK(factor, n)  # type: ignore[arg-type]


def _llama3(n: object) -> object:
    from ropekit.scaling import Llama3

    return Llama3(8.0, 1.0, 4.0, n)  # type: ignore[arg-type]
