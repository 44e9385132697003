"""apply_rope_varlen: packed documents get offsets[j] + 0, 1, ... (oracle: the float64 reference per document); bool
offsets and offsets whose positions would pass int64 are refused before anything is rotated (a user trial found
True / False read as 1 / 0 and positions wrapping to -2^63)."""

from __future__ import annotations

import pytest
import torch

from ropekit import RopeSpec, apply_rope_varlen
from tests.oracles import reference_rope

SPEC = RopeSpec(16, base=10_000.0)
I64_MAX = 2**63 - 1


def test_documents_rotate_at_their_offsets() -> None:
    q = torch.randn(9, 2, 16, dtype=torch.float64)
    cu = torch.tensor([0, 4, 4, 9])
    offsets = torch.tensor([7, -3, 100_000])
    out, _ = apply_rope_varlen(q, None, cu, SPEC, offsets=offsets)
    for j, (a, b) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        pos = offsets[j] + torch.arange(b - a)
        torch.testing.assert_close(
            out[a:b], reference_rope(q[a:b], pos, SPEC, format="thd"), rtol=0, atol=1e-10
        )


@pytest.mark.parametrize(
    ("offsets", "msg"),
    [
        (torch.tensor([True, False]), "offsets must be an integer tensor"),
        (torch.tensor([0, I64_MAX - 3]), r"offsets\[1\] \+ document length - 1 must fit int64"),
        (torch.tensor([I64_MAX - 2, 0]), r"offsets\[0\] \+ document length - 1 must fit int64"),
    ],
)
def test_bad_offsets_are_refused_before_rotating(offsets: torch.Tensor, msg: str) -> None:
    q = torch.randn(9, 2, 16)
    before = q.clone()
    with pytest.raises(ValueError, match=msg):
        apply_rope_varlen(q, None, torch.tensor([0, 4, 9]), SPEC, offsets=offsets, inplace=True)
    assert torch.equal(q, before)
    # the largest offsets that still fit are accepted: 4 and 5 tokens end exactly at int64's maximum
    apply_rope_varlen(
        q, None, torch.tensor([0, 4, 9]), SPEC, offsets=torch.tensor([I64_MAX - 3, I64_MAX - 4])
    )


@pytest.mark.parametrize("which", ["cu_seqlens", "offsets"])
def test_meta_cu_seqlens_or_offsets_with_q_on_cpu_are_refused(which: str) -> None:
    """cu_seqlens or offsets on meta (no values) with q on the CPU: the ValueError apply_rope gives for meta positions,
    naming the argument, before anything is written (a user trial got torch's 'Cannot copy out of meta tensor')."""
    q, k = torch.randn(9, 2, 16), torch.randn(9, 1, 16)
    q0, k0 = q.clone(), k.clone()
    cu, offsets = torch.tensor([0, 4, 9]), torch.tensor([3, 5])
    if which == "cu_seqlens":
        cu = cu.to("meta")
    else:
        offsets = offsets.to("meta")
    with pytest.raises(ValueError, match=f"{which} is on the meta device \\(no values\\) but q is on cpu"):
        apply_rope_varlen(q, k, cu, SPEC, offsets=offsets, inplace=True)
    assert torch.equal(q, q0) and torch.equal(k, k0)


def test_meta_q_with_meta_cu_seqlens_or_offsets_gives_meta_outputs() -> None:
    """Shape inference: with q on meta, cu_seqlens and offsets may each be on meta or the CPU."""
    q, k = torch.empty(9, 2, 16, device="meta"), torch.empty(9, 1, 16, device="meta")
    for cu_dev in ("cpu", "meta"):
        for off_dev in ("cpu", "meta", None):
            offsets = None if off_dev is None else torch.tensor([3, 5], device=off_dev)
            qo, ko = apply_rope_varlen(q, k, torch.tensor([0, 4, 9], device=cu_dev), SPEC, offsets=offsets)
            assert qo.is_meta and qo.shape == q.shape
            assert ko is not None and ko.is_meta and ko.shape == k.shape


def test_compiled_packed_training_one_graph_for_every_token_count() -> None:
    """Packed-sequence training changes the token count every batch. q.shape[0] went through
    positions.ids.check_int, whose operator.index specialised it: one graph per count, then fullgraph's hard
    failure at the recompile limit (training trial F3). Ten counts: at most two graphs; values against the float64
    reference per document, gradients against eager autograd."""
    from torch._dynamo.testing import CompileCounterWithBackend

    def rotate(
        q: torch.Tensor, k: torch.Tensor, cu: torch.Tensor, off: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        qo, ko = apply_rope_varlen(q, k, cu, SPEC, offsets=off)
        assert ko is not None
        return qo, ko

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(rotate, fullgraph=True, backend=counter)
    for t in range(5, 15):
        cu, off = torch.tensor([0, 2, 2, t]), torch.tensor([5, 0, 1000])
        q = torch.randn(t, 4, 16, dtype=torch.float64, requires_grad=True)
        k = torch.randn(t, 2, 16, dtype=torch.float64, requires_grad=True)
        qo, ko = compiled(q, k, cu, off)
        for j, (a, b) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
            pos = off[j] + torch.arange(b - a)
            torch.testing.assert_close(
                qo[a:b], reference_rope(q[a:b], pos, SPEC, format="thd"), rtol=0, atol=1e-10
            )
            torch.testing.assert_close(
                ko[a:b], reference_rope(k[a:b], pos, SPEC, format="thd"), rtol=0, atol=1e-10
            )
        w = torch.randn_like(qo)
        got = torch.autograd.grad((qo * w).sum() + ko.sum(), (q, k))
        eq, ek = rotate(q, k, cu, off)
        want = torch.autograd.grad((eq * w).sum() + ek.sum(), (q, k))
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    assert counter.frame_count <= 2, f"{counter.frame_count} graphs for 10 token counts"
