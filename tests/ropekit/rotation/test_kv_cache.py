"""RoPE fused with the KV-cache write, against an independent composition: rotate in float64 from the RoFormer
formula, then index into a copy of the cache. The contiguous per-sequence layout here (paged: test_kv_cache_paged.py), half and
interleaved pairs, partial rotary, float32/bfloat16, GQA, the C kernel and the PyTorch path; and the validation
(nothing is written when an argument is bad)."""

from __future__ import annotations

import math

import pytest
import torch

from ropekit.kernels import cpu_build
from ropekit.phases import rope_tables
from ropekit.rotation import kv_cache
from ropekit.rotation.kv_cache import rope_cache_write
from ropekit.spec import RopeSpec
from tests.ropekit.rotation.kv_oracle import BASE, close, rope64

CASES = [
    # dtype, layout, D, r, format, cache_format
    (torch.float32, "half", 16, 16, "bshd", "bhsd"),
    (torch.float32, "interleaved", 16, 16, "bhsd", "bshd"),
    (torch.float32, "half", 16, 8, "bhsd", "bhsd"),
    (torch.bfloat16, "half", 16, 16, "bshd", "bshd"),
    (torch.bfloat16, "interleaved", 16, 8, "bshd", "bhsd"),
    (torch.float32, "half", 128, 128, "bshd", "bhsd"),  # the unrolled n = 64 path
]


@pytest.mark.parametrize(("dt", "layout", "D", "r", "fmt", "cfmt"), CASES)
def test_contiguous_against_float64_composition(
    backend: str, dt: torch.dtype, layout: str, D: int, r: int, fmt: str, cfmt: str
) -> None:
    g = torch.Generator().manual_seed(0)
    B, S, Hk, Hq, Dv, S_max = 3, 5, 2, 4, 12, 16
    spec = RopeSpec(D, base=BASE, rotary_dim=r, layout=layout)  # type: ignore[arg-type]

    def mk(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dt)

    k, v, q = mk(B, S, Hk, D), mk(B, S, Hk, Dv), mk(B, S, Hq, D)  # bshd originals
    ck, cv = mk(B, S_max, Hk, D), mk(B, S_max, Hk, Dv)
    off = torch.tensor([0, 7, S_max - S])
    pos = off[:, None] + torch.arange(S)

    def to(x: torch.Tensor, f: str) -> torch.Tensor:  # a bhsd *view* of bhsd-stored data when f == "bhsd"
        return x.transpose(1, 2).contiguous().transpose(1, 2) if f == "bhsd" else x.clone()

    kk, vv, qq, ckk, cvv = to(k, fmt), to(v, fmt), to(q, fmt), to(ck, cfmt), to(cv, cfmt)
    args = (kk.transpose(1, 2), vv.transpose(1, 2)) if fmt == "bhsd" else (kk, vv)
    caches = (ckk.transpose(1, 2), cvv.transpose(1, 2)) if cfmt == "bhsd" else (ckk, cvv)
    qarg = qq.transpose(1, 2) if fmt == "bhsd" else qq
    k_before = kk.clone()
    out = rope_cache_write(*args, *caches, off, spec, q=qarg, format=fmt, cache_format=cfmt)
    assert out is qarg

    ref_k, ref_v = ck.double().clone(), cv.double().clone()
    rk = rope64(k, pos, r, layout)
    for b in range(B):
        ref_k[b, off[b] : off[b] + S] = rk[b]
        ref_v[b, off[b] : off[b] + S] = v[b].double()
    close(ckk, ref_k)  # ckk is a bshd view of the data either way
    assert torch.equal(cvv.double(), ref_v)  # v copied bit for bit, the rest of the cache untouched
    written = torch.zeros(B, S_max, dtype=torch.bool)
    for b in range(B):
        written[b, off[b] : off[b] + S] = True
    assert torch.equal(ckk[~written], ck[~written])  # rows not written are untouched
    close(qq, rope64(q, pos, r, layout))
    assert torch.equal(kk, k_before)  # k itself is not modified
    if r < D:
        assert torch.equal(ckk[written][..., r:], k.reshape(-1, Hk, D)[..., r:])


