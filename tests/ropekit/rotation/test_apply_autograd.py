"""apply_rope / apply_rope_tables under autograd: in-place rotation of saved tensors and views torch forbids, learnable
tables (gradcheck in float64; the gradient of the frequencies against the torch-ops formula on every backend)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from ropekit import RopeSpec, apply_rope, apply_rope_tables, rope_tables

SPEC = RopeSpec(head_dim=16, rotary_dim=12, base=10_000.0)


def _qk(b: int = 2, s: int = 5, hq: int = 4, hk: int = 2, d: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(b, s, hq, d), torch.randn(b, s, hk, d)


def _triton_runs() -> bool:
    try:
        from ropekit.rotation import triton_backend
    except ImportError:  # pragma: no cover - triton absent
        return False
    return triton_backend.available() and (torch.cuda.is_available() or triton_backend._interpret())


_INPLACE_BACKENDS = ["torch", "auto", "cpu"] + (["triton"] if _triton_runs() else [])
_SAVED = "modified by an inplace operation"


@pytest.mark.parametrize("backend", _INPLACE_BACKENDS)
@pytest.mark.parametrize("entry", ["apply_rope", "apply_rope_tables"])
@pytest.mark.parametrize("with_k", [False, True])
def test_inplace_rotation_of_a_saved_tensor_makes_backward_raise_as_torch_does(
    backend: str, entry: str, with_k: bool
) -> None:
    """The kernels write through raw pointers: they bump the version counters as torch's in-place ops do, so a
    tensor saved by another node (w * q saves q) and then rotated in place makes backward raise, as it does with
    backend="torch" (the oracle, run here too), instead of a silently wrong gradient. Three calls: the first is
    validated, the next ones take the stored plans (fast paths)."""
    from ropekit.kernels import cpu_build

    if backend == "cpu" and cpu_build.load() is None:
        pytest.skip("no C compiler: the fused CPU kernel is unavailable")
    dev = "cuda" if backend == "triton" and torch.cuda.is_available() else "cpu"
    pos = torch.arange(5, device=dev) + 3
    cos, sin = rope_tables(pos, SPEC, device=dev)
    for _ in range(3):
        q, k = (t.to(dev) for t in _qk())
        wq, wk = torch.randn_like(q, requires_grad=True), torch.randn_like(k, requires_grad=True)
        loss_q, loss_k = (wq * q).sum(), (wk * k).sum()  # mul saves q (and k) for wq's (wk's) gradient
        kk = k if with_k else None
        if entry == "apply_rope":
            apply_rope(q, kk, pos, SPEC, inplace=True, backend=backend)
        else:
            apply_rope_tables(q, kk, cos, sin, SPEC, inplace=True, backend=backend)
        with pytest.raises(RuntimeError, match=_SAVED):
            loss_q.backward()
        if with_k:
            with pytest.raises(RuntimeError, match=_SAVED):
                loss_k.backward()
        else:  # k was not written: its saved value is intact (no spurious bump)
            loss_k.backward()
            assert wk.grad is not None and torch.equal(wk.grad, k)
    # out of place nothing is written: backward runs and sees q as it was (no spurious bump either)
    q, k = (t.to(dev) for t in _qk())
    wq = torch.randn_like(q, requires_grad=True)
    loss_q = (wq * q).sum()
    apply_rope(q, k, pos, SPEC, backend=backend)
    loss_q.backward()
    assert wq.grad is not None and torch.equal(wq.grad, q)


def _leaf_view(x: torch.Tensor) -> torch.Tensor:
    return x[:, :, :2]


def _view_of_leaf_view(x: torch.Tensor) -> torch.Tensor:
    return x[:, :, :2][..., :]


def _unbind_view(x: torch.Tensor) -> torch.Tensor:
    return (x * 1.0).unbind(2)[0].unsqueeze(2)  # a view of a multi-output view (unbind): torch refuses it too


@pytest.mark.parametrize("backend", _INPLACE_BACKENDS)
@pytest.mark.parametrize("make", [_leaf_view, _view_of_leaf_view, _unbind_view])
@pytest.mark.parametrize("name", ["q", "k"])
def test_inplace_refuses_views_torch_forbids_before_writing(
    backend: str, make: Callable[[torch.Tensor], torch.Tensor], name: str
) -> None:
    """A view of a leaf that requires grad (or an output of unbind/split of a tensor that requires grad) cannot be
    modified in place: torch raises after the kernel wrote; ropekit refuses it first, naming the tensor, and
    writes nothing. Oracle: torch's own in-place op on the same view raises."""
    from ropekit.kernels import cpu_build

    if backend == "cpu" and cpu_build.load() is None:
        pytest.skip("no C compiler: the fused CPU kernel is unavailable")
    dev = "cuda" if backend == "triton" and torch.cuda.is_available() else "cpu"
    leaf = torch.randn(2, 5, 4, 16, device=dev, requires_grad=True)
    with pytest.raises(RuntimeError):  # the oracle: torch refuses modifying this view in place
        make(leaf).mul_(1.0)
    leaf = torch.randn(2, 5, 4, 16, device=dev, requires_grad=True)
    before = leaf.detach().clone()
    other = torch.randn(2, 5, 2, 16, device=dev)
    other0 = other.clone()
    view = make(leaf)
    q, k = (view, other) if name == "q" else (other, view)
    with pytest.raises(
        ValueError, match=rf"inplace=True but {name} is .*(view|several views).*inplace=False"
    ):
        apply_rope(q, k, torch.arange(5, device=dev), SPEC, inplace=True, backend=backend)
    assert torch.equal(leaf.detach(), before) and torch.equal(other, other0)
    # without grad mode torch allows it, and so does ropekit
    with torch.no_grad():
        view = make(leaf)
        view0 = view.clone()
        apply_rope(view, None, torch.arange(5, device=dev), SPEC, inplace=True, backend=backend)
    assert not torch.equal(view, view0)


