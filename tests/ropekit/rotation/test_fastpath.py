"""The prepared-plan fast path (ropekit/rotation/fastpath.py): a repeated call skips validation only when everything
the stored plan relies on is the same as on the validated call -- for cos *and* sin (a user trial found sin's device
missing from the key: a sin moved to meta reached the C kernel as a bad pointer and the process died, SIGSEGV)."""

from __future__ import annotations

import pytest
import torch

from ropekit import RopeSpec, apply_rope_tables, rope_tables
from ropekit.kernels import cpu_build
from ropekit.rotation import fastpath
from tests.isolated import run_isolated
from tests.oracles import reference_rope

SPEC = RopeSpec(head_dim=8)


_run = run_isolated


@pytest.mark.skipif(cpu_build.load() is None, reason="no C compiler: no prepared plans")
def test_tables_plan_refuses_a_sin_on_another_device_on_every_call() -> None:
    """After a valid in-place call leaves a plan, the same call with sin on meta raises the validated call's
    ValueError (every time) and writes nothing; a valid call afterwards still rotates correctly (oracle: the
    float64 reference)."""
    got = _run(
        """
        import json, torch, ropekit
        from tests.oracles import reference_rope
        spec = ropekit.RopeSpec(head_dim=8)
        pos = torch.tensor([3])
        cos, sin = ropekit.rope_tables(pos, spec)
        q, k = torch.randn(1, 1, 2, 8), torch.randn(1, 1, 1, 8)
        ropekit.apply_rope_tables(q, k, cos, sin, spec, inplace=True)  # valid: leaves a prepared plan
        q0, k0 = q.clone(), k.clone()
        errors = []
        for _ in range(2):
            try:
                ropekit.apply_rope_tables(q, k, cos, sin.to("meta"), spec, inplace=True)
            except ValueError as e:
                errors.append(str(e))
        unchanged = torch.equal(q, q0) and torch.equal(k, k0)
        ropekit.apply_rope_tables(q, k, cos, sin, spec, inplace=True)
        err = max((q.double() - reference_rope(q0, pos, spec)).abs().max().item(),
                  (k.double() - reference_rope(k0, pos, spec)).abs().max().item())
        print(json.dumps({"errors": errors, "unchanged": unchanged, "err": err}))
        """
    )
    assert got["errors"] == ["sin is on meta but q is on cpu"] * 2
    assert got["unchanged"] is True
    assert got["err"] < 1e-6  # type: ignore[operator]


def test_key_holds_every_table_property_the_plan_relies_on() -> None:
    """dtype, device, shape and strides of cos and of sin each change the key (an equal key skips validation)."""
    q, k = torch.randn(1, 4, 2, 8), torch.randn(1, 4, 1, 8)
    cos, sin = rope_tables(torch.arange(4), SPEC)
    base = fastpath.key(q, k, cos, sin, SPEC, "bshd", True, "auto")
    assert base is not None
    variants = {
        "device": lambda t: t.to("meta"),
        "dtype": lambda t: t.double(),
        "shape": lambda t: t.unsqueeze(0),
        "strides": lambda t: torch.empty(t.shape[1], t.shape[0]).t().copy_(t),
    }
    for prop, change in variants.items():
        for which in ("cos", "sin"):
            c, s = (change(cos), sin) if which == "cos" else (cos, change(sin))
            assert fastpath.key(q, k, c, s, SPEC, "bshd", True, "auto") != base, (which, prop)


def test_tables_plan_still_serves_equal_geometry() -> None:
    """The fast path still fires for an equal call (the key did not become unique per call): oracle, the float64
    reference at the positions of the tables."""
    pos = torch.arange(5) + 11
    cos, sin = rope_tables(pos, SPEC)
    for _ in range(3):
        q = torch.randn(2, 5, 2, 8)
        out, _ = apply_rope_tables(q, None, cos, sin, SPEC)
        torch.testing.assert_close(out.double(), reference_rope(q, pos, SPEC), rtol=0, atol=1e-6)
    if cpu_build.load() is not None:
        key = fastpath.key(q, None, cos, sin, SPEC, "bshd", False, "auto")
        assert fastpath.lookup(key, SPEC) is not None


@pytest.mark.skipif(cpu_build.load() is None, reason="no C compiler: no prepared plans")
def test_run_cached_never_hands_rows_off_the_cpu_to_the_kernel() -> None:
    """A stored CPU plan run on a table cache whose rows are not on the CPU (a Rotary moved to meta, or to CUDA,
    after the plan was stored) returns None for the caller's checked path instead of passing the kernel a pointer it
    cannot read (SIGSEGV before); a CPU cache still gives the reference rotation."""
    got = _run(
        """
        import json, torch, ropekit
        from ropekit.rotation import fastpath
        from ropekit.table_cache import TableCache
        from tests.oracles import reference_rope
        spec = ropekit.RopeSpec(head_dim=8)
        q, k, pos = torch.randn(2, 5, 2, 8), torch.randn(2, 5, 1, 8), torch.arange(5)
        with torch.no_grad():
            ropekit.apply_rope(q.clone(), k.clone(), pos, spec)  # leaves the plan for this call geometry
            plan = fastpath.apply_lookup(fastpath.apply_key(q, k, pos, spec, "bshd", False, "auto"), spec)[0]
            results = []
            for positions in (pos, pos.to(torch.int32), pos.unsqueeze(0).expand(2, 5)):
                results.append(fastpath.run_cached(plan, q, k, TableCache(spec, torch.device("meta"), 8, 64), positions))
            out = fastpath.run_cached(plan, q, k, TableCache(spec, torch.device("cpu"), 8, 64), pos)
        err = max((out[0].double() - reference_rope(q, pos, spec)).abs().max().item(),
                  (out[1].double() - reference_rope(k, pos, spec)).abs().max().item())
        print(json.dumps({"meta": [r is None for r in results], "err": err}))
        """
    )
    assert got["meta"] == [True, True, True]
    assert got["err"] < 1e-6  # type: ignore[operator]
