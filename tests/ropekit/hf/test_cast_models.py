"""A model cast to float16 / bfloat16 is patched, and rotates with the frequencies transformers rotates with.

``model.to(torch.bfloat16)`` casts a rotary module's ``inv_freq`` buffer, and transformers' forward then rotates
with the rounded frequencies. Before ``ropekit.hf.cast``, the patch's probe refused such models (tables 6.8e-4 /
1.9e-3 away from transformers' on DeepSeek-V3's 12-position probe: the 14 refusals of the transformers suite,
``test_eager_matches_batched_and_grouped_inference_{fp16,bf16}``). Oracle: transformers' own rotary module of the
same cast model (its tables, and the logits of a model whose rotary buffers alone are cast). Every rope type
transformers has for 1-D text models, with and without partial rotation, and every table layout ropekit patches.
Negative control: the tables of the config's exact frequencies differ from the cast module's.
"""

from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")

import ropekit.hf
from ropekit.hf.cast import BufferFrequencies, buffer_spec, cast_dtype
from ropekit.hf.rotary import RopekitRotary
from ropekit.phases import rope_tables

sys.path.insert(0, str(Path(__file__).parent))
from tiny import SMALL, VOCAB, tiny_config

DTYPES = [torch.float16, torch.bfloat16]
MAX_POS = 64
N = 8  # bands of head_dim 16
#: every rope type of a 1-D text model (transformers' ROPE_INIT_FUNCTIONS) and the optional keys that change it
ROPE_PARAMETERS: dict[str, dict[str, Any]] = {
    "default": {"rope_type": "default"},
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    "yarn-mscale": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 16,
        "mscale": 1.0,
        "mscale_all_dim": 0.7,
    },
    "yarn-attention-factor-untruncated": {
        "rope_type": "yarn",
        "factor": 8.0,
        "original_max_position_embeddings": 16,
        "attention_factor": 1.3,
        "beta_fast": 16.0,
        "beta_slow": 2.0,
        "truncate": False,
    },
    "longrope": {
        "rope_type": "longrope",
        "short_factor": [1.0 + i / 8 for i in range(N)],
        "long_factor": [2.0 + i for i in range(N)],
        "original_max_position_embeddings": 16,
    },
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    },
}


def _llama(rope: dict[str, Any], partial: float) -> torch.nn.Module:
    """A one-layer Llama (whole head rotated) or, for partial rotation, StableLM (Llama's rotary ignores the
    partial factor of its default type)."""
    rp = {**copy.deepcopy(rope), "rope_theta": 10_000.0}
    kw: dict[str, Any] = {**SMALL, "num_hidden_layers": 1, "max_position_embeddings": MAX_POS}
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if partial == 1.0:
            cfg = transformers.LlamaConfig(**kw, head_dim=16, rope_parameters=rp)
            return transformers.LlamaForCausalLM(cfg).eval()
        rp["partial_rotary_factor"] = partial
        for key in ("short_factor", "long_factor"):
            if key in rp:
                rp[key] = rp[key][: int(N * partial)]
        cfg = transformers.StableLmConfig(**kw, rope_parameters=rp)
        return transformers.StableLmForCausalLM(cfg).eval()


def _patched(model: torch.nn.Module) -> torch.nn.Module:
    ours = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ropekit.hf.patch(ours)
    return ours


