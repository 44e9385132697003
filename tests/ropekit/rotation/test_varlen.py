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
