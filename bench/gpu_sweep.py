"""Launch-configuration sweep and a profile of forward + backward, for bench/gpu.py --sweep / --only profile."""

from __future__ import annotations

from typing import Any

import torch
from gpu_peers import SHAPES, qk, spec_for
from gpu_timing import Fn, ms


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
            return ms(fn, rep=40) * 1e3
        finally:
            tb._TUNE = None

    def tables_fn(q: torch.Tensor, k: torch.Tensor, c: torch.Tensor, s: torch.Tensor, layout: str) -> Fn:
        return lambda: tb.rotate_qk(q, k, c, s, 128, layout, True)

    def pos_fn(q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor, layout: str) -> Fn:
        spec = spec_for(layout)
        return lambda: tp.rotate_qk_positions(q, k, pos, spec, True)

    def show(name: str, rows: list[dict[str, Any]]) -> None:
        rows.sort(key=lambda r: r["us"])
        out.append({"case": "sweep", "shape": name, "results": rows})
        print(f"sweep {name}:", [(round(r["us"], 2), *(r[x] for x in keys)) for r in rows[:5]], flush=True)

    big = qk(1, 32768, hq, hk, d)
    c32, s32 = tables_for(32768)
    rows = [{"us": time_cfg(tables_fn(*big, c32, s32, "half"), cfg), **cfg} for cfg in grid]
    show("tables llama3-8b 32k half", rows)
    top = [{x: r[x] for x in keys} for r in rows[:6]]
    pos32 = torch.arange(32768, device="cuda")[None]
    rows = [{"us": time_cfg(pos_fn(*big, pos32, "half"), cfg), **cfg} for cfg in grid]
    show("positions llama3-8b 32k half", rows)
    ptop = [{x: r[x] for x in keys} for r in rows[:6]]
    others = [
        ("llama3-70b 4k half", qk(1, 4096, 64, 8, d), 4096, False, "half"),
        ("llama3-8b 4k half", qk(1, 4096, hq, hk, d), 4096, False, "half"),
        ("llama3-8b decode 64 half", qk(64, 1, hq, hk, d), 64, True, "half"),
        ("llama3-8b 32k interleaved", big, 32768, False, "interleaved"),
    ]
    for name, (q, k), t, dec, layout in others:
        c, s = tables_for(t, decode=dec)
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
    q, k = (x.requires_grad_() for x in qk(1, 32768, hq, hk, d))
    gq, gk = torch.randn_like(q), torch.randn_like(k)
    spec = spec_for()
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


def tables_for(t: int, decode: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    from ropekit import rope_tables

    pos = torch.randint(0, 8192, (t, 1), device="cuda") if decode else torch.arange(t, device="cuda")[None]
    c, s = rope_tables(pos, spec_for())
    return c, s


def gap(quick: bool) -> list[dict[str, Any]]:
    """ropekit's kernel (tables given, in place) against Liger's on the shapes where Liger looked faster (run 6):
    the default launch and the head loop with wider head blocks (32, 64 heads; 4, 8 warps), with the copy floor
    and Liger timed in the same loop. Each cell is the lower of two interleaved passes (the device showed 2-5x
    one-off outliers in run 6)."""
    from gpu_peers import liger

    f = liger()
    cfgs: list[tuple[str, dict[str, int] | None]] = [("default", None)]
    cfgs += [
        (f"loop h{bh} w{w}", {"head_loop": 1, "block_h": bh, "num_warps": w})
        for bh in (32, 64)
        for w in (4, 8)
    ]
    out = []
    for model in ("llama3-8b", "llama3-70b"):
        for t in (256, 1024, 2048, 8192):
            best = _gap_cell(model, t, f, cfgs)
            out.append({"case": "gap", "model": model, "tokens": t, "us": best})
            print(f"gap {model} {t}:", {n: round(v, 1) for n, v in best.items()}, flush=True)
    return out


def _gap_cell(model: str, t: int, f: Any, cfgs: list[tuple[str, dict[str, int] | None]]) -> dict[str, float]:
    from gpu_peers import hf_tables

    from ropekit.rotation import triton_backend as tb

    hq, hk, d = SHAPES[model]
    q, k = qk(1, t, hq, hk, d)
    src = torch.randn(q.numel() + k.numel(), device="cuda", dtype=q.dtype)
    dst = torch.empty_like(src)
    c, s = tables_for(t)
    hcos, hsin = hf_tables(torch.arange(t, device="cuda")[None], spec_for(), q.dtype)
    qh, kh = q.transpose(1, 2), k.transpose(1, 2)
    fns: dict[str, tuple[Fn, dict[str, int] | None]] = {
        "copy": (lambda: dst.copy_(src), None),
        "liger": (lambda: f.apply(qh, kh, hcos, hsin), None),
    }
    for name, cfg in cfgs:
        fns[name] = (lambda: tb.rotate_qk(q, k, c, s, 128, "half", True), cfg)
    best: dict[str, float] = {}
    for _ in range(2):
        for name, (fn, cfg) in fns.items():
            tb._TUNE = cfg
            try:
                fn()
                best[name] = min(best.get(name, 1e9), ms(fn, rep=40) * 1e3)
            finally:
                tb._TUNE = None
    return best
