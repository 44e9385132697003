"""Multi-axis tables and rotation against independent oracles.

Oracles: (1) float64 math written from the letter maps of multiaxis.md 1.1 and the families' frequency formulas
(never ropekit's AxisMap); (2) transformers' own VL rotary classes and apply functions (Qwen2-VL, Qwen3-VL,
GLM-4V, ERNIE-4.5-VL) on random inputs. The paths a call takes (Rotary, caches, the 1-D path, the C plan) and
the argument errors are in tests/ropekit/test_axis_tables_paths.py.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ropekit import RopeSpec, rope_tables
from ropekit.axis_tables import apply_rope_axes, axis_tables
from ropekit.presets_vl import (
    ernie_vl_spec,
    glm4v_spec,
    pixtral_spec,
    qwen2_vl_spec,
    qwen3_vl_spec,
    rope_vit_axial_spec,
)
from tests.oracles import reference_rope


def _oracle_angles(pos: list[list[float]], letters: str, names: str, freqs: list[float]) -> torch.Tensor:
    """[P, n] float64 angles: slot j turns by pos[axis of letter j] * freqs[j] (pos given per axis)."""
    out = [
        [pos[names.index(letters[j])][i] * freqs[j] for j in range(len(letters))] for i in range(len(pos[0]))
    ]
    return torch.tensor(out, dtype=torch.float64)


CASES = {
    # name: (spec, letters, axis names, frequencies written from the family's formula)
    "qwen2_vl": (
        qwen2_vl_spec(16, 1e4, (2, 3, 3)),
        "TTHHHWWW",
        "THW",
        [1e4 ** (-2 * j / 16) for j in range(8)],
    ),
    "qwen3_vl": (
        qwen3_vl_spec(16, 1e4, (4, 2, 2)),
        "THWTHWTT",
        "THW",
        [1e4 ** (-2 * j / 16) for j in range(8)],
    ),
    "glm4v": (glm4v_spec(16, 1e4, 0.5, (2, 1, 1)), "TTHW", "THW", [1e4 ** (-2 * j / 8) for j in range(4)]),
    "ernie": (ernie_vl_spec(16, 1e4, (3, 3, 2)), "HWHWHWTT", "THW", [1e4 ** (-2 * j / 16) for j in range(8)]),
    "pixtral": (
        pixtral_spec(16, 1e4),
        "RRRRCCCC",
        "RC",
        [1e4 ** (-2 * k / 16) for k in (0, 2, 4, 6, 1, 3, 5, 7)],
    ),
    "rope_vit": (rope_vit_axial_spec(16), "XXXXYYYY", "XY", [100 ** (-4 * k / 16) for k in (0, 1, 2, 3) * 2]),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("kind", ["int", "float"])
def test_tables_match_float64_oracle(name: str, kind: str) -> None:
    spec, letters, names, freqs = CASES[name]
    a = len(names)
    if kind == "int":
        pos = torch.randint(-50, 100_000, (a, 37))
    else:
        pos = torch.rand(a, 37, dtype=torch.float64) * 1e4 - 10
    cos, sin = axis_tables(pos, spec, dtype=torch.float64)
    ang = _oracle_angles(pos.double().tolist(), letters, names, freqs)
    torch.testing.assert_close(cos, torch.cos(ang), atol=1e-10, rtol=0)
    torch.testing.assert_close(sin, torch.sin(ang), atol=1e-10, rtol=0)


@pytest.mark.parametrize("name", sorted(CASES))
def test_all_axes_equal_is_exactly_the_one_d_table(name: str) -> None:
    spec = CASES[name][0]
    p = torch.randint(0, 1 << 20, (3, 9))
    cos, sin = axis_tables(p.expand(spec.n_axes, 3, 9), spec)
    c1, s1 = rope_tables(p, dataclasses.replace(spec, axes=None))  # the same spec in 1-D
    assert torch.equal(cos, c1) and torch.equal(sin, s1)  # bit-identical: exactness is inherited


def _hf_rotate(family: str, q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor):
    pytest.importorskip("transformers")
    d = q.shape[-1]
    rp = {"rope_type": "default", "rope_theta": 1e4}
    if family == "qwen2_vl":
        from transformers import Qwen2VLTextConfig
        from transformers.models.qwen2_vl import modeling_qwen2_vl as m

        emb = m.Qwen2VLRotaryEmbedding(
            Qwen2VLTextConfig(
                hidden_size=4 * d, num_attention_heads=4, rope_parameters={**rp, "mrope_section": [2, 3, 3]}
            )
        )
    elif family == "qwen3_vl":
        from transformers import Qwen3VLTextConfig
        from transformers.models.qwen3_vl import modeling_qwen3_vl as m

        cfg = Qwen3VLTextConfig(
            hidden_size=4 * d, num_attention_heads=4, head_dim=d,
            rope_parameters={**rp, "mrope_section": [4, 2, 2], "mrope_interleaved": True},
        )  # fmt: skip
        emb = m.Qwen3VLTextRotaryEmbedding(cfg)
    elif family == "glm4v":
        from transformers import Glm4vTextConfig
        from transformers.models.glm4v import modeling_glm4v as m

        cfg = Glm4vTextConfig(
            hidden_size=4 * d, num_attention_heads=4,
            rope_parameters={**rp, "mrope_section": [2, 1, 1], "partial_rotary_factor": 0.5},
        )  # fmt: skip
        emb = m.Glm4vTextRotaryEmbedding(cfg)
    else:
        from transformers.models.ernie4_5_vl_moe import modeling_ernie4_5_vl_moe as m
        from transformers.models.ernie4_5_vl_moe.configuration_ernie4_5_vl_moe import (
            Ernie4_5_VLMoeTextConfig,
        )

        cfg = Ernie4_5_VLMoeTextConfig(
            hidden_size=4 * d, num_attention_heads=4, rope_parameters={**rp, "mrope_section": [3, 3, 2]}
        )
        emb = m.Ernie4_5_VLMoeTextRotaryEmbedding(cfg)
    cos, sin = emb(q, pos)
    return m.apply_rotary_pos_emb(q, k, cos, sin)


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl", "glm4v", "ernie"])
def test_matches_transformers_vl_rotary(family: str) -> None:
    spec = CASES[family if family != "ernie" else "ernie"][0]
    q, k = torch.randn(2, 4, 11, 16), torch.randn(2, 2, 11, 16)
    pos = torch.randint(0, 64, (3, 2, 11))
    q_hf, k_hf = _hf_rotate(family, q, k, pos)
    q_rk, k_rk = apply_rope_axes(q, k, pos, spec, format="bhsd")
    # float32 angles in transformers: error ~ pos * 2^-24 at these small positions
    torch.testing.assert_close(q_rk, q_hf, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(k_rk, k_hf, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "cpu", "triton"])
@pytest.mark.parametrize("fmt", ["bshd", "bhsd", "thd"])
def test_every_backend_rotates_multi_axis_tables(backend: str, fmt: str) -> None:
    device = "cpu"
    if backend == "triton":
        pytest.importorskip("triton")
        device = "cuda" if torch.cuda.is_available() else "cpu"  # else TRITON_INTERPRET=1 (conftest)
    spec = qwen3_vl_spec(16, 1e4, (4, 2, 2))
    shape = {"bshd": (2, 6, 3, 16), "bhsd": (2, 3, 6, 16), "thd": (6, 3, 16)}[fmt]
    q = torch.randn(shape)
    pos = torch.randint(0, 1000, (3, 6) if fmt == "thd" else (3, 2, 6))
    out, _ = apply_rope_axes(q.to(device), None, pos.to(device), spec, format=fmt, backend=backend)
    out = out.cpu()
    # oracle: per-token reference rotation (float64) at the per-band angles of the letter map
    letters, freqs = CASES["qwen3_vl"][1], CASES["qwen3_vl"][3]
    flat_pos = pos.reshape(3, -1).double().tolist()
    ang = _oracle_angles(flat_pos, letters, "THW", freqs).reshape(*pos.shape[1:], 8)
    want = _rotate_by_angles(q.double(), ang, fmt, spec.layout)
    torch.testing.assert_close(out.double(), want, atol=2e-6, rtol=0)


def _rotate_by_angles(x: torch.Tensor, ang: torch.Tensor, fmt: str, layout: str) -> torch.Tensor:
    """Direct complex-pair rotation in float64 (the seed's 2x2 blocks) by per-token per-band angles."""
    if fmt == "bhsd":
        x = x.transpose(1, 2)
    n = ang.shape[-1]
    a = ang.unsqueeze(-2)  # broadcast over heads
    if layout == "half":
        x1, x2 = x[..., :n], x[..., n : 2 * n]
    else:
        x1, x2 = x[..., 0 : 2 * n : 2], x[..., 1 : 2 * n : 2]
    y1 = x1 * torch.cos(a) - x2 * torch.sin(a)
    y2 = x2 * torch.cos(a) + x1 * torch.sin(a)
    out = x.clone()
    if layout == "half":
        out[..., :n], out[..., n : 2 * n] = y1, y2
    else:
        out[..., 0 : 2 * n : 2], out[..., 1 : 2 * n : 2] = y1, y2
    return out.transpose(1, 2) if fmt == "bhsd" else out


def test_axis_isolation() -> None:
    spec = qwen2_vl_spec(16, 1e4, (2, 3, 3))  # half layout: channels j and j + 8 belong to slot j
    q = torch.randn(1, 1, 1, 16, dtype=torch.float64)
    pos = torch.tensor([[[5]], [[7]], [[9]]])
    base, _ = apply_rope_axes(q, None, pos, spec)
    for axis, slots in ((0, {0, 1}), (1, {2, 3, 4}), (2, {5, 6, 7})):
        moved = pos.clone()
        moved[axis] += 13
        out, _ = apply_rope_axes(q, None, moved, spec)
        changed = {c % 8 for c in range(16) if not torch.equal(out[..., c], base[..., c])}
        assert changed == slots, (axis, changed)


def test_reference_rotation_agrees_for_one_d_equivalent() -> None:
    spec = rope_vit_axial_spec(16)
    q = torch.randn(1, 5, 2, 16, dtype=torch.float64)
    p = torch.arange(5)
    out, _ = apply_rope_axes(q, None, torch.stack([p, p]), spec)
    want = reference_rope(q, p, RopeSpec(16, freqs=spec.freqs, layout="interleaved"))
    torch.testing.assert_close(out, want, atol=1e-12, rtol=0)


@pytest.mark.parametrize(
    "scaling",
    [
        pytest.param(
            lambda s: s.Yarn(factor=4.0, original_max_position_embeddings=64), id="yarn-attention-factor"
        ),
        pytest.param(lambda s: s.DynamicNTK(factor=2.0, max_position_embeddings=64), id="dynamic-ntk"),
    ],
)
def test_scaled_specs_equal_axes_bit_identical_to_one_d(scaling) -> None:
    import ropekit.scaling as sc

    axes = qwen2_vl_spec(16, 1e4, (2, 3, 3)).axes
    spec = RopeSpec(head_dim=16, base=1e4, scaling=scaling(sc), axes=axes)
    p = torch.arange(300)  # beyond the original length: dynamic NTK rescales from max + 1
    cos, sin = axis_tables(p.expand(3, 300), spec)
    c1, s1 = rope_tables(p, dataclasses.replace(spec, axes=None))  # the same spec in 1-D
    assert torch.equal(cos, c1) and torch.equal(sin, s1)
    if spec.attention_factor != 1.0:
        assert float(cos.abs().max()) > 1.0  # the factor is applied


@pytest.mark.parametrize(
    ("bad", "err"),
    [
        ("5", TypeError),
        (-3, ValueError),
        (0, ValueError),
        (2.5, TypeError),
        (True, TypeError),
        (2**63 + 1, ValueError),
    ],
)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_axis_tables_validates_seq_len_as_rope_tables_does(
    bad: object, err: type[Exception], dynamic: bool
) -> None:
    """A static spec used to ignore any seq_len ('5', -3, 2.5 accepted); rope_tables refuses them. The oracle is
    rope_tables' own refusal of the same value for the same spec (one rule for both entry points)."""
    from ropekit.scaling import DynamicNTK

    scaling = DynamicNTK(2.0, 4) if dynamic else None
    spec = dataclasses.replace(qwen2_vl_spec(16, sections=(2, 3, 3)), scaling=scaling)
    pos = torch.zeros(3, 4, dtype=torch.long)
    with pytest.raises(err) as want:
        rope_tables(pos, spec, seq_len=bad)  # type: ignore[arg-type]
    with pytest.raises(err) as got:
        axis_tables(pos, spec, seq_len=bad)  # type: ignore[arg-type]
    assert (
        str(got.value) == str(want.value) and "seq_len" in str(got.value) and repr(bad)[:8] in str(got.value)
    )


def test_axis_tables_takes_integer_like_seq_len() -> None:
    """Positive control: a numpy length is a length (the same tables as the int, oracle: the 1-D tables of the
    spec without axes at the common position, as every axis holds the same position)."""
    import numpy as np

    from ropekit.scaling import DynamicNTK

    spec = dataclasses.replace(qwen2_vl_spec(16, sections=(2, 3, 3)), scaling=DynamicNTK(2.0, 4))
    pos = torch.arange(6).expand(3, 6)
    got = axis_tables(pos, spec, seq_len=np.int64(40), dtype=torch.float64)
    want = rope_tables(torch.arange(6), dataclasses.replace(spec, axes=None), seq_len=40, dtype=torch.float64)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