def test_kernel_and_torch_path_agree_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    if cpu_build.load() is None:
        pytest.skip("no C compiler")
    g = torch.Generator().manual_seed(2)
    spec = RopeSpec(64, base=BASE, rotary_dim=48)
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        k, v, q = (torch.randn(2, 3, h, 64, generator=g).to(dt) for h in (2, 2, 8))
        outs = []
        for use in (True, False):
            monkeypatch.setattr(kv_cache, "use_kernel", lambda *xs, u=use: u)
            ck, cv, qq = torch.zeros(2, 2, 9, 64, dtype=dt), torch.zeros(2, 2, 9, 64, dtype=dt), q.clone()
            rope_cache_write(k, v, ck, cv, torch.tensor([1, 6]), spec, q=qq)
            outs.append((ck, cv, qq))
        for a, b in zip(*outs, strict=True):
            assert torch.equal(a, b), dt


def test_tables_given_equal_positions_and_decode_default_positions() -> None:
    spec = RopeSpec(32, base=BASE)
    g = torch.Generator().manual_seed(3)
    k, v = torch.randn(4, 1, 2, 32, generator=g), torch.randn(4, 1, 2, 32, generator=g)
    off = torch.tensor([0, 3, 9, 30])
    a = [torch.zeros(4, 2, 31, 32) for _ in range(2)]
    b = [torch.zeros(4, 2, 31, 32) for _ in range(2)]
    rope_cache_write(k, v, *a, off, spec)  # default positions: the cache rows
    cos, sin = rope_tables(off[:, None], spec)
    rope_cache_write(k, v, *b, off, spec, tables=(cos, sin))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    ref = rope64(k, off[:, None], 32, "half")
    for i in range(4):
        torch.testing.assert_close(a[0][i, :, off[i]].double(), ref[i, 0], rtol=1e-5, atol=1e-6)


def _contig() -> tuple[torch.Tensor, ...]:
    return torch.randn(2, 3, 2, 8), torch.randn(2, 3, 2, 8), torch.zeros(2, 2, 6, 8), torch.zeros(2, 2, 6, 8)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"offsets": torch.tensor([0, 4])}, r"offsets\[1\] = 4"),
        ({"offsets": torch.tensor([-1, 0])}, r"offsets\[0\] = -1"),
        ({"offsets": torch.tensor([0.0, 1.0])}, "offsets must be an int or an integer tensor"),
        ({"offsets": torch.tensor([0, 1, 2])}, r"offsets must have shape \(2,\)"),
        ({"v": torch.randn(2, 4, 2, 8)}, "v shape"),
        ({"k": torch.randn(2, 3, 2, 8, dtype=torch.float64)}, "dtype"),
        ({"cache_k": torch.zeros(2, 3, 6, 8)}, "cache_k shape"),
        ({"q": torch.randn(2, 3, 4, 6)}, "q shape"),
        ({"format": "sbhd"}, "format must be"),
        (
            {
                "positions": torch.zeros(2, 3, dtype=torch.long),
                "tables": (torch.ones(3, 4), torch.ones(3, 4)),
            },
            "not both",
        ),
        ({"tables": (torch.ones(3, 4, dtype=torch.float64), torch.ones(3, 4))}, "float32"),
        ({"positions": torch.zeros(2, 4, dtype=torch.long)}, "broadcast"),
        # written in place, so no element may alias another (silently wrong caches / q rotated 4x before)
        ({"cache_k": torch.zeros(2, 2, 1, 8).expand(2, 2, 6, 8)}, r"cache_k has overlapping memory"),
        ({"cache_v": torch.zeros(1, 2, 6, 8).expand(2, 2, 6, 8)}, r"cache_v has overlapping memory"),
        ({"q": torch.randn(2, 3, 1, 8).expand(2, 3, 4, 8)}, r"q has overlapping memory"),
    ],
)
def test_contiguous_validation_writes_nothing(backend: str, change: dict[str, object], match: str) -> None:
    k, v, ck, cv = _contig()
    kw: dict[str, object] = {"k": k, "v": v, "cache_k": ck, "cache_v": cv, "offsets": torch.tensor([0, 3])}
    kw.update(change)
    q = kw.get("q")
    before = [t.clone() for t in (ck, cv)] + ([q.clone()] if isinstance(q, torch.Tensor) else [])
    with pytest.raises((ValueError, TypeError), match=match):
        rope_cache_write(spec=RopeSpec(8, base=BASE), **kw)  # type: ignore[arg-type]
    after = [ck, cv] + ([q] if isinstance(q, torch.Tensor) else [])
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_overlapping_caches_refused() -> None:
    k, v, ck, _ = _contig()
    with pytest.raises(ValueError, match="cache_k and cache_v overlap"):
        rope_cache_write(k, v, ck, ck[..., :8], 0, RopeSpec(8, base=BASE))
    with pytest.raises(ValueError, match="cache_k and k overlap"):
        big = torch.zeros(2, 2, 6, 8)
        rope_cache_write(
            big.transpose(1, 2)[:, :3], v, big, torch.zeros(2, 2, 6, 8), 0, RopeSpec(8, base=BASE)
        )


