"""The Triton paths users meet on a GPU: every launch configuration, the "auto" dispatch of every public entry point,
autograd, CUDA graphs and torch.compile, against the float64 reference.

Launch-configuration tests also run on CPU-only machines through TRITON_INTERPRET=1 (conftest); the rest need a CUDA
device and are skipped without one (bench/gpu.py and docs/kernels.md say where they last ran).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from ropekit import (
    RopeSpec,
    Rotary,
    apply_rope,
    apply_rope_tables,
    apply_rope_varlen,
    positions_from_cu_seqlens,
    rope_tables,
)
from tests.oracles import TOL, reference_rope
from tests.ropekit.rotation.triton_device import CUDA, DEVICE, triton_backend, triton_positions

needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")


def _x(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (torch.rand(shape, dtype=torch.float64) * 2 - 1).to(DEVICE, dtype)


def _close(got: torch.Tensor, x: torch.Tensor, pos: torch.Tensor, spec: RopeSpec, fmt: str = "bshd") -> None:
    want = reference_rope(x.cpu(), pos.cpu(), spec, format=fmt)
    torch.testing.assert_close(got.double().cpu(), want, rtol=0, atol=TOL[x.dtype])


@pytest.mark.parametrize(
    "block_h,block_t,head_loop,split,layout",
    [
        (bh, bt, hl, sp, lay)
        for bh, bt, hl, (sp, lay) in itertools.product(
            (1, 4, 16), (1, 3), (0, 1), ((0, "half"), (0, "interleaved"), (1, "interleaved"))
        )
    ],
)
def test_every_launch_configuration_matches_the_reference(
    block_h: int, block_t: int, head_loop: int, split: int, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Heads per program, tokens per program (with a ragged last block: 2 x 5 tokens), one program for all heads
    or one per head block, and the interleaved load style: each is a different program, each must compute the same
    rotation, partial rotary included, with tables given and at positions."""
    cfg = {"block_h": block_h, "block_t": block_t, "num_warps": 4 if block_h == 16 else 1, "split": split}
    monkeypatch.setattr(triton_backend, "_TUNE", {**cfg, "head_loop": head_loop})
    spec = RopeSpec(32, base=10_000.0, rotary_dim=24, layout=layout)
    q, k = _x((2, 5, 6, 32)), _x((2, 5, 2, 32))
    pos = torch.randint(0, 2**20, (2, 5)).to(DEVICE)
    qr, kr = apply_rope(q, k, pos, spec, backend="triton")
    _close(qr, q, pos, spec)
    _close(kr, k, pos, spec)
    pos = torch.randint(triton_positions.DEVICE_ROWS - 5, triton_positions.DEVICE_ROWS + 5, (2, 5)).to(DEVICE)
    qp, kp = triton_positions.rotate_qk_positions(q, k, pos, spec, False)  # table rows and float64 rows
    _close(qp, q, pos, spec)
    _close(kp, k, pos, spec)


def test_the_chosen_configuration_is_a_valid_launch() -> None:
    for hq, hk, n, t, lay in itertools.product(
        (1, 8, 32, 64), (1, 8), (8, 64), (1, 64, 32768), ("half", "interleaved")
    ):
        cfg = triton_backend.launch_config(hq, hk, n, t, lay)
        assert cfg["block_h"] & (cfg["block_h"] - 1) == 0 and cfg["block_t"] >= 1
        assert cfg["num_warps"] in (1, 2, 4, 8, 16) and cfg["split"] in (0, 1)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fmt", ["bshd", "bhsd", "thd"])
def test_auto_backend_on_cuda_is_exact_for_llama_shapes(dtype: torch.dtype, fmt: str) -> None:
    """Llama-3-70B heads (64 q / 8 kv, d 128: several head blocks per token), positions up to 2^24, out of place
    into poisoned memory: every element of the result is written and right."""
    spec = RopeSpec(128, base=500_000.0)
    b, s, hq, hk = (1 if fmt == "thd" else 2), 33, 64, 8
    shp = {"bshd": lambda h: (b, s, h, 128), "bhsd": lambda h: (b, h, s, 128), "thd": lambda h: (s, h, 128)}[
        fmt
    ]
    q, k = _x(shp(hq), dtype), _x(shp(hk), dtype)
    pos = (torch.randint(0, 2**24, (s,)) if fmt == "thd" else torch.randint(0, 2**24, (b, s))).to(DEVICE)
    junk = [torch.full_like(q, float("nan")), torch.full_like(k, float("nan"))]
    del junk  # the caching allocator hands these NaN-filled blocks to the outputs below
    qr, kr = apply_rope(q, k, pos, spec, format=fmt)
    assert qr.device.type == "cuda" and qr.dtype == dtype
    _close(qr, q, pos, spec, fmt)
    _close(kr, k, pos, spec, fmt)


