"""The fused CPU kernel: identical to the PyTorch backend, every layout/format/dtype/stride, and its fallbacks."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest
import torch

from ropekit import RopeSpec, Rotary, apply_rope, apply_rope_tables, rope_tables
from ropekit.kernels import cpu_build
from ropekit.rotation import cpu_backend
from tests.oracles import TOL, reference_rope

pytestmark = pytest.mark.skipif(
    cpu_build.load() is None, reason="no C compiler: the fused CPU kernel is unavailable"
)

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _x(fmt: str, b: int, s: int, h: int, d: int, dtype: torch.dtype) -> torch.Tensor:
    shape = {"bshd": (b, s, h, d), "bhsd": (b, h, s, d), "thd": (s, h, d)}[fmt]
    return (torch.rand(shape, dtype=torch.float64) * 2 - 1).to(dtype)


@pytest.mark.parametrize(
    "dtype,layout,fmt,inplace,rot",
    list(
        itertools.product(DTYPES, ["half", "interleaved"], ["bshd", "bhsd", "thd"], [False, True], [None, 16])
    ),
)
def test_identical_to_the_pytorch_backend(dtype, layout, fmt, inplace, rot) -> None:
    spec = RopeSpec(64, base=500_000.0, rotary_dim=rot, layout=layout)
    b = 1 if fmt == "thd" else 2
    q, k = _x(fmt, b, 37, 6, 64, dtype), _x(fmt, b, 37, 2, 64, dtype)
    pos = torch.randint(0, 10**6, (37,)) if fmt == "thd" else torch.randint(0, 10**6, (b, 37))
    ref = apply_rope(q.clone(), k.clone(), pos, spec, format=fmt, backend="torch")
    qi, ki = q.clone(), k.clone()
    got = apply_rope(qi, ki, pos, spec, format=fmt, backend="cpu", inplace=inplace)
    # same float32 operations in the same order (no FMA contraction): bit-identical results
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
    if inplace:
        assert got[0] is qi and torch.equal(qi[..., spec.rotary_dim :], q[..., spec.rotary_dim :])
    torch.testing.assert_close(
        got[0].double(), reference_rope(q, pos, spec, format=fmt), rtol=0, atol=TOL[dtype]
    )


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("fmt", ["bhsd", "bshd"])
@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("rot", [None, 40])  # 32 bands (two 16-lane vectors), 20 (one vector and 4 left over)
def test_bfloat16_rounding_of_special_values_matches_the_pytorch_backend(
    layout: str, fmt: str, inplace: bool, rot: int | None
) -> None:
    """bfloat16 results of every kind: rotations whose float32 value is denormal (the AVX512-BF16 loop rounds those
    lanes with the integer formula, since the instruction would flush them to zero), infinities, NaNs and ordinary
    values, mixed inside every 16-lane vector. Oracle: the PyTorch backend (torch's own float32 -> bfloat16 rounding
    of the same float32 products): the same bits on every non-NaN element and NaN exactly where it has NaN (NaN
    payloads are not compared: no backend promises them)."""
    spec = RopeSpec(64, base=10_000.0, layout=layout, rotary_dim=rot)  # type: ignore[arg-type]
    g = torch.Generator().manual_seed(7)
    x = _x(fmt, 2, 41, 5, 64, torch.float32)
    kind = torch.randint(0, 10, x.shape, generator=g)
    x = torch.where(kind <= 2, x * 2.0**-128, x)  # float32 denormals: bfloat16 keeps them (2^-133 and up)
    x = torch.where(kind == 3, torch.full_like(x, float("inf")) * x.sign(), x)
    x = torch.where(kind == 4, torch.full_like(x, float("nan")), x)
    q = x.to(torch.bfloat16)
    assert ((q.float().abs() < 2.0**-126) & (q != 0)).sum() > 1000  # many denormal inputs (and results)
    pos = torch.randint(0, 5000, (2, 41))
    want = apply_rope(q.clone(), None, pos, spec, format=fmt, backend="torch")[0]
    got = apply_rope(q.clone(), None, pos, spec, format=fmt, backend="cpu", inplace=inplace)[0]
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan)
    assert torch.equal(got.view(torch.int16)[~nan], want.view(torch.int16)[~nan])
    tiny = (want.float().abs() < 2.0**-126) & (want != 0)
    assert tiny.sum() > 100  # denormal results were produced, and matched


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_views_without_copies(dtype: torch.dtype) -> None:
    spec = RopeSpec(32, rotary_dim=24)
    qkv = (torch.rand(2, 9, (4 + 2 + 2) * 32) * 2 - 1).to(dtype)
    before = qkv.clone()
    q = qkv[..., : 4 * 32].view(2, 9, 4, 32)
    k = qkv[..., 4 * 32 : 6 * 32].view(2, 9, 2, 32).transpose(1, 2)  # a bhsd view of bshd storage
    assert cpu_backend.supports(q) and cpu_backend.supports(k)
    pos = torch.arange(9) + 77
    apply_rope(q, None, pos, spec, inplace=True, backend="cpu")
    apply_rope(k, None, pos, spec, format="bhsd", inplace=True, backend="cpu")
    ref_q = reference_rope(before[..., : 4 * 32].view(2, 9, 4, 32), pos, spec)
    ref_k = reference_rope(before[..., 4 * 32 : 6 * 32].view(2, 9, 2, 32), pos, spec)
    torch.testing.assert_close(qkv[..., : 4 * 32].view(2, 9, 4, 32).double(), ref_q, rtol=0, atol=TOL[dtype])
    torch.testing.assert_close(
        qkv[..., 4 * 32 : 6 * 32].view(2, 9, 2, 32).double(), ref_k, rtol=0, atol=TOL[dtype]
    )
    assert torch.equal(qkv[..., 6 * 32 :], before[..., 6 * 32 :])  # v untouched


def test_non_unit_last_stride_goes_to_pytorch_under_auto_and_is_refused_by_cpu() -> None:
    x = torch.randn(2, 5, 3, 64)[..., ::2]
    assert not cpu_backend.supports(x)
    spec = RopeSpec(32)
    out, _ = apply_rope(x, None, torch.arange(5), spec)  # auto: the PyTorch backend
    torch.testing.assert_close(out.double(), reference_rope(x, torch.arange(5), spec), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match=r"backend='cpu' cannot rotate q: its last dim has stride 2"):
        apply_rope(x, None, torch.arange(5), spec, backend="cpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_backward_through_the_kernel(dtype: torch.dtype) -> None:
    spec = RopeSpec(32, rotary_dim=16, layout="interleaved")
    pos = torch.tensor([[1, 50, 7_000_000]])
    x = torch.randn(1, 3, 2, 32, dtype=dtype, requires_grad=True)
    g = torch.randn(1, 3, 2, 32, dtype=dtype)
    (gx,) = torch.autograd.grad(apply_rope(x, None, pos, spec, backend="cpu")[0], x, g)
    torch.testing.assert_close(gx.double(), reference_rope(g, -pos, spec), rtol=0, atol=TOL[dtype] * 2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_backward_in_head_groups_matches_the_pytorch_backend(dtype: torch.dtype, layout: str) -> None:
    """bhsd with 11 heads and several tokens: the backward (rotation by the negative angle) runs in head groups
    (8 + 3 in place, 4 + 4 + 3 out of place). Oracle: the PyTorch backend's backward, bit for bit."""
    spec = RopeSpec(64, base=10_000.0, layout=layout)  # type: ignore[arg-type]
    pos = torch.randint(0, 10**5, (2, 19))
    x = _x("bhsd", 2, 19, 11, 64, dtype).requires_grad_(True)
    g = _x("bhsd", 2, 19, 11, 64, dtype)
    grads = [
        torch.autograd.grad(apply_rope(x, None, pos, spec, format="bhsd", backend=b)[0], x, g)[0]
        for b in ("cpu", "torch")
    ]
    assert torch.equal(grads[0], grads[1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("fmt", ["bhsd", "bshd"])
@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("rot", [None, 40])
def test_decode_head_groups_match_the_pytorch_backend(dtype, layout, fmt, inplace, rot) -> None:
    """Decode (one token per sequence): the heads of a sequence share one table row and run as head groups -- in
    bshd after the kernel swaps the token and head dims. 12 q heads (8 + 4 in place, 4 + 4 + 4 out of place) and
    3 kv heads, partial rotary (pass-through copied out of place), each call path: exact tables per call
    (``apply_rope``), tables given, and ``Rotary``'s in-kernel read of its cache. Oracle: the PyTorch backend,
    bit for bit, and the float64 reference within the dtype's tolerance."""
    spec = RopeSpec(64, base=500_000.0, rotary_dim=rot, layout=layout)  # type: ignore[arg-type]
    q, k = _x(fmt, 5, 1, 12, 64, dtype), _x(fmt, 5, 1, 3, 64, dtype)
    pos = torch.randint(0, 4000, (5, 1))
    ref = apply_rope(q.clone(), k.clone(), pos, spec, format=fmt, backend="torch")
    cos, sin = rope_tables(pos, spec)
    rotary = Rotary(spec, max_seq_len=4096, format=fmt)
    calls = {
        "apply_rope": lambda a, b: apply_rope(a, b, pos, spec, format=fmt, backend="cpu", inplace=inplace),
        "tables": lambda a, b: apply_rope_tables(
            a, b, cos, sin, spec, format=fmt, backend="cpu", inplace=inplace
        ),
        "Rotary": lambda a, b: rotary(a, b, positions=pos, inplace=inplace),
    }
    for name, call in calls.items():
        for _ in range(2):  # the second call of a geometry takes the prepared decode plan
            qi, ki = q.clone(), k.clone()
            got = call(qi, ki)
            assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1]), name
            assert (got[0] is qi) == inplace, name
    torch.testing.assert_close(
        ref[0].double(), reference_rope(q, pos, spec, format=fmt), rtol=0, atol=TOL[dtype]
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("sliced", ["q", "tables", "both", "neither"])
def test_bshd_batch_and_sequence_merge_only_when_their_strides_allow(dtype, inplace, sliced) -> None:
    """bshd prefill: the kernel runs the heads of a token as head groups by merging batch and sequence into one token
    dim -- valid only when q's and the tables' batch stride is the sequence length times the sequence stride. Views
    that break it (q or the tables sliced along the sequence of a longer buffer) must not be merged. Oracle: the
    PyTorch backend, bit for bit."""
    spec = RopeSpec(64, base=10_000.0, rotary_dim=48)
    B, S, L = 3, 37, 50
    big = _x("bshd", B, L, 6, 64, dtype)
    q = big[:, 5 : 5 + S] if sliced in ("q", "both") else big[:, :S].contiguous()
    pos = torch.randint(0, 10**5, (B, L))
    cos_l, sin_l = rope_tables(pos, spec)  # [B, L, n]
    if sliced in ("tables", "both"):
        cos, sin = cos_l[:, 7 : 7 + S], sin_l[:, 7 : 7 + S]
    else:
        cos, sin = cos_l[:, 7 : 7 + S].contiguous(), sin_l[:, 7 : 7 + S].contiguous()
    ref = apply_rope_tables(q.clone(), None, cos, sin, spec, format="bshd", backend="torch")[0]
    # out of place: q itself (a view when sliced; not modified); in place: the same view of a copy of the buffer
    qi = q if not inplace else (big.clone()[:, 5 : 5 + S] if sliced in ("q", "both") else q.clone())
    assert (qi.stride(0) == S * qi.stride(1)) == (sliced not in ("q", "both"))
    got = apply_rope_tables(qi, None, cos, sin, spec, format="bshd", backend="cpu", inplace=inplace)[0]
    assert torch.equal(got, ref)


def test_tables_api_and_decode_shape() -> None:
    spec = RopeSpec(128, base=500_000.0)
    q, k = torch.randn(32, 32, 1, 128), torch.randn(32, 8, 1, 128)
    pos = torch.randint(0, 100_000, (32, 1))
    cos, sin = rope_tables(pos, spec)
    a = apply_rope_tables(q.clone(), k.clone(), cos, sin, spec, format="bhsd", backend="cpu")
    b = apply_rope_tables(q.clone(), k.clone(), cos, sin, spec, format="bhsd", backend="torch")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def _probe(env: dict[str, str]) -> dict:
    code = (
        "import json, warnings, torch\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    from ropekit.kernels import cpu_build\n"
        "    import ropekit\n"
        "    x = torch.randn(1, 4, 2, 16); out, _ = ropekit.apply_rope(x, None, torch.arange(4), ropekit.RopeSpec(16))\n"
        "    out2, _ = ropekit.apply_rope(x, None, torch.arange(4), ropekit.RopeSpec(16))\n"
        "info = cpu_build.build_info()\n"
        "print(json.dumps({'available': info.available, 'built': info.built, 'reason': info.reason,\n"
        "                  'warnings': [str(m.message) for m in w if 'ropekit' in str(m.message)]}))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, check=True
    )
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_build_is_cached_across_processes(tmp_path) -> None:
    first = _probe({"ROPEKIT_CACHE_DIR": str(tmp_path)})
    second = _probe({"ROPEKIT_CACHE_DIR": str(tmp_path)})
    assert first["available"] and first["built"] and second["available"] and not second["built"]
    assert len(list(tmp_path.glob("rope_cpu-*.so"))) == 1


def test_without_a_compiler_it_falls_back_with_one_message(tmp_path) -> None:
    res = _probe({"ROPEKIT_CACHE_DIR": str(tmp_path), "CC": "", "PATH": str(tmp_path)})
    assert not res["available"] and "no C compiler" in res["reason"]
    assert len(res["warnings"]) == 1 and "pure-PyTorch backend" in res["warnings"][0]
    res = _probe({"ROPEKIT_DISABLE_CPU_KERNEL": "1"})
    assert not res["available"] and "disabled" in res["reason"]


_SAVED = "modified by an inplace operation"


def _saved(x: torch.Tensor) -> torch.Tensor:
    """A loss whose backward reads x as it is now (mul saves x for w's gradient)."""
    return (torch.randn_like(x, requires_grad=True) * x).sum()


@pytest.mark.parametrize("call", ["raw_rotate", "run", "call_packed", "call_gather", "call_axes"])
def test_every_in_place_kernel_call_bumps_the_version_counter(
    monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    """Each entry of the kernel that writes in place through a raw pointer (the one-off call and every prepared
    plan call, which the stored-plan fast paths make) bumps the version counters of what it wrote, as torch's
    in-place ops do: a saved tensor rotated in place makes backward raise (backend="torch", the oracle, raises the
    same), instead of a silently wrong gradient. A spy checks that the entry was taken."""
    from ropekit.axes import AxisMap
    from ropekit.rotation import axis_plan, fastpath

    taken: list[str] = []
    if call != "raw_rotate":
        real = getattr(cpu_backend.Plan, call)

        def spy(self: cpu_backend.Plan, *a: object) -> object:
            got = real(self, *a)
            if not isinstance(got, int) and got is not None:
                taken.append(call)
            return got

        monkeypatch.setattr(cpu_backend.Plan, call, spy)
    else:  # raw_rotate is bound inside cpu_backend.rotate: spy on the table check it makes first
        real_tables = cpu_backend.kernel_tables

        def spy_tables(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            taken.append(call)
            return real_tables(cos, sin)

        monkeypatch.setattr(cpu_backend, "kernel_tables", spy_tables)
    fastpath._PLANS.clear()
    fastpath._APPLY.clear()
    axis_plan._PLANS.clear()
    spec = RopeSpec(16, base=1e4)
    aspec = RopeSpec(16, base=1e4, axes=AxisMap.contiguous((2, 3, 3)))
    for backend in ("torch", "cpu"):  # the oracle first
        for _ in range(3):  # the first call validates and stores a plan; the next ones run it
            q, k = torch.randn(2, 5, 4, 16), torch.randn(2, 5, 2, 16)
            losses = (_saved(q), _saved(k))
            if call == "raw_rotate":  # the one-off kernel call (no plan: q in bf16, tables in float64)
                q, k = q.bfloat16(), k.bfloat16()
                losses = (_saved(q), _saved(k))
                cos, sin = rope_tables(torch.arange(5), spec, dtype=torch.float64)
                apply_rope_tables(q, k, cos, sin, spec, inplace=True, backend=backend)
            elif call == "run":
                cos, sin = rope_tables(torch.arange(5) + 7, spec)
                apply_rope_tables(q, k, cos, sin, spec, inplace=True, backend=backend)
            elif call == "call_gather":  # int64 contiguous positions: the kernel reads the cache rows
                apply_rope(q, k, torch.arange(5) + 7, spec, inplace=True, backend=backend)
            elif call == "call_packed":  # int32 positions: one gather of the rows, then the packed call
                apply_rope(q, k, torch.arange(5, dtype=torch.int32) + 7, spec, inplace=True, backend=backend)
            else:
                pos = torch.stack([torch.arange(5), torch.arange(5) * 2, torch.arange(5) + 1])
                apply_rope(q, k, pos, aspec, inplace=True, backend=backend)
            for loss in losses:
                with pytest.raises(RuntimeError, match=_SAVED):
                    loss.backward()
    assert taken, f"the {call} entry was never taken"


def test_raw_rotate_bumps_only_in_place() -> None:
    """Out of place the input is not written: its version counter stays (as with torch's out-of-place ops)."""
    x = torch.randn(2, 5, 4, 16)
    cos, sin = rope_tables(torch.arange(5), RopeSpec(16))
    v0 = x._version
    cpu_backend.raw_rotate(x, cos[:, None], sin[:, None], 16, "half", False)
    assert x._version == v0
    cpu_backend.raw_rotate(x, cos[:, None], sin[:, None], 16, "half", True)
    assert x._version > v0