def test_q_aliasing_k_or_v_is_refused_also_on_a_planned_geometry() -> None:
    """q is rotated in place while k and v are read and left unchanged: q may not be k or v. A first call with a
    separate q prepares a plan for this geometry; the aliasing call must not take it."""
    spec = RopeSpec(8, base=BASE)
    k, v, ck, cv = _contig()
    off = torch.tensor([0, 3])
    tables = rope_tables(off[:, None] + torch.arange(3), spec)
    rope_cache_write(k, v, ck, cv, off, spec, tables=tables, q=torch.randn(2, 3, 2, 8))
    for name, q in (("k", k), ("v", v)):
        before = [t.clone() for t in (k, v, ck, cv)]
        with pytest.raises(ValueError, match=f"q and {name} share memory"):
            rope_cache_write(k, v, ck, cv, off, spec, tables=tables, q=q)
        assert all(torch.equal(a, b) for a, b in zip(before, (k, v, ck, cv), strict=True))


def test_q_partly_overlapping_k_is_refused_and_a_packed_qkv_is_not() -> None:
    """q sharing some of k's elements (rows 0-3 and 1-4 of one buffer) would rotate k in place: refused (only an
    identical start address was caught before). q, k and v as head slices of one packed qkv buffer share no element
    (their byte spans interleave): accepted, k unchanged, q rotated (float64 oracle)."""
    spec = RopeSpec(8, base=BASE)
    buf = torch.randn(5, 1, 2, 8)
    q, k, v = buf[0:4], buf[1:5], torch.randn(4, 1, 2, 8)
    ck, cv = torch.zeros(4, 2, 8, 8), torch.zeros(4, 2, 8, 8)
    sep = torch.randn(4, 1, 2, 8)
    rope_cache_write(
        sep.clone(), v, ck.clone(), cv.clone(), torch.full((4,), 3), spec, q=sep
    )  # plans this geometry
    before = buf.clone()
    with pytest.raises(ValueError, match="q and k share memory"):
        rope_cache_write(k, v, ck, cv, torch.full((4,), 3), spec, q=q)
    assert torch.equal(buf, before) and not ck.any()
    qkv = torch.randn(2, 3, 4 + 2 + 2, 8)  # [B, S, Hq + Hk + Hv, D]
    q, k, v = qkv[:, :, :4], qkv[:, :, 4:6], qkv[:, :, 6:]
    k0, q0 = k.clone(), q.clone()
    off = torch.tensor([0, 2])
    rope_cache_write(k, v, torch.zeros(2, 2, 8, 8), torch.zeros(2, 2, 8, 8), off, spec, q=q)
    assert torch.equal(k, k0)
    close(q, rope64(q0, off[:, None] + torch.arange(3), 8, "half"))


