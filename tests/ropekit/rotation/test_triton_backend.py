"""Triton kernels against the float64 reference; on CPU-only machines through TRITON_INTERPRET=1 (conftest)."""

from __future__ import annotations

import itertools
import os

import pytest
import torch

from ropekit import RopeSpec, apply_rope, apply_rope_varlen, positions_from_cu_seqlens
from tests.oracles import TOL, reference_rope

triton_backend = pytest.importorskip("ropekit.rotation.triton_backend")
if not triton_backend.available():
    pytest.skip("triton is not installed", allow_module_level=True)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no CUDA device and TRITON_INTERPRET is not set", allow_module_level=True)


def _x(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return (torch.rand(shape, dtype=torch.float64) * 2 - 1).to(DEVICE, dtype)


@pytest.mark.parametrize(
    "dtype,layout,fmt,inplace,rot",
    list(
        itertools.product(
            [torch.float32, torch.bfloat16, torch.float16],
            ["half", "interleaved"],
            ["bshd", "bhsd", "thd"],
            [False, True],
            [None, 12],
        )
    ),
)
def test_matches_reference_q_and_k_in_one_launch(dtype, layout, fmt, inplace, rot) -> None:
    spec = RopeSpec(32, base=500_000.0, rotary_dim=rot, layout=layout)
    b, s, hq, hk = (1 if fmt == "thd" else 2), 5, 6, 2
    shape = {"bshd": (b, s, hq, 32), "bhsd": (b, hq, s, 32), "thd": (s, hq, 32)}[fmt]
    kshape = {"bshd": (b, s, hk, 32), "bhsd": (b, hk, s, 32), "thd": (s, hk, 32)}[fmt]
    q, k = _x(shape, dtype), _x(kshape, dtype)
    pos = (torch.randint(0, 2**24, (s,)) if fmt == "thd" else torch.randint(0, 2**24, (b, s))).to(DEVICE)
    q0, k0 = q.clone(), k.clone()
    qr, kr = apply_rope(q, k, pos, spec, format=fmt, inplace=inplace, backend="triton")
    assert (qr is q) == inplace and (kr is k) == inplace
    torch.testing.assert_close(
        qr.double().cpu(), reference_rope(q0.cpu(), pos.cpu(), spec, format=fmt), rtol=0, atol=TOL[dtype]
    )
    torch.testing.assert_close(
        kr.double().cpu(), reference_rope(k0.cpu(), pos.cpu(), spec, format=fmt), rtol=0, atol=TOL[dtype]
    )
    if inplace and rot is not None:
        assert torch.equal(q[..., rot:], q0[..., rot:])


@pytest.mark.parametrize("fmt", ["bshd", "bhsd", "thd"])
def test_tables_read_from_the_packed_cache_with_their_row_stride(fmt: str) -> None:
    """Integer positions below the shared cache's limit come as row views of the packed [L, 2, n] cache (row stride
    2n): the launch reads them with that stride, no copy, and matches the float64 reference."""
    from ropekit.table_cache import is_row_view, shared_tables

    spec = RopeSpec(32, base=10_000.0)
    b, s = (1 if fmt == "thd" else 2), 7
    pos = (torch.randint(0, 1000, (s,)) if fmt == "thd" else torch.randint(0, 1000, (b, s))).to(DEVICE)
    hit = shared_tables(pos, spec)
    assert hit is not None and is_row_view(hit[0]) and not hit[0].is_contiguous()
    shape = {"bshd": (b, s, 4, 32), "bhsd": (b, 4, s, 32), "thd": (s, 4, 32)}[fmt]
    q, k = _x(shape, torch.float32), _x(shape, torch.float32)
    qr, kr = apply_rope(q.clone(), k.clone(), pos, spec, format=fmt, backend="triton")
    for got, x in ((qr, q), (kr, k)):
        torch.testing.assert_close(
            got.double().cpu(), reference_rope(x.cpu(), pos.cpu(), spec, format=fmt), rtol=0, atol=TOL[torch.float32]
        )


def test_backward_is_the_inverse_rotation() -> None:
    spec = RopeSpec(32, rotary_dim=16)
    pos = torch.tensor([[0, 9, 7_000_000]], device=DEVICE)
    x = _x((1, 3, 4, 32), torch.float32).requires_grad_()
    g = _x((1, 3, 4, 32), torch.float32)
    (gx,) = torch.autograd.grad(apply_rope(x, None, pos, spec, backend="triton")[0], x, g)
    torch.testing.assert_close(
        gx.double().cpu(), reference_rope(g.cpu(), -pos.cpu(), spec), rtol=0, atol=1e-6
    )


def test_packed_varlen_with_cu_seqlens_and_offsets() -> None:
    spec = RopeSpec(32, layout="interleaved")
    cu = torch.tensor([0, 3, 8, 10], dtype=torch.int32)
    q, k = _x((10, 4, 32), torch.float32), _x((10, 2, 32), torch.float32)
    offsets = torch.tensor([0, 100, 5000])
    qr, kr = apply_rope_varlen(q, k, cu, spec, offsets=offsets, backend="triton")
    pos = positions_from_cu_seqlens(cu) + torch.repeat_interleave(offsets, torch.tensor([3, 5, 2]))
    torch.testing.assert_close(
        qr.double().cpu(), reference_rope(q.cpu(), pos, spec, format="thd"), rtol=0, atol=1e-6
    )
    torch.testing.assert_close(
        kr.double().cpu(), reference_rope(k.cpu(), pos, spec, format="thd"), rtol=0, atol=1e-6
    )
    with pytest.raises(ValueError, match="cu_seqlens ends at 10"):
        apply_rope_varlen(q[:9], None, cu, spec)


def test_explicit_triton_refused_where_it_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    x = torch.randn(1, 2, 2, 32)
    x0 = x.clone()
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="backend='triton' needs CUDA tensors"):
            apply_rope(x, None, torch.arange(2), RopeSpec(32), backend="triton", inplace=True)
        assert torch.equal(x, x0)