@needs_cuda
def test_packed_qkv_views_are_rotated_in_place_without_touching_v() -> None:
    """q and k as head slices of one packed [b, s, hq + 2 hk, d] projection (head stride d, token stride
    (hq + 2 hk) d): rotated in place, v untouched."""
    spec = RopeSpec(128, base=500_000.0)
    qkv = _x((2, 9, 32 + 16, 128), torch.bfloat16)
    ref = qkv.clone()
    q, k, v = qkv[:, :, :32], qkv[:, :, 32:40], qkv[:, :, 40:]
    pos = torch.randint(0, 10_000, (2, 9)).to(DEVICE)
    apply_rope(q, k, pos, spec, inplace=True)
    _close(q, ref[:, :, :32], pos, spec)
    _close(k, ref[:, :, 32:40], pos, spec)
    assert torch.equal(v, ref[:, :, 40:])


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_backward_on_cuda_is_the_inverse_rotation(dtype: torch.dtype) -> None:
    spec = RopeSpec(128, rotary_dim=64, layout="interleaved")
    pos = torch.randint(0, 2**30, (2, 7)).to(DEVICE)
    q = _x((2, 7, 8, 128), dtype).requires_grad_()
    k = _x((2, 7, 2, 128), dtype).requires_grad_()
    gq, gk = _x((2, 7, 8, 128), dtype), _x((2, 7, 2, 128), dtype)
    qr, kr = apply_rope(q, k, pos, spec)
    dq, dk = torch.autograd.grad((qr, kr), (q, k), (gq, gk))
    _close(dq, gq, -pos, spec)
    _close(dk, gk, -pos, spec)


@needs_cuda
def test_rotary_module_tables_and_varlen_on_cuda() -> None:
    spec = RopeSpec(64, base=10_000.0)
    q, k = _x((3, 11, 4, 64), torch.bfloat16), _x((3, 11, 2, 64), torch.bfloat16)
    pos = torch.randint(0, 5000, (3, 11)).to(DEVICE)
    rope = Rotary(spec).to(DEVICE)
    qr, kr = rope(q, k, positions=pos)
    _close(qr, q, pos, spec)
    _close(kr, k, pos, spec)
    cos, sin = rope_tables(pos, spec)
    assert cos.device.type == "cuda"
    qt, _ = apply_rope_tables(q, None, cos, sin, spec)
    _close(qt, q, pos, spec)
    cu = torch.tensor([0, 4, 4, 17, 20], dtype=torch.int32, device=DEVICE)
    qv, kv = _x((20, 4, 64), torch.float16), _x((20, 1, 64), torch.float16)
    offsets = torch.tensor([7, 0, 2**33, 12], device=DEVICE)
    qo, ko = apply_rope_varlen(qv, kv, cu, spec, offsets=offsets)
    p = positions_from_cu_seqlens(cu) + torch.repeat_interleave(offsets, (cu[1:] - cu[:-1]).long())
    _close(qo, qv, p, spec, "thd")
    _close(ko, kv, p, spec, "thd")


@needs_cuda
def test_cuda_graph_replays_the_rotation() -> None:
    """Tables given: the launch is capturable; replays rotate the current contents of the captured buffers."""
    spec = RopeSpec(128, base=500_000.0)
    pos = torch.randint(0, 8192, (4, 1)).to(DEVICE)
    cos, sin = rope_tables(pos, spec)
    q, k = _x((4, 1, 32, 128), torch.bfloat16), _x((4, 1, 8, 128), torch.bfloat16)
    out_q, out_k = torch.empty_like(q), torch.empty_like(k)
    out_qp, out_kp = torch.empty_like(q), torch.empty_like(k)

    def step() -> None:
        qr, kr = apply_rope_tables(q, k, cos, sin, spec)
        out_q.copy_(qr)
        out_k.copy_(kr)
        qp, kp = apply_rope(q, k, pos + 2**36, spec)  # positions read on the device: capturable too
        out_qp.copy_(qp)
        out_kp.copy_(kp)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    for _ in range(2):
        q.copy_(_x(q.shape, torch.bfloat16))
        k.copy_(_x(k.shape, torch.bfloat16))
        g.replay()
        torch.cuda.synchronize()
        _close(out_q, q, pos, spec)
        _close(out_k, k, pos, spec)
        want_q, want_k = apply_rope(q, k, pos + 2**36, spec, backend="torch")  # host tables (mpmath-tested)
        torch.testing.assert_close(out_qp.float(), want_q.float(), rtol=0, atol=TOL[torch.bfloat16])
        torch.testing.assert_close(out_kp.float(), want_k.float(), rtol=0, atol=TOL[torch.bfloat16])