def test_more_new_tokens_than_cache_rows_says_so() -> None:
    k, v = torch.randn(1, 10, 2, 8), torch.randn(1, 10, 2, 8)
    with pytest.raises(ValueError, match="k has 10 new tokens but the cache holds only 8 rows per sequence"):
        rope_cache_write(k, v, torch.zeros(1, 2, 8, 8), torch.zeros(1, 2, 8, 8), 0, RopeSpec(8, base=BASE))


def test_large_positions_use_exact_tables() -> None:
    """At position 2^24 + 1 the float32 recipe is off by ~1 rad in band 0; the fused write is not."""
    spec = RopeSpec(8, base=BASE)
    p = 2**24 + 1
    k = torch.randn(1, 1, 1, 8, generator=torch.Generator().manual_seed(4))
    ck, cv = torch.zeros(1, 1, 2, 8), torch.zeros(1, 1, 2, 8)
    rope_cache_write(k, k, ck, cv, 1, spec, positions=torch.tensor([[p]]))
    ang = math.fmod(p * 1.0, 2 * math.pi)
    x0, y0 = float(k[0, 0, 0, 0]), float(k[0, 0, 0, 4])
    assert abs(float(ck[0, 0, 1, 0]) - (x0 * math.cos(ang) - y0 * math.sin(ang))) < 1e-5


def test_tables_of_different_broadcast_shapes(backend: str) -> None:
    """cos shared by the batch ([S, n]) and sin per sequence ([B, S, n]): both broadcast, as documented."""
    spec = RopeSpec(16, base=BASE)
    g = torch.Generator().manual_seed(7)
    k, v = torch.randn(2, 3, 1, 16, generator=g), torch.randn(2, 3, 1, 16, generator=g)
    cos, sin = rope_tables(torch.arange(3), spec)
    ck, cv = torch.zeros(2, 1, 5, 16), torch.zeros(2, 1, 5, 16)
    rope_cache_write(k, v, ck, cv, 1, spec, tables=(cos, sin.expand(2, 3, 8)))
    ref = rope64(k, torch.arange(3).expand(2, 3), 16, "half")
    close(ck.transpose(1, 2)[:, 1:4], ref)


def test_contiguous_plan_checks_offsets() -> None:
    if cpu_build.load() is None:
        pytest.skip("no C compiler")
    spec = RopeSpec(8, base=BASE)
    k = torch.randn(2, 1, 1, 8)
    ck, cv = torch.zeros(2, 1, 4, 8), torch.zeros(2, 1, 4, 8)
    cos, sin = rope_tables(torch.tensor([[0], [0]]), spec)
    for o in ([0, 1], [1, 2]):
        rope_cache_write(k, k, ck, cv, torch.tensor(o), spec, tables=(cos, sin))
    before = ck.clone()
    with pytest.raises(ValueError, match=r"offsets\[1\] = 4"):
        rope_cache_write(k, k, ck, cv, torch.tensor([0, 4]), spec, tables=(cos, sin))
    assert torch.equal(ck, before)
    # position 0 is the identity: the second call put k at rows 1 and 2
    assert torch.equal(ck[0, 0, 1], k[0, 0, 0]) and torch.equal(ck[1, 0, 2], k[1, 0, 0])


