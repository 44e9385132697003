"""Backend dispatch: an explicit backend runs that backend or raises (eager and compiled), "auto" chooses, and
validation does not depend on the prepared plans of earlier calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from ropekit import RopeSpec, Rotary, apply_rope, apply_rope_tables, rope_tables
from ropekit.kernels import cpu_build
from ropekit.rotation import cpu_backend, torch_backend
from tests.oracles import TOL, reference_rope

needs_kernel = pytest.mark.skipif(
    cpu_build.load() is None, reason="no C compiler: the fused CPU kernel is unavailable"
)


def _triton_on_cpu() -> bool:
    from ropekit.rotation import triton_backend

    return triton_backend.available() and triton_backend._interpret()


SPEC = RopeSpec(32, base=10_000.0, rotary_dim=24)
POS = torch.tensor([0, 5, 70_000])


def _q(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(2, 3, 4, 32, dtype=torch.float64).to(dtype)


def _strided() -> torch.Tensor:
    return torch.randn(2, 3, 4, 64)[..., ::2]  # last dim of stride 2


# (what, q, k, the reason the message must give)
_REFUSED = [
    ("float64 q", lambda: _q(torch.float64), lambda: None, "q: its dtype is torch.float64"),
    ("stride-2 q", _strided, lambda: None, "q: its last dim has stride 2"),
    ("float64 k", lambda: _q(), lambda: _q(torch.float64)[:, :, :2], "k: its dtype is torch.float64"),
    ("stride-2 k", lambda: _q(), lambda: _strided()[:, :, :2], "k: its last dim has stride 2"),
]


def _call(entry: str, q: torch.Tensor, k: torch.Tensor | None, backend: str, inplace: bool) -> Any:
    if entry == "apply_rope":
        return apply_rope(q, k, POS, SPEC, inplace=inplace, backend=backend)
    cos, sin = rope_tables(POS, SPEC)
    return apply_rope_tables(q, k, cos, sin, SPEC, inplace=inplace, backend=backend)


@pytest.mark.parametrize("backend", ["cpu", "triton"])
@pytest.mark.parametrize("entry", ["apply_rope", "apply_rope_tables"])
@pytest.mark.parametrize("what,make_q,make_k,reason", _REFUSED, ids=[r[0] for r in _REFUSED])
def test_explicit_backend_refuses_what_it_cannot_rotate_before_writing(
    backend: str,
    entry: str,
    what: str,
    make_q: Callable[[], torch.Tensor],
    make_k: Callable[[], torch.Tensor | None],
    reason: str,
) -> None:
    """Finding 3: backend='cpu' / 'triton' never silently runs the PyTorch backend: a ValueError names the backend,
    the tensor and why, and what the backend takes; q and k are untouched even in place (k's refusal comes before q
    is rotated). backend='auto' rotates the same inputs (the float64 oracle)."""
    if backend == "cpu" and cpu_build.load() is None:
        pytest.skip("no C compiler: the fused CPU kernel is unavailable")
    if backend == "triton" and not _triton_on_cpu():
        pytest.skip("needs triton with TRITON_INTERPRET=1 (the CPU interpreter)")
    q, k = make_q(), make_k()
    q0, k0 = q.clone(), None if k is None else k.clone()
    ran: list[str] = []
    orig = torch_backend.raw_rotate

    def spy(*a: Any, **kw: Any) -> torch.Tensor:
        ran.append("torch")
        return orig(*a, **kw)

    takes = "float32, bfloat16 or float16"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch_backend, "raw_rotate", spy)  # what a silent fallback would call
        for inplace in (False, True):
            with pytest.raises(ValueError, match=rf"backend='{backend}' cannot rotate {reason}") as err:
                _call(entry, q, k, backend, inplace)
            assert takes in str(err.value) and "backend='auto'" in str(err.value)
            assert torch.equal(q, q0) and (k is None or torch.equal(k, k0))
    assert ran == []
    got_q, got_k = _call(entry, q, k, "auto", False)
    for x, got in ((q, got_q), (k, got_k)):
        if x is not None:  # randn values of a few units: 4 x the unit tolerance (float32 tables: float32's)
            tol = 4 * TOL[x.dtype if entry == "apply_rope" else torch.float32]
            torch.testing.assert_close(got.double(), reference_rope(x, POS, SPEC), rtol=0, atol=tol)


@needs_kernel
def test_explicit_cpu_backend_without_the_kernel_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 3: with no kernel (no compiler, disabled) backend='cpu' raises with the build's reason instead of
    running PyTorch after a warning; 'auto' rotates with the PyTorch backend."""
    cpu_backend.grain(torch.bfloat16)  # the real build's answers are cached before the kernel is switched off
    info = cpu_build.BuildInfo(False, None, False, 0.0, "no C compiler found (set $CC)")
    monkeypatch.setattr(cpu_build, "_state", {"lib": None, "info": info})
    q = _q()
    q0 = q.clone()
    with pytest.raises(
        ValueError, match=r"backend='cpu' cannot rotate q: the fused CPU kernel is unavailable \(no C"
    ):
        apply_rope(q, None, POS, SPEC, inplace=True, backend="cpu")
    assert torch.equal(q, q0)
    got, _ = apply_rope(q, None, POS, SPEC)
    torch.testing.assert_close(
        got.double(), reference_rope(q, POS, SPEC), rtol=0, atol=4 * TOL[torch.float32]
    )


