"""apply_rope's contract: validation before any write, in place, GQA, strided views, q alone, tables."""

from __future__ import annotations

import pytest
import torch

from ropekit import RopeSpec, apply_rope, apply_rope_tables, rope_tables
from tests.oracles import reference_rope

SPEC = RopeSpec(head_dim=16, rotary_dim=12, base=10_000.0)


def _qk(b: int = 2, s: int = 5, hq: int = 4, hk: int = 2, d: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(b, s, hq, d), torch.randn(b, s, hk, d)


BAD_CALLS = [
    ("q", {"q": "not a tensor"}, TypeError, "q must be a torch.Tensor"),
    ("q", {"q": torch.randn(2, 5, 4, 8)}, ValueError, "head_dim=16"),
    ("q", {"q": torch.randn(2, 5, 16)}, ValueError, "got shape (2, 5, 16)"),
    ("q", {"q": torch.randint(0, 3, (2, 5, 4, 16))}, ValueError, "torch.int64"),
    ("k", {"k": torch.randn(2, 6, 2, 16)}, ValueError, "seq=6"),
    ("positions", {"positions": torch.arange(4)}, ValueError, "got (4,)"),
    ("positions", {"positions": torch.arange(5).to(torch.bfloat16)}, ValueError, "bfloat16"),
    ("positions", {"positions": torch.arange(5).to(torch.float16)}, ValueError, "float16"),
    ("positions", {"positions": torch.ones(5, dtype=torch.bool)}, ValueError, "torch.bool"),
    ("positions", {"positions": torch.tensor([0.0, 1.0, float("nan"), 3.0, 4.0])}, ValueError, "nan"),
    ("positions", {"positions": [0, 1, 2, 3, 4]}, TypeError, "positions must be a torch.Tensor"),
    ("format", {"format": "sbhd"}, ValueError, "'sbhd'"),
    ("spec", {"spec": {"head_dim": 16}}, TypeError, "spec must be a ropekit.RopeSpec"),
    ("backend", {"backend": "cuda-magic"}, ValueError, "'cuda-magic'"),
    ("inplace", {"inplace": "yes"}, TypeError, "'yes'"),
]


@pytest.mark.parametrize(
    "name,override,exc,fragment", BAD_CALLS, ids=[f"{c[0]}-{i}" for i, c in enumerate(BAD_CALLS)]
)
@pytest.mark.parametrize("inplace", [False, True])
def test_bad_input_is_refused_before_any_write(name, override, exc, fragment, inplace) -> None:
    q, k = _qk()
    q0, k0 = q.clone(), k.clone()
    kwargs = {
        "q": q,
        "k": k,
        "positions": torch.arange(5),
        "spec": SPEC,
        "format": "bshd",
        "inplace": inplace,
    }
    kwargs.update(override)
    with pytest.raises(exc) as info:
        apply_rope(kwargs.pop("q"), kwargs.pop("k"), kwargs.pop("positions"), kwargs.pop("spec"), **kwargs)
    msg = str(info.value)
    assert name in msg and fragment in msg, msg
    assert torch.equal(q, q0) and torch.equal(k, k0)


def test_inplace_writes_into_caller_storage_and_leaves_passthrough() -> None:
    q, k = _qk()
    q0, k0 = q.clone(), k.clone()
    pos = torch.tensor([[0, 1, 2, 3, 4], [10, 11, 12, 13, 14]])
    qr, kr = apply_rope(q, k, pos, SPEC, inplace=True)
    assert qr is q and kr is k
    torch.testing.assert_close(q.double(), reference_rope(q0, pos, SPEC), rtol=0, atol=1e-5)
    torch.testing.assert_close(k.double(), reference_rope(k0, pos, SPEC), rtol=0, atol=1e-5)
    assert torch.equal(q[..., 12:], q0[..., 12:])


def test_out_of_place_does_not_touch_inputs() -> None:
    q, k = _qk()
    q0, k0 = q.clone(), k.clone()
    qr, kr = apply_rope(q, k, torch.arange(5), SPEC)
    assert torch.equal(q, q0) and torch.equal(k, k0)
    assert qr.data_ptr() != q.data_ptr() and kr.data_ptr() != k.data_ptr()
    assert torch.equal(qr[..., 12:], q0[..., 12:])


def test_q_alone_and_mqa() -> None:
    q, _ = _qk()
    qr, kr = apply_rope(q, None, torch.arange(5), SPEC)
    assert kr is None
    torch.testing.assert_close(qr.double(), reference_rope(q, torch.arange(5), SPEC), rtol=0, atol=1e-5)
    k1 = torch.randn(2, 5, 1, 16)  # multi-query: one kv head
    _, k1r = apply_rope(q, k1, torch.arange(5), SPEC)
    torch.testing.assert_close(k1r.double(), reference_rope(k1, torch.arange(5), SPEC), rtol=0, atol=1e-5)


@pytest.mark.parametrize("inplace", [False, True])
def test_strided_views_of_a_fused_qkv_projection(inplace: bool) -> None:
    b, s, hq, hk, d = 2, 6, 4, 2, 16
    qkv = torch.randn(b, s, (hq + 2 * hk) * d)
    before = qkv.clone()
    q = qkv[..., : hq * d].view(b, s, hq, d)  # non-contiguous views into one buffer
    k = qkv[..., hq * d : (hq + hk) * d].view(b, s, hk, d)
    pos = torch.arange(100, 100 + s)
    qr, kr = apply_rope(q, k, pos, SPEC, inplace=inplace)
    torch.testing.assert_close(
        qr.double(), reference_rope(before[..., : hq * d].view(b, s, hq, d), pos, SPEC), rtol=0, atol=1e-5
    )
    torch.testing.assert_close(
        kr.double(),
        reference_rope(before[..., hq * d : (hq + hk) * d].view(b, s, hk, d), pos, SPEC),
        rtol=0,
        atol=1e-5,
    )
    assert torch.equal(qkv[..., (hq + hk) * d :], before[..., (hq + hk) * d :])  # v untouched
    if not inplace:
        assert torch.equal(qkv, before)


def test_bhsd_transposed_view_in_place() -> None:
    x = torch.randn(2, 5, 3, 16)  # bshd storage
    ref = reference_rope(x, torch.arange(5), SPEC)
    apply_rope(x.transpose(1, 2), None, torch.arange(5), SPEC, format="bhsd", inplace=True)
    torch.testing.assert_close(x.double(), ref, rtol=0, atol=1e-5)


def test_inplace_refuses_overlapping_or_shared_memory() -> None:
    q = torch.randn(1, 5, 1, 16).expand(2, 5, 4, 16)
    with pytest.raises(ValueError, match="q has overlapping memory"):
        apply_rope(q, None, torch.arange(5), SPEC, inplace=True)
    x = torch.randn(2, 5, 4, 16)
    x0 = x.clone()
    with pytest.raises(ValueError, match="share memory"):
        apply_rope(x, x[:, :, :2], torch.arange(5), SPEC, inplace=True)
    assert torch.equal(x, x0)


def test_inplace_refuses_leaf_requiring_grad() -> None:
    q = torch.randn(2, 5, 4, 16, requires_grad=True)
    with pytest.raises(ValueError, match="leaf tensor that requires grad"):
        apply_rope(q, None, torch.arange(5), SPEC, inplace=True)


def test_positions_shared_row_and_per_row_broadcast() -> None:
    q, k = _qk()
    a, _ = apply_rope(q, k, torch.arange(5), SPEC)
    b, _ = apply_rope(q, k, torch.arange(5).view(1, 5), SPEC)
    c, _ = apply_rope(q, k, torch.arange(5).expand(2, 5), SPEC)
    assert torch.equal(a, b) and torch.equal(a, c)


def test_batched_decode_one_token_each_at_its_own_position() -> None:
    """pitfalls item 43: B > 1, S = 1."""
    q = torch.randn(4, 1, 8, 16)
    pos = torch.tensor([[3], [100], [0], [77_777]])
    qr, _ = apply_rope(q, None, pos, SPEC)
    torch.testing.assert_close(qr.double(), reference_rope(q, pos, SPEC), rtol=0, atol=1e-5)


def test_empty_sequence() -> None:
    q = torch.randn(2, 0, 4, 16)
    qr, _ = apply_rope(q, None, torch.arange(0), SPEC)
    assert qr.shape == q.shape


def test_apply_rope_tables_matches_apply_rope_and_validates() -> None:
    q, k = _qk()
    pos = torch.tensor([[1, 2, 3, 4, 5], [9, 8, 7, 6, 5]])
    cos, sin = rope_tables(pos, SPEC)
    a = apply_rope(q, k, pos, SPEC)
    b = apply_rope_tables(q, k, cos, sin, SPEC)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    with pytest.raises(ValueError, match="cos must be float32 or float64"):
        apply_rope_tables(q, k, cos.bfloat16(), sin, SPEC)
    with pytest.raises(ValueError, match=r"sin must have shape"):
        apply_rope_tables(q, k, cos, sin[:, :3], SPEC)
    q1, k1 = q[:1], k[:1]  # batch 1: [1, s, n] is both "broadcast" and "per batch"; the message lists it once
    with pytest.raises(ValueError) as e:
        apply_rope_tables(q1, k1, cos[:1, None], sin[:1], SPEC)
    n = SPEC.n_bands
    assert str(e.value) == f"cos must have shape (5, {n}) or (1, 5, {n}), got (1, 1, 5, {n})"


def test_mixed_dtypes_each_returned_in_its_own() -> None:
    q, k = torch.randn(1, 3, 2, 16, dtype=torch.bfloat16), torch.randn(1, 3, 2, 16, dtype=torch.float64)
    qr, kr = apply_rope(q, k, torch.arange(3), SPEC)
    assert qr.dtype == torch.bfloat16 and kr.dtype == torch.float64


def test_thd_k_mismatch_is_worded_in_tokens() -> None:
    with pytest.raises(ValueError) as e:
        apply_rope(torch.randn(5, 2, 8), torch.randn(4, 2, 8), torch.arange(5), RopeSpec(8), format="thd")
    assert str(e.value) == "k must match q in tokens and device: q has 5 tokens on cpu, k has 4 tokens on cpu"