def test_autograd_inputs_refused() -> None:
    k = torch.randn(1, 1, 1, 8, requires_grad=True)
    ck, cv = torch.zeros(1, 1, 2, 8), torch.zeros(1, 1, 2, 8)
    with pytest.raises(ValueError, match="k requires grad"):
        rope_cache_write(k, k.detach(), ck, cv, 0, RopeSpec(8, base=BASE))
    with torch.no_grad():
        rope_cache_write(k, k.detach(), ck, cv, 0, RopeSpec(8, base=BASE))
    assert torch.equal(ck[0, 0, 0], k.detach()[0, 0, 0])


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
def test_contiguous_head_major_chunks_match_the_torch_path(
    dt: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HF's layout (k, v, q and the caches all bhsd) takes the kernel's heads-outer order; work large enough to be
    split into chunks that start inside a sequence and cross into the next one, on 2 threads; q's 12 heads run as
    head groups of 8 and 4. Every written row, v copy and rotated q equals the pure-PyTorch path bit for bit, and
    the rows not written are untouched."""
    if cpu_build.load() is None:
        pytest.skip("no C compiler")
    g = torch.Generator().manual_seed(3)
    B, S, Hk, Hq, D, S_max = 2, 300, 4, 12, 128, 700
    spec = RopeSpec(D, base=BASE, rotary_dim=96)  # partial rotary: pass-through channels copied
    k, v, q = (torch.randn(B, h, S, D, generator=g).to(dt) for h in (Hk, Hk, Hq))
    ck0, cv0 = (torch.randn(B, Hk, S_max, D, generator=g).to(dt) for _ in range(2))
    off = torch.tensor([5, S_max - S])
    outs = []
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for use_kernel in (True, False):
            if not use_kernel:
                monkeypatch.setattr(cpu_build, "load", lambda: None)
            ck, cv, qq = ck0.clone(), cv0.clone(), q.clone()
            rope_cache_write(k, v, ck, cv, off, spec, q=qq, format="bhsd", cache_format="bhsd")
            outs.append((ck, cv, qq))
    finally:
        torch.set_num_threads(threads)
    for got, want in zip(outs[0], outs[1], strict=True):
        assert torch.equal(got, want)
    assert torch.equal(outs[0][0][0, :, :5], ck0[0, :, :5]) and torch.equal(
        outs[0][0][1, :, : S_max - S], ck0[1, :, : S_max - S]
    )


def test_contiguous_empty_write_leaves_the_caches_untouched() -> None:
    """Zero tokens in HF's all-bhsd layout: nothing is written and nothing fails."""
    spec = RopeSpec(16, base=BASE)
    k, v, q = torch.randn(2, 2, 0, 16), torch.randn(2, 2, 0, 16), torch.randn(2, 4, 0, 16)
    ck, cv = torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16)
    ck0, cv0 = ck.clone(), cv.clone()
    rope_cache_write(k, v, ck, cv, torch.tensor([3, 8]), spec, q=q, format="bhsd", cache_format="bhsd")
    assert torch.equal(ck, ck0) and torch.equal(cv, cv0)


def test_multi_axis_spec_takes_tables_not_positions() -> None:
    """[n_axes, ...] positions would be read as [B, S] (silently wrong when B == n_axes): refused, naming the way
    that works -- per-token tables from axis_tables, which give the multi-axis rotation in the cache."""
    from ropekit import AxisMap, apply_rope_axes, axis_tables, rope_paged_cache_write

    spec = RopeSpec(8, base=BASE, axes=AxisMap.halves(4))  # 2 axes, and batch 2 below
    k, v, ck, cv = _contig()
    pos = torch.stack([torch.arange(3).expand(2, 3), (2 * torch.arange(3)).expand(2, 3)])  # [A, B, S]
    for kw in ({}, {"positions": pos}, {"positions": pos[0]}):
        with pytest.raises(ValueError, match=r"spec has 2 position axes .* pass tables=ropekit.axis_tables"):
            rope_cache_write(k, v, ck, cv, 0, spec, **kw)  # type: ignore[arg-type]
        assert not ck.any() and not cv.any()
    with pytest.raises(ValueError, match="spec has 2 position axes"):
        rope_paged_cache_write(
            k[0],
            v[0],
            torch.zeros(2, 4, 2, 8),
            torch.zeros(2, 4, 2, 8),
            torch.arange(3),
            spec,
            positions=pos[:, 0],
        )
    rope_cache_write(k, v, ck, cv, 0, spec, tables=axis_tables(pos, spec))
    want = apply_rope_axes(k, None, pos, spec)[0]  # bshd; the cache is bhsd
    assert torch.equal(ck[:, :, :3].transpose(1, 2), want) and torch.equal(cv[:, :, :3].transpose(1, 2), v)
