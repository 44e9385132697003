"""ring_attention's block math in one process: LSE merge, single-rank attention, gradcheck, validation errors.

Oracle: softmax attention written here from the definition (float64), masks from positions.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from ropekit.distributed import ring_attention
from ropekit.distributed.blocks import block_forward, block_mask, merge_lse


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, scale: float | None = None
) -> torch.Tensor:
    g = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k).mul(scale).masked_fill(~visible, float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1), v)


def qkv(
    s: int = 12, hq: int = 4, hkv: int = 2, d: int = 8, dtype: torch.dtype = torch.float64
) -> list[torch.Tensor]:
    return [torch.randn(2, s, h, d, dtype=dtype) for h in (hq, hkv, hkv)]


def to5(q: torch.Tensor, hkv: int) -> torch.Tensor:
    b, s, h, d = q.shape
    return q.view(b, s, hkv, h // hkv, d).permute(0, 2, 3, 1, 4)


def test_lse_merge_of_disjoint_key_blocks_equals_full_attention() -> None:
    q, k, v = qkv(s=16)
    pos = torch.randperm(16)
    visible = pos[None, :] <= pos[:, None]
    ref = attention(q, k, v, visible)
    q5, k4, v4 = to5(q, 2), k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
    o = torch.zeros(2, 2, 2, 16, 8, dtype=torch.float64)
    lse = torch.full((2, 2, 2, 16), float("-inf"), dtype=torch.float64)
    for cols in torch.randperm(16).split([3, 7, 6]):
        mask = block_mask(pos, pos[cols], causal=True)
        rows = mask.any(1).nonzero().flatten()  # partial update: only rows that see this block
        ob, lb = block_forward(
            q5[:, :, :, rows], k4[:, :, cols], v4[:, :, cols], mask[rows], 1 / math.sqrt(8)
        )
        o_r, l_r = merge_lse(o[:, :, :, rows], lse[:, :, :, rows], ob, lb)
        o[:, :, :, rows], lse[:, :, :, rows] = o_r, l_r
    got = o.permute(0, 3, 1, 2, 4).reshape(2, 16, 4, 8)
    assert (got - ref).abs().max() < 1e-14


@pytest.mark.parametrize("causal", [True, False])
def test_single_process_equals_attention_with_any_positions(causal: bool) -> None:
    q, k, v = qkv()
    pos = torch.randperm(12) + 500  # any ids, any order
    visible = pos[None, :] <= pos[:, None] if causal else torch.ones(12, 12, dtype=torch.bool)
    out = ring_attention(q, k, v, positions=pos, causal=causal, scale=0.3)
    assert (out - attention(q, k, v, visible, scale=0.3)).abs().max() < 1e-14


def test_documents_mask_and_int32_offsets() -> None:
    q, k, v = qkv()
    cu = torch.tensor([0, 5, 6, 12], dtype=torch.int32)
    rows = torch.randperm(12)  # global offsets in the packed sequence
    doc = torch.tensor([0] * 5 + [1] + [2] * 6)[rows]
    visible = (rows[None, :] <= rows[:, None]) & (doc[None, :] == doc[:, None])
    out = ring_attention(q, k, v, positions=rows, cu_seqlens=cu)
    assert (out - attention(q, k, v, visible)).abs().max() < 1e-14


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_low_precision_inputs_return_their_dtype(dtype: torch.dtype) -> None:
    q, k, v = qkv()
    pos = torch.arange(12)
    ref = attention(q, k, v, pos[None, :] <= pos[:, None])
    out = ring_attention(*(t.to(dtype) for t in (q, k, v)), positions=pos)
    assert out.dtype == dtype
    ref_lp = attention(*(t.to(dtype).double() for t in (q, k, v)), pos[None, :] <= pos[:, None])
    tol = 2e-6 if dtype == torch.float32 else 1e-2  # float32 math inside, one rounding to the output dtype
    assert (out.double() - ref_lp).abs().max() < tol
    assert (out.double() - ref).abs().max() < (2e-6 if dtype == torch.float32 else 0.1)


@pytest.mark.parametrize("cu", [None, torch.tensor([0, 4, 9])])
def test_backward_passes_gradcheck(cu: torch.Tensor | None) -> None:
    q, k, v = (t.requires_grad_() for t in qkv(s=9, hq=4, hkv=1, d=4))
    pos = torch.randperm(9)
    assert torch.autograd.gradcheck(
        lambda a, b, c: ring_attention(a, b, c, positions=pos, cu_seqlens=cu), (q, k, v)
    )


def test_gradients_match_the_oracle_autograd() -> None:
    q, k, v = (t.requires_grad_() for t in qkv())
    g = torch.randn(2, 12, 4, 8, dtype=torch.float64)
    pos = torch.arange(12)
    grads = torch.autograd.grad((ring_attention(q, k, v, positions=pos) * g).sum(), (q, k, v))
    ref = torch.autograd.grad((attention(q, k, v, pos[None, :] <= pos[:, None]) * g).sum(), (q, k, v))
    for a, b in zip(grads, ref):
        assert (a - b).abs().max() < 1e-13


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True:UserWarning")
def test_double_backward_is_refused() -> None:
    """The single-process call runs the same autograd.Function as the ring (world 1). Its backward builds no graph
    (detached float copies, received blocks), so create_graph=True used to return silently wrong second-order
    gradients (tests/ropekit/distributed/test_ring_worlds.py checks W = 2, 4); it is refused, naming the function.
    Without create_graph the gradients are unchanged."""
    q, k, v = (t.requires_grad_() for t in qkv())
    pos = torch.arange(12)
    out = ring_attention(q, k, v, positions=pos)
    want = r"ring_attention is differentiable once only: its backward was called with create_graph=True"
    with pytest.raises(RuntimeError, match=want):
        torch.autograd.grad(out.square().sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match=want):
        out.square().sum().backward(create_graph=True)
    (dq,) = torch.autograd.grad(ring_attention(q, k, v, positions=pos).square().sum(), q)
    ref = attention(q, k, v, pos[None, :] <= pos[:, None])
    assert (dq - torch.autograd.grad(ref.square().sum(), q)[0]).abs().max() < 1e-13


@pytest.mark.parametrize("scale", [np.float32(0.3), np.float64(0.3), np.int64(2), 0.3, 2])
def test_scale_takes_real_numbers(scale: object) -> None:
    """numpy floats and ints are real numbers (float()), as numpy ints are ints for the layouts."""
    q, k, v = qkv()
    pos = torch.arange(12)
    out = ring_attention(q, k, v, positions=pos, scale=scale)  # type: ignore[arg-type]
    assert (out - attention(q, k, v, pos[None, :] <= pos[:, None], scale=float(scale))).abs().max() < 1e-14  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("scale", "err"),
    [
        (True, TypeError),
        (np.bool_(True), TypeError),
        ("0.3", TypeError),
        (1j, TypeError),
        (torch.tensor(0.3), TypeError),
        (0, ValueError),
        (np.float32(-0.5), ValueError),
        (np.float64("nan"), ValueError),
        (float("inf"), ValueError),
        pytest.param(10**400, ValueError, id="10**400"),
    ],
)
def test_scale_errors(scale: object, err: type[Exception]) -> None:
    """A wrong type is a TypeError, a real number that is not positive and finite a ValueError; both name it."""
    q, k, v = qkv()
    with pytest.raises(err, match=r"scale must be a .* or None, got " + re.escape(repr(scale))):
        ring_attention(q, k, v, positions=torch.arange(12), scale=scale)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"positions": torch.arange(11)}, r"positions has 11 entries but q's local sequence has 12"),
        ({"positions": torch.arange(12.0)}, r"positions must be 1-D integer.*torch.float32"),
        ({"positions": torch.arange(12).view(1, 12)}, r"positions must be 1-D.*\(1, 12\)"),
        ({"scale": -1.0}, r"scale must be a positive finite float or None, got -1.0"),
        ({"scale": float("nan")}, r"scale must be .* got nan"),
        ({"cu_seqlens": torch.tensor([0, 5, 10])}, r"end at the sequence length 12, got last value 10"),
        ({"cu_seqlens": torch.tensor([0, 5, 12.0])}, r"cu_seqlens must be a 1-D int32 or int64"),
        (
            {"cu_seqlens": torch.tensor([0, 12]), "positions": torch.arange(12) + 1},
            r"in \[0, 12\); got .*1..12",
        ),
    ],
)
def test_argument_errors(kwargs: dict[str, object], match: str) -> None:
    q, k, v = qkv()
    args: dict[str, object] = {"positions": torch.arange(12), **kwargs}
    with pytest.raises(ValueError, match=match):
        ring_attention(q, k, v, **args)  # type: ignore[arg-type]


def test_packed_positions_must_be_offsets_not_rope_ids() -> None:
    """With cu_seqlens, positions locate each token's document; RoPE ids restarting per document (the easy mistake)
    would mask silently wrong, so they are refused, naming a repeated offset."""
    q, k, v = qkv()
    cu = torch.tensor([0, 5, 12])
    rope_ids = torch.cat([torch.arange(5), torch.arange(7)])  # what shard_positions gives with cu_seqlens
    with pytest.raises(
        ValueError, match=r"once across the ranks, but some repeat \(offset 0 on ranks \[0\]; .*shard_indices"
    ):
        ring_attention(q, k, v, positions=rope_ids, cu_seqlens=cu)
    ring_attention(q, k, v, positions=torch.arange(12).flip(0), cu_seqlens=cu)  # any order of the offsets


def test_shape_and_dtype_errors() -> None:
    q, k, v = qkv()
    pos = torch.arange(12)
    with pytest.raises(ValueError, match=r"q heads \(4\) must be a multiple of k/v heads \(3\)"):
        ring_attention(q, *torch.randn(2, 2, 12, 3, 8, dtype=torch.float64), positions=pos)
    with pytest.raises(ValueError, match=r"share one dtype.*float64.*float32"):
        ring_attention(q, k.float(), v, positions=pos)
    with pytest.raises(ValueError, match=r"k's head_dim 6 differs from q's 8"):
        ring_attention(q, k[..., :6], v, positions=pos)
    with pytest.raises(ValueError, match=r"q must be bshd.*\(2, 12, 32\)"):
        ring_attention(q.flatten(2), k, v, positions=pos)
    with pytest.raises(ValueError, match=r"k and v must have q's batch and sequence"):
        ring_attention(q, k[:, :10], v[:, :10], positions=pos)
    with pytest.raises(TypeError, match=r"causal must be True or False, got 'yes'"):
        ring_attention(q, k, v, positions=pos, causal="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"positions must be a torch.Tensor, got list"):
        ring_attention(q, k, v, positions=list(range(12)))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"group=.* torch.distributed is not initialized"):
        ring_attention(q, k, v, positions=pos, group=object())  # type: ignore[arg-type]
