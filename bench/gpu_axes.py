"""Multi-axis RoPE on one GPU: ropekit's entry points against 1-D RoPE of the same q and k, a device copy, and
transformers' own Qwen2-VL / Qwen3-VL text rotary code (eager and ``torch.compile``d), in one run.

    python bench/gpu_axes.py [--quick] [--out FILE.json]

M-RoPE (Wang et al. 2024, "Qwen2-VL"): three position axes (t, h, w) share the frequency bands of one head;
Qwen2-VL assigns contiguous sections [16, 24, 24], Qwen3-VL interleaves [24, 20, 20]. Axial 2-D RoPE (Heo et al.
2024) on a vision grid is timed against 1-D only (no transformers peer with the same split).

Shapes: Qwen2-VL-7B heads (28 q / 4 kv, d = 128), bf16, storage [b, s, h, d]. Prefill: 1 x 4,096 tokens (1,024 with
--quick) with a square image grid in the middle (t fixed, h and w the grid), as ``get_rope_index`` lays it out.
Decode: 1 / 32 / 128 sequences x 1 text token at positions near 3,000 (t = h = w). Vision: 1 x 64 x 64 patches,
16 heads, d = 64.

Rows (what a user calls; ropekit rotates in place, transformers returns new tensors as its models do):
- ``ropekit apply_rope (1-D)``: :func:`ropekit.apply_rope` with positions [b, s], the 1-D spec of the same base;
- ``ropekit apply_rope_axes``: positions [3, b, s], the exact tables built per call;
- ``ropekit Rotary (axes)``: the :class:`ropekit.Rotary` module with positions [3, b, s] (its cached tables);
- ``ropekit apply_rope_tables (axes)``: per-token tables from :func:`ropekit.axis_tables` given;
- ``transformers eager``: ``<Family>RotaryEmbedding.forward`` (cos/sin from positions) + ``apply_rotary_pos_emb``,
  which is what each attention layer of those models pays (the cos/sin once per forward, the apply per layer: both
  are listed separately too);
- ``transformers torch.compile``: the same two calls compiled together (``dynamic=False``).

Prefill and vision rows are device time (``triton.testing.do_bench``, L2 flushed, median); decode rows are the host
time of an eager loop and the device time inside a captured CUDA graph. Before timing, every row's output is compared
with a float64 rotation computed from the math (the angle p * base^(-2i/d) of each band's own axis), and the largest
error is printed: the rows must compute the same rotation to be compared.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from gpu_timing import Fn, Unavailable, print_row, run_impls

BF16 = torch.bfloat16


def text_positions(b: int, s: int, start: int, device: str) -> torch.Tensor:
    """[3, b, s]: text, a square image grid (t fixed, h and w the grid), text (the CPU axes mode's layout)."""
    from ropekit.bench.axes import _text_positions

    return _text_positions(b, s, start).to(device)


def reference(x: torch.Tensor, pos: torch.Tensor, spec: Any) -> torch.Tensor:
    """float64 multi-axis (or 1-D) rotation of x [b, s, h, d] (half split) from the math, positions [A, b, s]."""
    d = spec.head_dim
    n = d // 2
    inv = spec.base ** (-torch.arange(n, dtype=torch.float64, device=x.device) * 2 / d)
    if spec.axes is None:
        band_axis = torch.zeros(n, dtype=torch.long)
    elif spec.axes.scheme == "contiguous":
        band_axis = torch.repeat_interleave(
            torch.arange(len(spec.axes.sections)), torch.tensor(spec.axes.sections)
        )
    else:  # interleaved: bands cycle through the axes while every axis still has bands left
        left, order, a = list(spec.axes.sections), [], 0
        while len(order) < n:
            if left[a % len(left)] > 0:
                order.append(a % len(left))
                left[a % len(left)] -= 1
            a += 1
        band_axis = torch.tensor(order)
    p = pos.to(torch.float64)[band_axis.to(x.device)]  # [n, b, s]: each band's own axis
    ang = p.permute(1, 2, 0) * inv  # [b, s, n]
    cos, sin = ang.cos()[:, :, None], ang.sin()[:, :, None]
    x1, x2 = x.double()[..., :n], x.double()[..., n:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def hf_rotary(family: str, spec: Any, hq: int, device: str) -> tuple[Any, Callable[..., Any]]:
    """transformers' rotary module of the family (built from a config with ropekit's spec) and its apply."""
    try:
        import transformers as T
    except ImportError as e:
        raise Unavailable(f"transformers not importable: {e}") from e
    d = spec.head_dim
    rp: dict[str, Any] = {
        "rope_type": "default",
        "rope_theta": spec.base,
        "mrope_section": list(spec.axes.sections),
    }
    if family == "qwen2-vl":
        from transformers.models.qwen2_vl import modeling_qwen2_vl as m

        cfg = T.Qwen2VLTextConfig(hidden_size=hq * d, num_attention_heads=hq, rope_parameters=rp)
        emb = m.Qwen2VLRotaryEmbedding(cfg)
    else:
        from transformers.models.qwen3_vl import modeling_qwen3_vl as m

        cfg = T.Qwen3VLTextConfig(
            hidden_size=hq * d,
            num_attention_heads=hq,
            head_dim=d,
            rope_parameters={**rp, "mrope_interleaved": True},
        )
        emb = m.Qwen3VLTextRotaryEmbedding(cfg)
    return emb.to(device), m.apply_rotary_pos_emb


def text_case(family: str, b: int, s: int, start: int, mode: str) -> dict[str, Any]:
    from ropekit import RopeSpec, Rotary, apply_rope, apply_rope_axes, apply_rope_tables, axis_tables
    from ropekit.presets_vl import qwen2_vl_spec, qwen3_vl_spec

    hq, hk, d = 28, 4, 128
    spec = qwen2_vl_spec() if family == "qwen2-vl" else qwen3_vl_spec()
    spec1 = RopeSpec(head_dim=d, base=spec.base)
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, s, hq, d, device="cuda", dtype=BF16, generator=g)
    k = torch.randn(b, s, hk, d, device="cuda", dtype=BF16, generator=g)
    pos = text_positions(b, s, start, "cuda")
    cos, sin = axis_tables(pos, spec)
    rot = Rotary(spec, max_seq_len=start + s).to("cuda")
    src = torch.randn(q.numel() + k.numel(), device="cuda", dtype=BF16)
    dst = torch.empty_like(src)
    qh, kh = q.transpose(1, 2), k.transpose(1, 2)  # transformers' [b, h, s, d] views

    def hf(compiled: bool, part: str = "both") -> Callable[[], Fn]:
        def build() -> Fn:
            emb, apply = hf_rotary(family, spec, hq, "cuda")

            def both() -> Any:
                c, sn = emb(qh, pos)
                return apply(qh, kh, c, sn)

            if part == "cos/sin":
                return lambda: emb(qh, pos)
            if part == "apply":
                c, sn = emb(qh, pos)
                return lambda: apply(qh, kh, c, sn)
            return torch.compile(both, dynamic=False) if compiled else both

        return build

    impls: dict[str, Callable[[], Fn]] = {
        "copy (floor)": lambda: lambda: dst.copy_(src),
        "ropekit apply_rope (1-D)": lambda: lambda: apply_rope(q, k, pos[0], spec1, inplace=True),
        "ropekit apply_rope_axes": lambda: lambda: apply_rope_axes(q, k, pos, spec, inplace=True),
        "ropekit Rotary (axes)": lambda: lambda: rot(q, k, positions=pos, inplace=True),
        "ropekit apply_rope_tables (axes)": lambda: (
            lambda: apply_rope_tables(q, k, cos, sin, spec, inplace=True)
        ),
        "transformers eager": hf(False),
        "transformers eager: cos/sin only": hf(False, "cos/sin"),
        "transformers eager: apply only": hf(False, "apply"),
        "transformers torch.compile": hf(True),
    }
    errors = check(q, k, pos, spec, spec1, impls)
    nbytes = 2 * (q.nbytes + k.nbytes)
    row = {"case": f"{family} {'prefill' if s > 1 else 'decode'}", "batch": b, "tokens": s, "bytes": nbytes}
    row["max_abs_error_vs_float64"] = errors
    row["rows"] = run_impls(impls, nbytes, mode)
    return row


def check(
    q: torch.Tensor,
    k: torch.Tensor,
    pos: torch.Tensor,
    spec: Any,
    spec1: Any,
    impls: dict[str, Callable[[], Fn]],
) -> dict[str, float]:
    """Largest |output - float64 reference| over q and k for every rotating row (fresh copies of q and k)."""
    out: dict[str, float] = {}
    q0, k0 = q.clone(), k.clone()
    for name, build in impls.items():
        if name.startswith("copy") or name.endswith("only"):
            continue
        try:
            fn = build()
            q.copy_(q0)
            k.copy_(k0)
            res = fn()
            got_q, got_k = (
                (q, k) if name.startswith("ropekit") else (res[0].transpose(1, 2), res[1].transpose(1, 2))
            )
            use = spec1 if "1-D" in name else spec
            p = pos[:1] if "1-D" in name else pos
            err = max(
                float((got_q.double() - reference(q0, p, use)).abs().max()),
                float((got_k.double() - reference(k0, p, use)).abs().max()),
            )
            out[name] = err
        except Unavailable:
            pass
        except Exception as e:  # noqa: BLE001 - the timing pass reports the same error
            out[name] = float("nan")
            print(f"   check {name}: {type(e).__name__}: {e}", flush=True)
    q.copy_(q0)
    k.copy_(k0)
    print("   max |error| vs float64: " + ", ".join(f"{n} {e:.2g}" for n, e in out.items()), flush=True)
    return out


def vision_case(side: int) -> dict[str, Any]:
    from ropekit import RopeSpec, Rotary, apply_rope, apply_rope_axes
    from ropekit.presets_vl import pixtral_spec

    h, d, s = 16, 64, side * side
    spec, spec1 = pixtral_spec(d), RopeSpec(head_dim=d, base=10_000.0)
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(1, s, h, d, device="cuda", dtype=BF16, generator=g)
    k = torch.randn(1, s, h, d, device="cuda", dtype=BF16, generator=g)
    ar = torch.arange(s, device="cuda")
    pos = torch.stack([ar // side, ar % side])[:, None, :]
    rot = Rotary(spec, max_seq_len=side).to("cuda")
    src = torch.randn(q.numel() + k.numel(), device="cuda", dtype=BF16)
    dst = torch.empty_like(src)
    impls: dict[str, Callable[[], Fn]] = {
        "copy (floor)": lambda: lambda: dst.copy_(src),
        "ropekit apply_rope (1-D)": lambda: lambda: apply_rope(q, k, pos[0], spec1, inplace=True),
        "ropekit apply_rope_axes": lambda: lambda: apply_rope_axes(q, k, pos, spec, inplace=True),
        "ropekit Rotary (axes)": lambda: lambda: rot(q, k, positions=pos, inplace=True),
    }
    nbytes = 2 * (q.nbytes + k.nbytes)
    row = {"case": "2-d vision prefill", "grid": f"{side}x{side}", "bytes": nbytes}
    row["rows"] = run_impls(impls, nbytes, "device")
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    import ropekit

    t0 = time.time()
    meta = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "ropekit": ropekit.__version__,
    }
    for name in ("triton", "transformers"):
        try:
            meta[name] = __import__(name).__version__
        except ImportError:
            meta[name] = None
    print(json.dumps(meta), flush=True)
    torch._dynamo.config.cache_size_limit = 64
    results: list[dict[str, Any]] = []
    s = 1024 if a.quick else 4096
    for family in ("qwen2-vl", "qwen3-vl"):
        results.append(text_case(family, 1, s, 0, "device"))
        print_row(results[-1])
        for b in (1, 32) if a.quick else (1, 32, 128):
            results.append(text_case(family, b, 1, 3000, "host"))
            print_row(results[-1])
    results.append(vision_case(32 if a.quick else 64))
    print_row(results[-1])
    meta["seconds"] = round(time.time() - t0, 1)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
