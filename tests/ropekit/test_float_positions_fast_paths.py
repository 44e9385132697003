"""Where float positions must NOT take the C tables (ropekit.phases._kernel_tables), and the kernel's own refusal.

The kernel reads positions through a pointer: forward-mode tangents, a dispatch mode recording the ops, and a
missing kernel must all get the PyTorch path (differentiable, visible op by op), with exact values; integer
positions keep the PyTorch path too (the shared cache's rows are bit-identical to it). Oracles: cos/sin written from
the formula in float64 (``math``), never ropekit's tables.
"""

from __future__ import annotations

import math
from unittest import mock

import pytest
import torch
import torch.autograd.forward_ad as fwad
from torch.utils._python_dispatch import TorchDispatchMode
from typing_extensions import Self

from ropekit import RopeSpec, rope_tables
from ropekit.kernels import cpu_build
from ropekit.phases import _kernel_tables, band_constant_tensor

pytestmark = pytest.mark.skipif(
    cpu_build.load() is None, reason="no C compiler: the CPU kernel is unavailable"
)

SPEC = RopeSpec(head_dim=4, base=16.0)  # frequencies 1 and 1/4, exact in float64: the angle is x * theta
THETAS = (1.0, 0.25)
XS = [0.5, 3.25, -7.125]


def _want(x: float, th: float) -> tuple[float, float]:
    return math.cos(x * th), math.sin(x * th)  # x * theta is exact (theta 1 or 1/4)


class _Ops(TorchDispatchMode):
    """Collects the overload packets (``torch.ops.aten.cos``, ...) of the aten ops that reach it."""

    seen: set[object]

    def __enter__(self) -> Self:
        self.seen = set()
        return super().__enter__()  # type: ignore[no-any-return]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.seen.add(func.overloadpacket)
        return func(*args, **(kwargs or {}))


def test_forward_ad_tangent_of_float_positions_is_kept() -> None:
    """d cos(x theta) / dx = -theta sin(x theta): the kernel would drop the tangent; the PyTorch path carries it."""
    with fwad.dual_level():
        pos = fwad.make_dual(torch.tensor(XS, dtype=torch.float64), torch.ones(3, dtype=torch.float64))
        cos, sin = rope_tables(pos, SPEC, dtype=torch.float64)
        dcos, dsin = fwad.unpack_dual(cos).tangent, fwad.unpack_dual(sin).tangent
    assert dcos is not None and dsin is not None
    for i, x in enumerate(XS):
        for j, th in enumerate(THETAS):
            c, s = _want(x, th)
            assert abs(float(dcos[i, j]) + th * s) < 1e-14
            assert abs(float(dsin[i, j]) - th * c) < 1e-14


def test_dispatch_mode_sees_the_ops() -> None:
    """Under a dispatch mode (make_fx, a logging or flop-counting mode) the computation stays visible op by op."""
    with _Ops() as mode:
        cos, _ = rope_tables(torch.tensor(XS, dtype=torch.float64), SPEC, dtype=torch.float64)
    assert torch.ops.aten.cos in mode.seen
    assert abs(float(cos[1, 0]) - _want(3.25, 1.0)[0]) < 5e-15


def test_no_kernel_gives_the_pytorch_path_with_the_same_values() -> None:
    """No compiler (cpu_build.load() is None): the PyTorch path, exact."""
    with mock.patch.object(cpu_build, "load", return_value=None), _Ops() as mode:
        cos, sin = rope_tables(torch.tensor(XS, dtype=torch.float32), SPEC, dtype=torch.float64)
    assert torch.ops.aten.cos in mode.seen
    for i, x in enumerate(XS):
        for j, th in enumerate(THETAS):
            assert abs(float(cos[i, j]) - _want(x, th)[0]) < 5e-15
            assert abs(float(sin[i, j]) - _want(x, th)[1]) < 5e-15


def test_integer_positions_never_call_the_kernel() -> None:
    """Integer positions keep the PyTorch path (the shared cache's rows must stay bit-identical to it)."""
    lib = cpu_build.load()
    fake = mock.Mock(ropekit_phase_tables=mock.Mock(side_effect=AssertionError("kernel called")))
    with mock.patch.object(cpu_build, "load", return_value=fake):
        cos, _ = rope_tables(torch.tensor([3, 40_000_000]), SPEC, dtype=torch.float64)
        # float positions do call it (the mock above is the one looked up)
        with pytest.raises(AssertionError, match="kernel called"):
            rope_tables(torch.tensor([3.0]), SPEC)
    assert lib is not None
    assert abs(float(cos[0, 1]) - math.cos(0.75)) < 5e-15


@pytest.mark.parametrize("bad", [math.nan, math.inf, -(2.0**63)])
def test_kernel_refuses_positions_past_the_bound(bad: float) -> None:
    """The C function re-checks |x| < 2^63 before writing (check_positions refuses first on every public path): a
    ValueError naming positions and the value, not a silent table."""
    pos = torch.tensor([1.0, bad], dtype=torch.float64)
    consts = band_constant_tensor(SPEC, None, torch.device("cpu"))
    with pytest.raises(
        ValueError, match=r"positions must be finite with magnitude below 2\*\*63, found"
    ) as e:
        _kernel_tables(pos, consts, 1.0, torch.float32)
    assert repr(bad) in str(e.value)
