"""The matrix's compiled rows (``torch.compile(ropekit Rotary)`` / ``torch.compile(ropekit apply_rope)``, full runs
only) rotate exactly as the eager ``apply_rope`` row of the same case does: a benchmark row that timed something
else (a graph break, a wrong in-place result) would compare nothing."""

from __future__ import annotations

import pytest
import torch

from ropekit.bench.matrix import Case, _impls


@pytest.mark.parametrize("name", ["torch.compile(ropekit Rotary)", "torch.compile(ropekit apply_rope)"])
def test_compiled_rows_rotate_like_eager_apply_rope(name: str) -> None:
    torch._dynamo.reset()
    impls = _impls(Case("decode", torch.float32, "half", batch=2, seq=1), "cpu", quick=False)
    eager = impls["ropekit apply_rope (exact tables per call)"]
    with torch.no_grad():
        q, k = eager()  # in place: the case's own q and k (rotated once; any values will do)
        q0, k0 = q.clone(), k.clone()
        cq, ck = impls[name]()  # compiled, in place
        assert cq is q and ck is k
        got = q.clone(), k.clone()
        q.copy_(q0)
        k.copy_(k0)
        eager()
    torch.testing.assert_close(got[0], q, rtol=0, atol=0)
    torch.testing.assert_close(got[1], k, rtol=0, atol=0)
    assert not torch.equal(got[0], q0)  # it rotated