@needs_kernel
def test_internal_callers_keep_working_on_inputs_the_kernel_cannot_take() -> None:
    """Rotary chooses ("auto"): float64 and strided inputs still rotate (as the oracle does)."""
    rot = Rotary(SPEC)
    for q in (_q(torch.float64), _strided()):
        got, _ = rot(q, None, positions=POS)
        torch.testing.assert_close(got.double(), reference_rope(q, POS, SPEC), rtol=0, atol=4 * TOL[q.dtype])


# ------------------------------------------------------------------------------------------- torch.compile
@needs_kernel
@pytest.mark.parametrize("inplace", [False, True])
def test_compiled_calls_honour_the_backend(monkeypatch: pytest.MonkeyPatch, inplace: bool) -> None:
    """Finding 4: under torch.compile, backend='torch' runs the PyTorch backend and never the C kernel, forward and
    backward, bit-identical to the eager call; backend='cpu' runs the kernel."""
    ran: list[str] = []
    orig_cpu, orig_torch = cpu_backend.raw_rotate, torch_backend.raw_rotate

    def spy_cpu(*a: Any, **kw: Any) -> torch.Tensor:
        ran.append("cpu")
        return orig_cpu(*a, **kw)

    def spy_torch(*a: Any, **kw: Any) -> torch.Tensor:
        ran.append("torch")
        return orig_torch(*a, **kw)

    orig_plan_run = cpu_backend.Plan.run

    def spy_plan(*a: Any, **kw: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        ran.append("cpu")  # the compiled ops' prepared kernel call (ropekit.rotation.ops._cpu_call)
        return orig_plan_run(*a, **kw)

    monkeypatch.setattr(cpu_backend, "raw_rotate", spy_cpu)
    monkeypatch.setattr(cpu_backend.Plan, "run", spy_plan)
    monkeypatch.setattr(torch_backend, "raw_rotate", spy_torch)
    q0, k0 = torch.randn(2, 3, 4, 32), torch.randn(2, 3, 2, 32)
    g = torch.randn(2, 3, 4, 32)
    for backend in ("torch", "cpu"):

        def fn(q: torch.Tensor, k: torch.Tensor, backend: str = backend) -> tuple[torch.Tensor, torch.Tensor]:
            if inplace:
                q, k = q * 1.0, k * 1.0
            qo, ko = apply_rope(q, k, POS, SPEC, inplace=inplace, backend=backend)
            assert ko is not None
            return qo, ko

        results = []
        for compiled in (False, True):
            torch._dynamo.reset()
            run = torch.compile(fn, fullgraph=True, backend="aot_eager") if compiled else fn
            q, k = q0.clone().requires_grad_(), k0.clone().requires_grad_()
            ran.clear()
            qo, ko = run(q, k)
            (gq,) = torch.autograd.grad((qo * g).sum() + ko.sum(), (q,))
            results.append((qo.detach(), ko.detach(), gq))
            if compiled:
                assert ran and set(ran) == {backend}, (backend, ran)
        for a, b in zip(*results):
            assert torch.equal(a, b)


def test_compiled_explicit_backend_refuses_what_it_cannot_rotate() -> None:
    """Finding 3 under torch.compile: the refusal is raised while tracing (fullgraph reports it in its error)."""
    if cpu_build.load() is None:
        pytest.skip("no C compiler: the fused CPU kernel is unavailable")
    torch._dynamo.reset()
    fn = torch.compile(lambda q: apply_rope(q, None, POS, SPEC, backend="cpu"), backend="aot_eager")
    with pytest.raises(ValueError, match="backend='cpu' cannot rotate q: its dtype is torch.float64"):
        fn(_q(torch.float64))


# ------------------------------------------------------------------------------------- validation vs. plans
@needs_kernel
@pytest.mark.parametrize("entry", ["apply_rope", "apply_rope_tables", "Rotary"])
def test_inplace_must_be_a_bool_on_every_call(entry: str) -> None:
    """Finding 9: inplace=1 (or 0) is refused on every call, also after a validated inplace=True (False) call left a
    prepared plan for the same geometry (1 == True: the plan key must not let it through); q is untouched."""
    spec = RopeSpec(32)
    rot = Rotary(spec)
    cos, sin = rope_tables(POS, spec)

    def call(q: torch.Tensor, inplace: Any) -> Any:
        if entry == "apply_rope":
            return apply_rope(q, None, POS, spec, inplace=inplace)
        if entry == "apply_rope_tables":
            return apply_rope_tables(q, None, cos, sin, spec, inplace=inplace)
        return rot(q, None, positions=POS, inplace=inplace)

    for valid, number in ((True, 1), (False, 0)):
        q = _q()
        q0 = q.clone()
        call(q.clone(), valid)
        call(q.clone(), valid)  # the prepared plan's call
        for _ in range(2):
            with pytest.raises(TypeError, match=rf"inplace must be a bool, got {number}"):
                call(q, number)
            assert torch.equal(q, q0)