# ---------------------------------------------------------------- learnable tables (training trial F4)
# cos/sin computed from a parameter (learnable frequencies) used to get no gradient at all: the autograd rule and the
# compiled op returned None for the tables, and a stored plan (decoding fast path) recorded nothing.


def _rotate_by_tables_ref(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, spec: RopeSpec, fmt: str
) -> torch.Tensor:
    """The rotation from its definition, in float64 torch ops (autograd differentiates it on its own): band i's
    channel pair (a, b) becomes (a cos_i - b sin_i, b cos_i + a sin_i); pairs (i, i + r/2) for "half", (2i, 2i + 1)
    for "interleaved"; tables [s, n] or [b, s, n] ([t, n] for "thd"), the same for every head."""
    r, n = 2 * spec.n_bands, spec.n_bands
    x = x.double()
    c, s = cos.double(), sin.double()
    if fmt == "thd":
        c, s = c[:, None], s[:, None]
    else:
        c, s = (c if c.dim() == 3 else c[None]), (s if s.dim() == 3 else s[None])
        c, s = (c[:, :, None], s[:, :, None]) if fmt == "bshd" else (c[:, None], s[:, None])
    if spec.layout == "half":
        a, b = x[..., :n], x[..., n:r]
        rot = torch.cat([a * c - b * s, b * c + a * s], -1)
    else:
        a, b = x[..., 0:r:2], x[..., 1:r:2]
        rot = torch.stack([a * c - b * s, b * c + a * s], -1).flatten(-2)
    return torch.cat([rot, x[..., r:]], -1)


_TABLE_CASES = [
    (RopeSpec(8, layout="half"), "bshd"),
    (RopeSpec(12, rotary_dim=8, layout="interleaved"), "bhsd"),
    (RopeSpec(12, rotary_dim=4, layout="half"), "thd"),
]


def _tables_shape(fmt: str, per_row: bool, n: int) -> tuple[int, ...]:
    return (3, n) if fmt == "thd" else ((2, 3, n) if per_row else (3, n))