@needs_cuda
def test_torch_compile_fullgraph_on_cuda_matches_eager() -> None:
    spec = RopeSpec(128, base=500_000.0)
    q, k = _x((2, 16, 8, 128), torch.bfloat16), _x((2, 16, 2, 128), torch.bfloat16)
    pos = torch.randint(0, 2**20, (2, 16)).to(DEVICE)
    f = torch.compile(lambda q, k, p: apply_rope(q, k, p, spec), fullgraph=True)
    qc, kc = f(q, k, pos)
    _close(qc, q, pos, spec)
    _close(kc, k, pos, spec)


@pytest.mark.parametrize("fmt", ["bshd", "bhsd", "thd"])
def test_q_and_k_with_autograd_take_one_launch_each_way(fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With autograd, q and k go through one launch forward and one backward (the rotation by -phi); gradients,
    a gradient of only one output, and double backward match the reference."""
    launches: list[int] = []
    real = triton_backend.Plan.launch
    monkeypatch.setattr(triton_backend.Plan, "launch", lambda *a: launches.append(1) or real(*a))
    spec = RopeSpec(32, rotary_dim=24, layout="interleaved")
    shp = {"bshd": lambda h: (2, 5, h, 32), "bhsd": lambda h: (2, h, 5, 32), "thd": lambda h: (5, h, 32)}[fmt]
    pos = (torch.randint(0, 5000, (5,)) if fmt == "thd" else torch.randint(0, 5000, (2, 5))).to(DEVICE)
    cos, sin = rope_tables(pos, spec)
    q, k = _x(shp(4)).requires_grad_(), _x(shp(2)).requires_grad_()
    gq, gk = _x(shp(4)).requires_grad_(), _x(shp(2)).requires_grad_()
    qr, kr = apply_rope_tables(q, k, cos, sin, spec, format=fmt, backend="triton")
    assert len(launches) == 1
    dq, dk = torch.autograd.grad((qr, kr), (q, k), (gq, gk), create_graph=True)
    assert len(launches) == 2
    _close(dq, gq.detach(), -pos, spec, fmt)
    _close(dk, gk.detach(), -pos, spec, fmt)
    (ddq,) = torch.autograd.grad(
        dq, gq, q.detach()
    )  # dq = R(-phi) gq: its vector-Jacobian product is R(phi) v
    _close(ddq, q.detach(), pos, spec, fmt)
    n = len(launches)
    plain = torch.autograd.grad(  # a plain backward (no create_graph): the launch alone, not recorded
        apply_rope_tables(q, k, cos, sin, spec, format=fmt, backend="triton"),
        (q, k),
        (gq.detach(), gk.detach()),
    )
    assert len(launches) == n + 2 and not plain[0].requires_grad
    _close(plain[0], gq.detach(), -pos, spec, fmt)
    _close(plain[1], gk.detach(), -pos, spec, fmt)
    _, kr2 = apply_rope_tables(q, k, cos, sin, spec, format=fmt, backend="triton")
    (dk_only,) = torch.autograd.grad(kr2, k, gk.detach())
    _close(dk_only, gk.detach(), -pos, spec, fmt)


@pytest.mark.parametrize("fmt", ["bshd", "bhsd"])
def test_repeated_out_of_place_calls_on_sliced_views_stay_correct(fmt: str) -> None:
    """q and k sliced from one packed projection (not dense): a repeated out-of-place call (the plan path) must
    write its fresh outputs exactly as the first call did, in either format."""
    spec = RopeSpec(32, base=10_000.0)
    qkv = _x((2, 7, 4 + 2 + 2, 32))
    q, k = qkv[:, :, :4], qkv[:, :, 4:6]
    if fmt == "bhsd":
        q, k = q.transpose(1, 2), k.transpose(1, 2)
    pos = torch.randint(0, 5000, (2, 7)).to(DEVICE)
    cos, sin = rope_tables(pos, spec)
    for _ in range(3):
        qr, kr = apply_rope_tables(q, k, cos, sin, spec, format=fmt, backend="triton")
        _close(qr, q, pos, spec, fmt)
        _close(kr, k, pos, spec, fmt)