def _rotaries(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")]


def _err(a: Any, b: Any) -> float:
    pairs = zip(a, b) if isinstance(a, tuple) else [(a, b)]
    out = 0.0
    for u, v in pairs:
        if u.is_complex():
            u, v = torch.view_as_real(u), torch.view_as_real(v)
        out = max(out, float((u.double() - v.double()).abs().max()))
    return out


#: position runs fed in order (dynamic NTK: short, past max_position_embeddings, short again; LongRoPE: both sets)
RUNS = [torch.arange(24)[None], torch.arange(MAX_POS + 40)[None], torch.arange(24)[None]]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("partial", [1.0, 0.5])
@pytest.mark.parametrize("name", list(ROPE_PARAMETERS))
def test_cast_rotary_tables_equal_transformers(name: str, partial: float, dtype: torch.dtype) -> None:
    ref = _llama(ROPE_PARAMETERS[name], partial).to(dtype)
    ours = _patched(ref)
    theirs, mine = ref.model.rotary_emb, ours.model.rotary_emb
    assert isinstance(mine, RopekitRotary) and cast_dtype(mine) == dtype
    x = torch.zeros(1, dtype=torch.float32)
    for pos in RUNS:
        with torch.no_grad():
            want, got = theirs(x, pos), mine(x, pos)
        # transformers forms p * theta in float32: ~6e-8 * p of rounding; ropekit's phases are exact
        assert _err(want, got) <= 2e-5, name
    # negative control: the config's exact frequencies are not what this cast model rotates with
    spec, pos = mine._ropekit_specs[None], torch.arange(MAX_POS)[None]
    with torch.no_grad():
        want = _llama(ROPE_PARAMETERS[name], partial).to(dtype).model.rotary_emb(x, pos)
    cos, _ = rope_tables(pos, spec, seq_len=MAX_POS)
    assert float((torch.cat([cos, cos], -1) - want[0]).abs().max()) > 5e-5


@pytest.mark.parametrize(
    "dtype", [pytest.param(torch.float16, marks=pytest.mark.slow), torch.bfloat16], ids=str
)
@pytest.mark.parametrize(
    "model_type", ["llama", "gpt_oss", "cohere", "llama4_text", "deepseek_v3", "gemma3_text"]
)
def test_cast_family_rotary_buffers(
    model_type: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each table layout (cat, half, interleave, complex, MLA, per layer type): a float32 model whose rotary
    modules alone are cast gives transformers' logits (1e-5 relative; measured <= 4.5e-6), and differs without the cast handling."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = transformers.AutoModelForCausalLM.from_config(
            tiny_config(model_type), attn_implementation="eager"
        )
    ref.eval()
    for m in _rotaries(ref):
        m.to(dtype)
    ours = _patched(ref)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (2, 48), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    with torch.no_grad():
        a = ref(input_ids=ids, attention_mask=mask).logits
        b = ours(input_ids=ids, attention_mask=mask).logits
    m = mask.bool()
    scale = float(a[m].abs().max())
    err = float((a - b)[m].abs().max()) / scale
    assert err < 1e-5
    # without the cast handling (the config's exact frequencies) the logits move: the check has teeth
    monkeypatch.setattr("ropekit.hf.rotary.cast_dtype", lambda *a: None)
    monkeypatch.setattr("ropekit.hf.rotary.round_trip_dtype", lambda *a: None)
    with torch.no_grad():
        c = ours(input_ids=ids, attention_mask=mask).logits
    assert float((a - c)[m].abs().max()) / scale > max(1e-5, 10 * err)


def test_buffer_spec_reads_the_rounded_values_and_keeps_the_attention_factor() -> None:
    ref = _llama(ROPE_PARAMETERS["yarn-mscale"], 1.0).to(torch.bfloat16)
    mine = _patched(ref).model.rotary_emb
    spec = buffer_spec(mine, mine._ropekit_specs[None])
    assert spec.freqs == tuple(mine.inv_freq.double().tolist())
    assert isinstance(spec.scaling, BufferFrequencies)
    assert spec.attention_factor == pytest.approx(ref.model.rotary_emb.attention_scaling, rel=1e-15)
    assert buffer_spec(mine, mine._ropekit_specs[None]) is spec  # memoised while the buffer is unchanged
    mine.inv_freq.mul_(1.0)  # an in-place write (version bump): read again
    assert buffer_spec(mine, mine._ropekit_specs[None]) is not spec


def test_patch_warns_once_naming_the_dtype() -> None:
    ref = _llama(ROPE_PARAMETERS["default"], 1.0).half()
    with pytest.warns(UserWarning, match=r"torch\.float16 \(the model was cast\)"):
        ours = ropekit.hf.patch(copy.deepcopy(ref))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning at the forward
        with torch.no_grad():
            ours(input_ids=torch.tensor([[3, 4, 5]]))


def test_cast_after_patch_is_followed() -> None:
    """Patched in float32, cast afterwards: the forward follows the cast (as transformers' forward does)."""
    ref = _llama(ROPE_PARAMETERS["linear"], 1.0)
    ours = _patched(ref)
    ref.model.rotary_emb.to(torch.bfloat16)
    ours.model.rotary_emb.to(torch.bfloat16)
    x, pos = torch.zeros(1), torch.arange(40)[None]
    with torch.no_grad(), pytest.warns(UserWarning, match="bfloat16"):
        got = ours.model.rotary_emb(x, pos)
    with torch.no_grad():
        want = ref.model.rotary_emb(x, pos)
    assert _err(want, got) <= 2e-5


@pytest.mark.parametrize("name", list(ROPE_PARAMETERS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cast_down_and_back_after_patch_is_followed(name: str, dtype: torch.dtype) -> None:
    """Patched in float32, cast to a lower precision, one forward, cast back: the float32 buffer now holds rounded
    values, which transformers keeps rotating with; the patched module follows them (its dtype no longer shows the
    cast; a user trial found tables 6e-3 and logits 2e-2 apart, silently). Every position run, every rope type."""
    ref = _llama(ROPE_PARAMETERS[name], 1.0)
    ours = _patched(ref)
    x = torch.zeros(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for m in (ref, ours):
            m.model.rotary_emb.to(dtype)
            with torch.no_grad():
                m.model.rotary_emb(x, torch.arange(5)[None])
            m.model.rotary_emb.to(torch.float32)
        for pos in RUNS:
            with torch.no_grad():
                want, got = ref.model.rotary_emb(x, pos), ours.model.rotary_emb(x, pos)
            assert _err(want, got) <= 2e-5, (name, tuple(pos.shape))


def test_cache_correct_refuses_a_cast_dynamic_model() -> None:
    ref = _llama(ROPE_PARAMETERS["dynamic"], 1.0).half()
    with pytest.raises(ValueError, match=r"cache_correct=True refused .*torch\.float16"):
        ropekit.hf.patch(ref, cache_correct=True)
    assert not any(isinstance(m, RopekitRotary) for m in ref.modules())


def test_a_forward_that_recomputes_its_frequencies_keeps_them_when_cast() -> None:
    """Phi-MoE's forward recomputes inv_freq from its config at every call, so a cast Phi-MoE still rotates with
    float32 frequencies: the probe sees that its buffers are not read, and the patch keeps the config's."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = transformers.AutoModelForCausalLM.from_config(
            tiny_config("phimoe"), attn_implementation="eager"
        )
    ref.eval()
    ref.model.rotary_emb.to(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no cast warning: nothing is rounded in this model's rotation
        ours = ropekit.hf.patch(copy.deepcopy(ref))
    assert type(ours.model.rotary_emb)._ropekit_reads_buffers is False
    assert type(_patched(_llama(ROPE_PARAMETERS["default"], 1.0)).model.rotary_emb)._ropekit_reads_buffers
    ids = torch.randint(3, VOCAB, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = ref(input_ids=ids).logits, ours(input_ids=ids).logits
    assert float((a - b).abs().max()) <= 1e-5 * float(a.abs().max())


def _llama_theta(theta: float) -> torch.nn.Module:
    """A one-layer Llama (head_dim 16, default rope) with the given rope_theta."""
    kw: dict[str, Any] = {**SMALL, "num_hidden_layers": 1, "max_position_embeddings": MAX_POS}
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.LlamaConfig(
            **kw, head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": theta}
        )
        return transformers.LlamaForCausalLM(cfg).eval()


def _refusal(model: torch.nn.Module) -> str:
    with pytest.raises(ValueError, match=r"ropekit\.hf\.patch refuses this model") as e:
        ropekit.hf.patch(model)
    assert not any(isinstance(m, RopekitRotary) for m in model.modules())
    return str(e.value)


def _max_rel(buf: torch.Tensor, theta: float, factor: float = 1.0) -> float:
    """Oracle: the largest relative difference of the buffer from theta^(-2i/16) / factor, in Python floats."""
    want = [theta ** (-2 * i / 16) / factor for i in range(N)]
    return max(abs(b - w) / w for b, w in zip(buf.double().tolist(), want))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("theta", [10_000.0, 1e9])
def test_a_model_cast_down_and_back_is_patched_with_its_rounded_buffer(
    dtype: torch.dtype, theta: float
) -> None:
    """float16 / bfloat16 and back to float32: rounded values in a float32 buffer, which transformers rotates with.
    The patch recognises the round trip from the values (not the dtype), rotates with them as it does for a cast
    model, warns naming the dtype, and the logits equal the unpatched model's. (It used to refuse such a model, and a
    model patched before the round trip rotated with the config's frequencies: different logits, silently.)
    theta = 1e9: the lowest frequency, 1e9^(-14/16) ~ 1.3e-8, is below half float16's smallest subnormal (2^-25),
    so the float16 round trip makes it 0 -- a relative difference of 1, still a round trip (not a config edit)."""
    model = _llama_theta(theta).to(dtype).float()
    rel = _max_rel(model.model.rotary_emb.inv_freq, theta)
    if theta == 1e9 and dtype == torch.float16:
        assert (
            rel == 1.0
        )  # flushed to 0: a fixed relative threshold (1e-2, say) would call this a config edit
    else:
        assert 0 < rel <= 2.0**-8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = ropekit.hf.patch(copy.deepcopy(model))
    ids = torch.randint(3, VOCAB, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a = model(input_ids=ids).logits
        with pytest.warns(UserWarning, match=str(dtype).removeprefix("torch.")):
            b = ours(input_ids=ids).logits
    assert float((a - b).abs().max()) <= 1e-5 * float(a.abs().max())


@pytest.mark.parametrize("factor", [2.0, 1.001])
def test_a_config_edited_after_the_model_was_built_is_refused_naming_the_mismatch(factor: float) -> None:
    """The user trial: the config's rope parameters changed after the rotary module computed its frequencies.
    Factor 2: relative difference 1, far beyond any float16 / bfloat16 round trip; factor 1.001: 1e-3, within
    bfloat16's rounding (2^-8) but not on its (nor float16's) grid -- a cast cannot have given it either."""
    model = _llama_theta(10_000.0)
    model.config.rope_parameters = {"rope_type": "linear", "factor": factor, "rope_theta": 10_000.0}
    rel = _max_rel(model.model.rotary_emb.inv_freq, 10_000.0, factor)
    assert rel == pytest.approx(factor - 1, rel=1e-3)  # the buffer is float32
    msg = _refusal(model)
    assert (
        f"inv_freq buffer (torch.float32) differs from its config's frequencies by up to {rel:.1e} relative, more "
        "than a round trip through float16 or bfloat16 can cause: the rotary module's frequencies do not match its "
        "config (was the config edited after the model was built? rebuild the model from the edited config)"
    ) in msg
    assert "cast to a lower precision" not in msg


def _exact_families() -> list[str]:
    from test_families import EXPECTED

    return sorted(mt for mt, (status, _) in EXPECTED.items() if status == "exact")


@pytest.mark.slow
@pytest.mark.parametrize("model_type", _exact_families())
def test_every_exact_family_with_its_rotary_cast_to_bfloat16(model_type: str) -> None:
    """The sweep: every family test_families.py patches exactly, its rotary modules cast to bfloat16 (the rest
    float32): patched, and logits within 1e-4 relative of transformers' (left-padded batch of 2)."""
    from test_families import _build, _inputs, _rel

    ref = _build(model_type)
    for m in _rotaries(ref):
        m.to(torch.bfloat16)
    ours = _patched(ref)
    ids, mask = _inputs()
    with torch.no_grad():
        a = ref(input_ids=ids, attention_mask=mask).logits
        b = ours(input_ids=ids, attention_mask=mask).logits
    assert _rel(a, b, mask) < 1e-4
