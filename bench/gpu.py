"""GPU benchmark of ropekit's Triton kernels against a device copy and peer implementations, on one GPU in one run.

    python bench/gpu.py [--quick] [--sweep] [--out FILE.json]

What it times (``triton.testing.do_bench``: CUDA events, L2 flushed before each call, median):
- prefill: Llama-3-8B (32 q / 8 kv heads) and Llama-3-70B (64 / 8) head shapes, d = 128, 4k and 32k tokens, bf16;
- decode: batch 1 ... 256, one token per sequence, Llama-3-8B heads; host time per eager call (what a Python loop
  pays) and device time per call inside a captured CUDA graph;
- varlen: 32 packed documents of random lengths, 16k tokens, ``cu_seqlens``;
- backward: forward + backward through autograd;
- tables: the exact float64-reduced cos/sin tables built on the device against a plain float32 build.

The bandwidth floor is one device copy of the same q and k bytes (read + write). Peers are taken from what is
installed: transformers' eager ``apply_rotary_pos_emb`` and its ``torch.compile``d form, Liger-Kernel's rope,
flash-attn's Triton rotary (importable from the source tree alone: set FLASH_ATTN_SRC to a folder holding
``flash_attn/ops/triton/rotary.py``), FlashInfer and vLLM; a peer that is missing is reported with the reason.
``--sweep`` also times launch configurations of ropekit's kernel (heads per program, tokens per program, warps).
"""

# ruff: noqa: B023, B008, PLC3002 -- closures are built and timed within one loop iteration
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

Fn = Callable[[], object]
BF16 = torch.bfloat16
SHAPES = {"llama3-8b": (32, 8, 128), "llama3-70b": (64, 8, 128)}


class Unavailable(Exception):
    """A peer that cannot run here; the message says why."""


def _ms(fn: Fn, rep: int = 100) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=rep, return_mode="median"))