@pytest.mark.parametrize("backend", ["triton", "cpu"])
def test_int64_offsets_beyond_2_31_elements(backend: str) -> None:
    """A view whose element offsets exceed 2^31 (4 GiB of fp16 storage): int64 indexing in both kernels."""
    if backend == "cpu" and DEVICE != "cpu":
        pytest.skip("CPU kernel test runs on CPU-only machines")
    big = torch.zeros(2**31 + 4096, dtype=torch.float16, device=DEVICE)
    x = big.as_strided((2, 1, 1, 64), (2**31, 64, 64, 1))  # the second row starts past element 2^31
    x.copy_(_x((2, 1, 1, 64), torch.float16))
    ref = reference_rope(x.cpu(), torch.tensor([[3], [4]]), RopeSpec(64))
    apply_rope(x, None, torch.tensor([[3], [4]], device=DEVICE), RopeSpec(64), inplace=True, backend=backend)
    torch.testing.assert_close(x.double().cpu(), ref, rtol=0, atol=2e-3)
    del big


@pytest.mark.parametrize("with_k", [False, True])
def test_in_place_launches_bump_the_version_counters(with_k: bool) -> None:
    """A launch writes through raw pointers: in place it bumps the version counters of q and k, as torch's in-place
    ops do, so a saved tensor rotated in place makes backward raise (as the PyTorch backend's in-place rotation
    makes it raise: the oracle); out of place nothing is bumped. The repeat goes through the stored launch."""
    spec = RopeSpec(16, base=1e4)
    cos = torch.rand(1, 5, 8, dtype=torch.float64).to(DEVICE, torch.float32)
    sin = torch.rand(1, 5, 8, dtype=torch.float64).to(DEVICE, torch.float32)
    for rotate in ("torch", "triton", "triton"):
        q, k = _x((2, 5, 4, 16), torch.float32), _x((2, 5, 2, 16), torch.float32)
        wq, wk = torch.randn_like(q, requires_grad=True), torch.randn_like(k, requires_grad=True)
        losses = [(wq * q).sum()] + ([(wk * k).sum()] if with_k else [])
        if rotate == "torch":  # the oracle: the PyTorch backend's in-place rotation
            from ropekit.rotation import torch_backend

            for x in (q, k) if with_k else (q,):
                torch_backend.raw_rotate(x, cos[:, :, None], sin[:, :, None], 16, spec.layout, True)
        else:
            triton_backend.rotate_qk(q, k if with_k else None, cos, sin, 16, spec.layout, True)
        for loss in losses:
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                loss.backward()
    q, k = _x((2, 5, 4, 16), torch.float32), _x((2, 5, 2, 16), torch.float32)
    versions = q._version, k._version
    triton_backend.rotate_qk(q, k if with_k else None, cos, sin, 16, spec.layout, False)
    assert (q._version, k._version) == versions
