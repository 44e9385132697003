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
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from gpu_peers import (
    BF16,
    SHAPES,
    check_same_rotation,
    flash_attn,
    hf_apply,
    hf_compiled,
    hf_tables,
    impls,
    liger,
    qk,
    spec_for,
)
from gpu_sweep import gap, profile_backward, sweep
from gpu_timing import Fn, print_row, run_impls

PREFILL_TOKENS: list[int] = []  # set by --tokens; empty means the defaults below


def prefill(quick: bool) -> list[dict[str, Any]]:
    out = []
    tokens = PREFILL_TOKENS or ([4096] if quick else [4096, 32768])
    for model, (hq, hk, d) in SHAPES.items():
        for t in tokens:
            for layout in ("half", "interleaved") if (model == "llama3-8b") else ("half",):
                q, k = qk(1, t, hq, hk, d)
                pos = torch.arange(t, device="cuda")[None]
                nbytes = 2 * (q.nbytes + k.nbytes)
                rows = run_impls(impls(q, k, pos, layout), nbytes, "device")
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
                print_row(out[-1])
    return out


def decode(quick: bool) -> list[dict[str, Any]]:
    out = []
    hq, hk, d = SHAPES["llama3-8b"]
    for b in [1, 64] if quick else [1, 8, 32, 64, 128, 256]:
        q, k = qk(b, 1, hq, hk, d)
        pos = torch.randint(0, 8192, (b, 1), device="cuda")
        nbytes = 2 * (q.nbytes + k.nbytes)
        rows = run_impls(impls(q, k, pos, "half"), nbytes, "host")
        out.append({"case": "decode", "model": "llama3-8b", "batch": b, "bytes": nbytes, "rows": rows})
        print_row(out[-1])
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
    spec = spec_for()
    pos = positions_from_cu_seqlens(cu)
    hcos, hsin = hf_tables(pos[None], spec, BF16)
    qh, kh = q[None].transpose(1, 2), k[None].transpose(1, 2)
    src = torch.randn(q.numel() + k.numel(), device="cuda", dtype=BF16)
    dst = torch.empty_like(src)
    max_len = int(lens.max())

    def fa() -> Fn:
        ops, _ = flash_attn()
        fcos, fsin = rope_tables(torch.arange(max_len, device="cuda"), spec)
        return lambda: (
            ops.apply_rotary(q, fcos, fsin, cu_seqlens=cu, max_seqlen=max_len, inplace=True),
            ops.apply_rotary(k, fcos, fsin, cu_seqlens=cu, max_seqlen=max_len, inplace=True),
        )

    impls: dict[str, Callable[[], Fn]] = {
        "copy (floor)": lambda: lambda: dst.copy_(src),
        "ropekit apply_rope_varlen": lambda: lambda: apply_rope_varlen(q, k, cu, spec, inplace=True),
        "transformers eager": lambda: lambda f=hf_apply(): f(qh, kh, hcos, hsin),
        "transformers torch.compile": lambda: lambda f=hf_compiled(): f(qh, kh, hcos, hsin),
        "liger-kernel": lambda: lambda f=liger(): f.apply(qh, kh, hcos, hsin),
        "flash-attn triton": fa,
    }
    nbytes = 2 * (q.nbytes + k.nbytes)
    row = {"case": "varlen", "model": "llama3-8b", "tokens": total, "docs": n_docs, "bytes": nbytes}
    row["rows"] = run_impls(impls, nbytes, "device")
    print_row(row)
    return [row]


def backward(quick: bool) -> list[dict[str, Any]]:
    from ropekit import apply_rope_tables, rope_tables

    out = []
    hq, hk, d = SHAPES["llama3-8b"]
    for t in [4096] if quick else [4096, 32768]:
        q, k = (x.requires_grad_() for x in qk(1, t, hq, hk, d))
        gq, gk = torch.randn_like(q), torch.randn_like(k)
        spec = spec_for()
        pos = torch.arange(t, device="cuda")[None]
        cos, sin = rope_tables(pos[0], spec)
        hcos, hsin = hf_tables(pos, spec, BF16)
        src = torch.randn(q.numel() + k.numel(), device="cuda", dtype=BF16)
        dst = torch.empty_like(src)

        def fb(f: Callable[[], tuple[torch.Tensor, torch.Tensor]]) -> Fn:
            return lambda: torch.autograd.grad(f(), (q, k), (gq, gk))

        def hf_bhsd(g: Callable[..., Any]) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
            return lambda: tuple(
                x.transpose(1, 2) for x in g(q.transpose(1, 2), k.transpose(1, 2), hcos, hsin)
            )  # type: ignore[return-value]

        def fa() -> Fn:
            _, layers = flash_attn()
            return fb(lambda: (layers.apply_rotary_emb(q, cos, sin), layers.apply_rotary_emb(k, cos, sin)))

        impls: dict[str, Callable[[], Fn]] = {
            "copy (floor)": lambda: lambda: (dst.copy_(src), dst.copy_(src)),
            "ropekit apply_rope_tables": lambda: fb(lambda: apply_rope_tables(q, k, cos, sin, spec)),  # type: ignore[arg-type,return-value]
            "transformers eager": lambda: fb(hf_bhsd(hf_apply())),
            "transformers torch.compile": lambda: fb(hf_bhsd(hf_compiled())),
            "liger-kernel": lambda: fb(hf_bhsd(liger().apply)),
            "flash-attn triton": fa,
        }
        nbytes = 4 * (q.nbytes + k.nbytes)
        row = {"case": "fwd+bwd", "model": "llama3-8b", "tokens": t, "bytes": nbytes}
        row["rows"] = run_impls(impls, nbytes, "device")
        out.append(row)
        print_row(row)
    return out


def tables(quick: bool) -> list[dict[str, Any]]:
    """Exact tables on the device (float64 reduction, ropekit.phases._rope_tables, no cache) vs a float32 build."""
    from ropekit import apply_rope_tables, rope_tables
    from ropekit.phases import _rope_tables

    spec = spec_for()
    out = []
    hq, hk, d = SHAPES["llama3-8b"]
    for t in [4096, 32768]:
        for start in (0, 2**40):
            pos = torch.arange(start, start + t, device="cuda")
            inv = spec.inv_freq(dtype=torch.float32).to("cuda")
            q, k = qk(1, t, hq, hk, d)
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
            row = {"case": "tables", "tokens": t, "start": start, "rows": run_impls(impls, 1, "device")}
            out.append(row)
            print_row(row)
    return out


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
        "--only",
        default="",
        help="comma list of parts: prefill,decode,varlen,backward,tables,sweep,profile,gap",
    )
    ap.add_argument("--out", default="")
    ap.add_argument(
        "--tokens", default="", help="comma list of prefill lengths (default 4096,32768; 4096 with --quick)"
    )
    a = ap.parse_args(argv)
    if a.tokens:
        PREFILL_TOKENS[:] = [int(t) for t in a.tokens.split(",")]
    if not torch.cuda.is_available():
        print("bench/gpu.py needs a CUDA device", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    report: dict[str, Any] = {"machine": machine(), "results": []}
    print(json.dumps(report["machine"]), flush=True)
    q, k = qk(1, 512, 32, 8, 128)
    try:
        report["same_rotation_max_abs_diff"] = check_same_rotation(
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
        "gap": gap,
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