def _host_us(fn: Fn, n: int = 200) -> float:
    """Wall time per call of a Python loop of n calls (host overhead included), microseconds, best of 5."""
    fn()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def _graph_us(fn: Fn, calls: int = 20) -> float:
    """Device time per call inside a captured CUDA graph of ``calls`` calls, microseconds."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return _ms(g.replay, rep=50) * 1e3 / calls


# ---------------------------------------------------------------------------------------------------- peers
def _hf_apply() -> Callable[..., Any]:
    try:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    except ImportError as e:
        raise Unavailable(f"transformers not importable: {e}") from e
    return apply_rotary_pos_emb


_COMPILED: dict[str, Any] = {}


def _hf_compiled() -> Callable[..., Any]:
    if "hf" not in _COMPILED:
        import torch._dynamo

        torch._dynamo.config.cache_size_limit = (
            256  # one graph per benchmarked shape, never an eager fallback
        )
        _COMPILED["hf"] = torch.compile(_hf_apply(), dynamic=False)
    return _COMPILED["hf"]


def _liger() -> Any:
    try:
        from liger_kernel.ops.rope import LigerRopeFunction
    except ImportError as e:
        raise Unavailable(f"liger-kernel not importable: {e}") from e
    return LigerRopeFunction


def _flash_attn() -> Any:
    src = os.environ.get("FLASH_ATTN_SRC")
    if src and src not in sys.path:
        sys.path.insert(0, src)
    try:
        return importlib.import_module("flash_attn.ops.triton.rotary"), importlib.import_module(
            "flash_attn.layers.rotary"
        )
    except ImportError as e:
        raise Unavailable(f"flash-attn's rotary not importable: {e}") from e


def _flashinfer() -> Any:
    try:
        import flashinfer
    except ImportError as e:
        raise Unavailable(f"flashinfer not importable: {e}") from e
    return flashinfer


def _vllm() -> Any:
    try:
        from vllm import _custom_ops
    except ImportError as e:
        raise Unavailable(f"vllm not importable: {e}") from e
    return _custom_ops


# ---------------------------------------------------------------------------------------------------- inputs
def _spec(layout: str = "half") -> Any:
    from ropekit import RopeSpec

    return RopeSpec(128, base=500_000.0, layout=layout)


def _hf_tables(pos: torch.Tensor, spec: Any, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """HF's cos/sin [b, s, d] (halves repeated) in the model dtype, as LlamaRotaryEmbedding returns them."""
    inv = 1.0 / (spec.base ** (torch.arange(0, 128, 2, device=pos.device, dtype=torch.float32) / 128))
    f = pos.float()[..., None] * inv
    emb = torch.cat((f, f), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _qk(
    b: int, s: int, hq: int, hk: int, d: int, dtype: torch.dtype = BF16
) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(b, s, hq, d, device="cuda", dtype=dtype), torch.randn(
        b, s, hk, d, device="cuda", dtype=dtype
    )


def _impls(q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor, layout: str) -> dict[str, Callable[[], Fn]]:
    """name -> builder of a zero-argument call that rotates q and k (bshd storage) once, in place where it can."""
    from ropekit import apply_rope, apply_rope_tables, rope_tables

    spec = _spec(layout)
    cos, sin = rope_tables(pos, spec)  # float32 [b|s, n]
    hcos, hsin = _hf_tables(pos if pos.dim() == 2 else pos[None], spec, q.dtype)
    qh, kh = q.transpose(1, 2), k.transpose(1, 2)  # HF's [b, h, s, d] views of the same storage
    total = q.numel() + k.numel()
    src = torch.randn(total, device="cuda", dtype=q.dtype)
    dst = torch.empty_like(src)

    def fa() -> Fn:
        ops, _ = _flash_attn()
        n = int(pos.max()) + 1
        fcos, fsin = rope_tables(torch.arange(n, device="cuda"), spec)
        offs = pos[:, 0].to(torch.int32).contiguous() if pos.dim() == 2 and pos.shape[1] == 1 else 0
        il = layout == "interleaved"

        def run() -> None:
            ops.apply_rotary(q, fcos, fsin, seqlen_offsets=offs, interleaved=il, inplace=True)
            ops.apply_rotary(k, fcos, fsin, seqlen_offsets=offs, interleaved=il, inplace=True)

        return run

    def liger() -> Fn:
        if layout != "half":
            raise Unavailable("Liger's rope is half-split only")
        f = _liger()
        return lambda: f.apply(qh, kh, hcos, hsin)

    def hf(fn: Callable[[], Callable[..., Any]]) -> Callable[[], Fn]:
        def build() -> Fn:
            if layout != "half":
                raise Unavailable("transformers' Llama rotate_half is half-split only")
            g = fn()
            return lambda: g(qh, kh, hcos, hsin)

        return build

    def flashinfer() -> Fn:
        fi = _flashinfer()
        n = int(pos.max()) + 1
        fcos, fsin = rope_tables(torch.arange(n, device="cuda"), spec)
        cache = torch.cat((fcos, fsin), dim=-1).contiguous()
        flat = pos.reshape(-1)
        qf, kf = q.view(flat.numel(), -1), k.view(flat.numel(), -1)
        return lambda: fi.apply_rope_with_cos_sin_cache_inplace(
            flat, qf, kf, 128, cache, is_neox=layout == "half"
        )

    def vllm() -> Fn:
        ops = _vllm()
        n = int(pos.max()) + 1
        fcos, fsin = rope_tables(torch.arange(n, device="cuda"), spec)
        cache = torch.cat((fcos, fsin), dim=-1).to(q.dtype).contiguous()
        flat = pos.reshape(-1)
        qf, kf = q.view(flat.numel(), -1), k.view(flat.numel(), -1)
        return lambda: ops.rotary_embedding(flat, qf, kf, 128, cache, layout == "half")

    def rotary() -> Fn:
        from ropekit import Rotary

        rope = Rotary(spec).cuda()
        return lambda: rope(q, k, positions=pos, inplace=True)

    def launch_only() -> Fn:
        from ropekit.rotation import triton_backend as tb

        c3 = cos if cos.dim() == 3 else cos[None]
        s3 = sin if sin.dim() == 3 else sin[None]
        return lambda: tb.rotate_qk(q, k, c3, s3, 128, layout, True)

    return {
        "copy (floor)": lambda: lambda: dst.copy_(src),
        "ropekit rotate_qk (kernel launch only)": launch_only,
        "ropekit apply_rope_tables": lambda: lambda: apply_rope_tables(q, k, cos, sin, spec, inplace=True),
        "ropekit apply_rope (positions)": lambda: lambda: apply_rope(q, k, pos, spec, inplace=True),
        "ropekit Rotary module": rotary,
        "transformers eager": hf(_hf_apply),
        "transformers torch.compile": hf(_hf_compiled),
        "liger-kernel": liger,
        "flash-attn triton": fa,
        "flashinfer": flashinfer,
        "vllm": vllm,
    }


def _check_same_rotation(q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor) -> dict[str, float]:
    """Sanity: every peer computes the same rotation as ropekit's PyTorch backend (max abs difference over q and k,
    bf16 outputs)."""
    from ropekit import apply_rope

    want_q, want_k = apply_rope(q, k, pos, _spec(), backend="torch")
    assert want_k is not None
    out: dict[str, float] = {}
    for name in _impls(q, k, pos, "half"):
        if name.startswith("copy"):
            continue
        q2, k2 = q.clone(), k.clone()
        try:
            r = _impls(q2, k2, pos, "half")[name]()()
        except Unavailable:
            continue
        got_q, got_k = q2, k2  # in place
        if isinstance(r, tuple) and isinstance(r[0], torch.Tensor) and not name.startswith("ropekit"):
            got_q, got_k = (x.transpose(1, 2) if x.shape != y.shape else x for x, y in ((r[0], q), (r[1], k)))
        out[name] = max(
            float((got_q.float() - want_q.float()).abs().max()),
            float((got_k.float() - want_k.float()).abs().max()),
        )
    return out


# ---------------------------------------------------------------------------------------------------- cases
def _run_impls(impls: dict[str, Callable[[], Fn]], nbytes: int, mode: str) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for name, build in impls.items():
        try:
            fn = build()
            fn()
            torch.cuda.synchronize()
            if mode == "device":
                t = _ms(fn) * 1e3
                rows[name] = {"us": t, "GBps": nbytes / t / 1e3}
            else:
                rows[name] = {"host_us": _host_us(fn)}
                try:
                    rows[name]["graph_us"] = _graph_us(fn)
                except Exception as e:  # noqa: BLE001 - reported: a call that cannot be captured
                    rows[name]["graph_us"] = None
                    rows[name]["graph_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                    torch.cuda.synchronize()
        except Unavailable as e:
            rows[name] = {"unavailable": str(e)}
        except Exception as e:  # noqa: BLE001 - a peer that breaks is reported, not fatal
            rows[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"}
    return rows


def prefill(quick: bool) -> list[dict[str, Any]]:
    out = []
    tokens = [4096] if quick else [4096, 32768]
    for model, (hq, hk, d) in SHAPES.items():
        for t in tokens:
            for layout in ("half", "interleaved") if (model == "llama3-8b") else ("half",):
                q, k = _qk(1, t, hq, hk, d)
                pos = torch.arange(t, device="cuda")[None]
                nbytes = 2 * (q.nbytes + k.nbytes)
                rows = _run_impls(_impls(q, k, pos, layout), nbytes, "device")
                out.append(
                    {
                        "case": "prefill",
                        "model": model,
                        "tokens": t,
                        "layout": layout,
                        "bytes": nbytes,
                        "rows": rows,
                    }
                )
                _print(out[-1])
    return out


def decode(quick: bool) -> list[dict[str, Any]]:
    out = []
    hq, hk, d = SHAPES["llama3-8b"]
    for b in [1, 64] if quick else [1, 8, 32, 64, 128, 256]:
        q, k = _qk(b, 1, hq, hk, d)
        pos = torch.randint(0, 8192, (b, 1), device="cuda")
        nbytes = 2 * (q.nbytes + k.nbytes)
        rows = _run_impls(_impls(q, k, pos, "half"), nbytes, "host")
        out.append({"case": "decode", "model": "llama3-8b", "batch": b, "bytes": nbytes, "rows": rows})
        _print(out[-1])
    return out


def varlen(quick: bool) -> list[dict[str, Any]]:
    from ropekit import apply_rope_varlen, positions_from_cu_seqlens, rope_tables

    hq, hk, d = SHAPES["llama3-8b"]
    g = torch.Generator().manual_seed(0)
    n_docs, total = 32, 16384
    cuts = torch.sort(torch.randperm(total - 1, generator=g)[: n_docs - 1] + 1).values
    cu = torch.cat((torch.tensor([0]), cuts, torch.tensor([total]))).to("cuda", torch.int32)
    lens = (cu[1:] - cu[:-1]).cpu()
    q = torch.randn(total, hq, d, device="cuda", dtype=BF16)
    k = torch.randn(total, hk, d, device="cuda", dtype=BF16)
    spec = _spec()
    pos = positions_from_cu_seqlens(cu)
    hcos, hsin = _hf_tables(pos[None], spec, BF16)
    qh, kh = q[None].transpose(1, 2), k[None].transpose(1, 2)
    src = torch.randn(q.numel() + k.numel(), device="cuda", dtype=BF16)
    dst = torch.empty_like(src)
    max_len = int(lens.max())

    def fa() -> Fn:
        ops, _ = _flash_attn()
        fcos, fsin = rope_tables(torch.arange(max_len, device="cuda"), spec)
        return lambda: (
            ops.apply_rotary(q, fcos, fsin, cu_seqlens=cu, max_seqlen=max_len, inplace=True),
            ops.apply_rotary(k, fcos, fsin, cu_seqlens=cu, max_seqlen=max_len, inplace=True),
        )

    impls: dict[str, Callable[[], Fn]] = {
        "copy (floor)": lambda: lambda: dst.copy_(src),
        "ropekit apply_rope_varlen": lambda: lambda: apply_rope_varlen(q, k, cu, spec, inplace=True),
        "transformers eager": lambda: lambda f=_hf_apply(): f(qh, kh, hcos, hsin),
        "transformers torch.compile": lambda: lambda f=_hf_compiled(): f(qh, kh, hcos, hsin),
        "liger-kernel": lambda: lambda f=_liger(): f.apply(qh, kh, hcos, hsin),
        "flash-attn triton": fa,
    }
    nbytes = 2 * (q.nbytes + k.nbytes)
    row = {"case": "varlen", "model": "llama3-8b", "tokens": total, "docs": n_docs, "bytes": nbytes}
    row["rows"] = _run_impls(impls, nbytes, "device")
    _print(row)
    return [row]


def backward(quick: bool) -> list[dict[str, Any]]:
    from ropekit import apply_rope_tables, rope_tables

    out = []
    hq, hk, d = SHAPES["llama3-8b"]
    for t in [4096] if quick else [4096, 32768]:
        q, k = (x.requires_grad_() for x in _qk(1, t, hq, hk, d))
        gq, gk = torch.randn_like(q), torch.randn_like(k)
        spec = _spec()
        pos = torch.arange(t, device="cuda")[None]
        cos, sin = rope_tables(pos[0], spec)
        hcos, hsin = _hf_tables(pos, spec, BF16)
        src = torch.randn(q.numel() + k.numel(), device="cuda", dtype=BF16)
        dst = torch.empty_like(src)

        def fb(f: Callable[[], tuple[torch.Tensor, torch.Tensor]]) -> Fn:
            return lambda: torch.autograd.grad(f(), (q, k), (gq, gk))

        def hf_bhsd(g: Callable[..., Any]) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
            return lambda: tuple(
                x.transpose(1, 2) for x in g(q.transpose(1, 2), k.transpose(1, 2), hcos, hsin)
            )  # type: ignore[return-value]

        def fa() -> Fn:
            _, layers = _flash_attn()
            return fb(lambda: (layers.apply_rotary_emb(q, cos, sin), layers.apply_rotary_emb(k, cos, sin)))

        impls: dict[str, Callable[[], Fn]] = {
            "copy (floor)": lambda: lambda: (dst.copy_(src), dst.copy_(src)),
            "ropekit apply_rope_tables": lambda: fb(lambda: apply_rope_tables(q, k, cos, sin, spec)),  # type: ignore[arg-type,return-value]
            "transformers eager": lambda: fb(hf_bhsd(_hf_apply())),
            "transformers torch.compile": lambda: fb(hf_bhsd(_hf_compiled())),
            "liger-kernel": lambda: fb(hf_bhsd(_liger().apply)),
            "flash-attn triton": fa,
        }
        nbytes = 4 * (q.nbytes + k.nbytes)
        row = {"case": "fwd+bwd", "model": "llama3-8b", "tokens": t, "bytes": nbytes}
        row["rows"] = _run_impls(impls, nbytes, "device")
        out.append(row)
        _print(row)
    return out


def tables(quick: bool) -> list[dict[str, Any]]:
    """Exact tables on the device (float64 reduction, ropekit.phases._rope_tables, no cache) vs a float32 build."""
    from ropekit import apply_rope_tables, rope_tables
    from ropekit.phases import _rope_tables

    spec = _spec()
    out = []
    hq, hk, d = SHAPES["llama3-8b"]
    for t in [4096, 32768]:
        for start in (0, 2**40):
            pos = torch.arange(start, start + t, device="cuda")
            inv = spec.inv_freq(dtype=torch.float32).to("cuda")
            q, k = _qk(1, t, hq, hk, d)
            cos, sin = rope_tables(pos, spec)
            impls: dict[str, Callable[[], Fn]] = {
                "exact float64-reduced tables (no cache)": lambda pos=pos: lambda: _rope_tables(pos, spec),
                "rope_tables (one Triton launch on CUDA)": lambda pos=pos: lambda: rope_tables(pos, spec),
                "float32 outer product + cos/sin": lambda pos=pos: (
                    lambda: (lambda f: (f.cos(), f.sin()))(torch.outer(pos.float(), inv))
                ),
                "rotation, tables given (apply_rope_tables)": lambda q=q, k=k, cos=cos, sin=sin: (
                    lambda: apply_rope_tables(q, k, cos, sin, spec, inplace=True)
                ),
            }
            row = {"case": "tables", "tokens": t, "start": start, "rows": _run_impls(impls, 1, "device")}
            out.append(row)
            _print(row)
    return out


def sweep(quick: bool) -> list[dict[str, Any]]:
    """Launch configurations of ropekit's kernel, tables given and from positions (in place)."""
    from ropekit.rotation import triton_backend as tb
    from ropekit.rotation import triton_positions as tp

    out = []
    hq, hk, d = SHAPES["llama3-8b"]
    keys = ("block_h", "block_t", "num_warps", "split", "head_loop")
    grid = [
        {"block_h": bh, "block_t": bt, "num_warps": w, "split": 0, "head_loop": hl}
        for bh in (8, 16, 32)
        for bt in (1, 2)
        for w in (2, 4, 8)
        for hl in (0, 1)
    ]

    def time_cfg(fn: Fn, cfg: dict[str, int]) -> float:
        tb._TUNE = cfg
        try:
            fn()
            return _ms(fn, rep=40) * 1e3
        finally:
            tb._TUNE = None

    def tables_fn(q: torch.Tensor, k: torch.Tensor, c: torch.Tensor, s: torch.Tensor, layout: str) -> Fn:
        return lambda: tb.rotate_qk(q, k, c, s, 128, layout, True)

    def pos_fn(q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor, layout: str) -> Fn:
        spec = _spec(layout)
        return lambda: tp.rotate_qk_positions(q, k, pos, spec, True)

    def show(name: str, rows: list[dict[str, Any]]) -> None:
        rows.sort(key=lambda r: r["us"])
        out.append({"case": "sweep", "shape": name, "results": rows})
        print(f"sweep {name}:", [(round(r["us"], 2), *(r[x] for x in keys)) for r in rows[:5]], flush=True)

    big = _qk(1, 32768, hq, hk, d)
    c32, s32 = _tables_for(32768)
    rows = [{"us": time_cfg(tables_fn(*big, c32, s32, "half"), cfg), **cfg} for cfg in grid]
    show("tables llama3-8b 32k half", rows)
    top = [{x: r[x] for x in keys} for r in rows[:6]]
    pos32 = torch.arange(32768, device="cuda")[None]
    rows = [{"us": time_cfg(pos_fn(*big, pos32, "half"), cfg), **cfg} for cfg in grid]
    show("positions llama3-8b 32k half", rows)
    ptop = [{x: r[x] for x in keys} for r in rows[:6]]
    others = [
        ("llama3-70b 4k half", _qk(1, 4096, 64, 8, d), 4096, False, "half"),
        ("llama3-8b 4k half", _qk(1, 4096, hq, hk, d), 4096, False, "half"),
        ("llama3-8b decode 64 half", _qk(64, 1, hq, hk, d), 64, True, "half"),
        ("llama3-8b 32k interleaved", big, 32768, False, "interleaved"),
    ]
    for name, (q, k), t, dec, layout in others:
        c, s = _tables_for(t, decode=dec)
        pos = torch.randint(0, 8192, (t, 1), device="cuda") if dec else torch.arange(t, device="cuda")[None]
        for kind, cfgs in (("tables", top), ("positions", ptop)):
            rows = []
            for cfg in cfgs:
                for split in (0, 1) if layout == "interleaved" else (0,):
                    cfg2 = {**cfg, "split": split}
                    fn = tables_fn(q, k, c, s, layout) if kind == "tables" else pos_fn(q, k, pos, layout)
                    rows.append({"us": time_cfg(fn, cfg2), **cfg2})
            default = tb.launch_config(q.shape[2], k.shape[2], 64, t, layout, kind == "positions")
            fn = tables_fn(q, k, c, s, layout) if kind == "tables" else pos_fn(q, k, pos, layout)
            rows.append({"us": time_cfg(fn, default), **default, "default": 1})
            show(f"{kind} {name}", rows)
    return out


def profile_backward(quick: bool) -> list[dict[str, Any]]:
    """Kernels of one ropekit forward + backward (8B heads, 32k tokens), from torch.profiler (printed)."""
    from torch.profiler import ProfilerActivity, profile

    from ropekit import apply_rope_tables, rope_tables

    hq, hk, d = SHAPES["llama3-8b"]
    q, k = (x.requires_grad_() for x in _qk(1, 32768, hq, hk, d))
    gq, gk = torch.randn_like(q), torch.randn_like(k)
    spec = _spec()
    cos, sin = rope_tables(torch.arange(32768, device="cuda"), spec)

    def fn() -> object:
        return torch.autograd.grad(apply_rope_tables(q, k, cos, sin, spec), (q, k), (gq, gk))

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    print(p.key_averages().table(sort_by="cuda_time_total", row_limit=12), flush=True)
    return []


def _tables_for(t: int, decode: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    from ropekit import rope_tables

    pos = torch.randint(0, 8192, (t, 1), device="cuda") if decode else torch.arange(t, device="cuda")[None]
    c, s = rope_tables(pos, _spec())
    return c, s


# ---------------------------------------------------------------------------------------------------- output
def _fmt(r: dict[str, Any]) -> str:
    if "unavailable" in r:
        return "n/a"
    if "error" in r:
        return "ERROR"
    if "us" in r:
        return f"{r['us']:.1f} us"
    g = r.get("graph_us")
    return f"{r['host_us']:.1f} / {'-' if g is None else f'{g:.2f}'} us"


def _print(row: dict[str, Any]) -> None:
    head = {k: v for k, v in row.items() if k not in ("rows", "bytes")}
    floor = row["rows"].get("copy (floor)", {})
    print(json.dumps(head), flush=True)
    for name, r in row["rows"].items():
        extra = ""
        if "us" in r and "us" in floor and not name.startswith("copy"):
            extra = f"  {floor['us'] / r['us']:.0%} of copy"
        if "GBps" in r:
            extra += f"  {r['GBps']:.0f} GB/s"
        why = r.get("unavailable") or r.get("error") or r.get("graph_error") or ""
        print(f"   {name:44s} {_fmt(r):>22s}{extra}  {why}", flush=True)


def machine() -> dict[str, Any]:
    import triton

    info: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
        "python": platform.python_version(),
    }
    for mod in ("transformers", "liger_kernel", "flashinfer", "vllm"):
        try:
            m = importlib.import_module(mod)
            info[mod] = getattr(m, "__version__", "?")
        except Exception as e:  # noqa: BLE001 - recorded
            info[mod] = f"not importable ({type(e).__name__})"
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--sweep", action="store_true", help="also time launch configurations of ropekit's kernel"
    )
    ap.add_argument(
        "--only", default="", help="comma list of parts: prefill,decode,varlen,backward,tables,sweep,profile"
    )
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench/gpu.py needs a CUDA device", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    report: dict[str, Any] = {"machine": machine(), "results": []}
    print(json.dumps(report["machine"]), flush=True)
    q, k = _qk(1, 512, 32, 8, 128)
    try:
        report["same_rotation_max_abs_diff"] = _check_same_rotation(
            q, k, torch.arange(512, device="cuda")[None]
        )
    except Exception as e:  # noqa: BLE001 - a broken check is reported, the timings still run
        report["same_rotation_max_abs_diff"] = {"error": f"{type(e).__name__}: {e}"}
    print("same rotation (max |peer - ropekit| on bf16 q):", report["same_rotation_max_abs_diff"], flush=True)
    parts = [p for p in a.only.split(",") if p] or ["prefill", "decode", "varlen", "backward", "tables"]
    if a.sweep and "sweep" not in parts:
        parts.append("sweep")
    fns = {
        "prefill": prefill,
        "decode": decode,
        "varlen": varlen,
        "backward": backward,
        "tables": tables,
        "sweep": sweep,
        "profile": profile_backward,
    }
    for p in parts:
        t0 = time.perf_counter()
        try:
            report["results"] += fns[p](a.quick)
        except Exception as e:  # noqa: BLE001 - keep the other parts
            import traceback

            traceback.print_exc()
            report["results"].append({"case": p, "error": f"{type(e).__name__}: {e}"})
        print(f"[{p}: {time.perf_counter() - t0:.0f} s]", flush=True)
        if a.out:
            with open(a.out, "w") as f:
                json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