def _x(fmt: str, h: int, d: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    shape = {"bshd": (2, 3, h, d), "bhsd": (2, h, 3, d), "thd": (3, h, d)}[fmt]
    return torch.randn(shape, dtype=dtype)


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("per_row", [False, True])
@pytest.mark.parametrize("backend", ["auto", "torch"])  # float64: the fused CPU kernel does not take it
@pytest.mark.parametrize(("spec", "fmt"), _TABLE_CASES)
def test_learnable_tables_gradcheck_float64(
    spec: RopeSpec, fmt: str, backend: str, per_row: bool, inplace: bool
) -> None:
    """gradcheck (finite differences) and gradgradcheck in float64 with respect to q, k, cos and sin."""
    if fmt == "thd" and per_row:
        pytest.skip("thd tables have no batch dimension")
    q, k = _x(fmt, 3, spec.head_dim).requires_grad_(), _x(fmt, 2, spec.head_dim).requires_grad_()
    shape = _tables_shape(fmt, per_row, spec.n_bands)
    cos = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    sin = torch.randn(shape, dtype=torch.float64, requires_grad=True)

    def f(q: torch.Tensor, k: torch.Tensor, c: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if inplace:  # non-leaf copies the rotation may overwrite
            q, k = q * 1.0, k * 1.0
        qo, ko = apply_rope_tables(q, k, c, s, spec, format=fmt, inplace=inplace, backend=backend)
        assert ko is not None
        return qo, ko

    assert torch.autograd.gradcheck(f, (q, k, cos, sin))
    assert torch.autograd.gradgradcheck(f, (q, k, cos, sin))
    # the same values as the definition (independent of ropekit's kernels)
    qo, _ = f(q, k, cos, sin)
    torch.testing.assert_close(qo, _rotate_by_tables_ref(q, cos, sin, spec, fmt), rtol=0, atol=1e-12)


@pytest.mark.parametrize("q_grad", [True, False])
@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("backend", _INPLACE_BACKENDS)
@pytest.mark.parametrize(("spec", "fmt"), _TABLE_CASES)
def test_learnable_frequencies_get_the_gradient_of_the_torch_ops_formula(
    spec: RopeSpec, fmt: str, backend: str, compiled: bool, inplace: bool, q_grad: bool
) -> None:
    """The finding's case: cos/sin = cos/sin(p * theta) with theta a parameter, float32 q (the fused CPU kernel's
    dtype), every backend, eager and compiled (aot_eager: the custom op's autograd rule), q requiring grad or not
    (that case raised torch's "leaf Variable ... in-place" error). Oracle: the same loss through
    :func:`_rotate_by_tables_ref` in float64, differentiated by autograd. A call with tables that do not require
    grad comes first, so that a stored plan for this geometry exists (it must not take the differentiable call)."""
    torch.manual_seed(0)
    dev = "cuda" if backend == "triton" and torch.cuda.is_available() else "cpu"  # as the tests above
    theta = torch.nn.Parameter(spec.inv_freq(dtype=torch.float64).clone().to(dev) * 1.3)
    pos = torch.arange(3, dtype=torch.float64, device=dev) + 2
    q0 = _x(fmt, 3, spec.head_dim, torch.float32).to(dev)
    weight = torch.randn(q0.shape, dtype=torch.float64).to(dev)

    def loss_of(q: torch.Tensor, th: torch.Tensor, rotate: Callable[..., torch.Tensor]) -> torch.Tensor:
        ang = pos[:, None] * th
        if fmt != "thd":
            ang = ang.expand(2, 3, spec.n_bands)  # per-row tables: summed over the batch in the backward too
        return (rotate(q, ang.cos().float(), ang.sin().float()).double() * weight).sum()

    def ropekit_rotate(q: torch.Tensor, c: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        x = q * 1.0 if inplace else q  # a non-leaf for in place
        return apply_rope_tables(x, None, c, s, spec, format=fmt, inplace=inplace, backend=backend)[0]

    fn = loss_of
    if compiled:
        torch._dynamo.reset()
        fn = torch.compile(loss_of, fullgraph=True, backend="aot_eager")
    with torch.no_grad():  # store the plan of this geometry first
        loss_of(q0.clone(), theta, ropekit_rotate)
    q = q0.clone().requires_grad_(q_grad)
    inputs = [theta, q] if q_grad else [theta]
    got = torch.autograd.grad(fn(q, theta, ropekit_rotate), inputs)
    qr = q0.double().requires_grad_(q_grad)
    want = torch.autograd.grad(
        loss_of(qr, theta, lambda x, c, s: _rotate_by_tables_ref(x, c, s, spec, fmt)),
        [theta, qr] if q_grad else [theta],
    )
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-4)
    assert got[0].abs().max() > 1e-3  # a gradient, not zeros
