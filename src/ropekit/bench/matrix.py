# SPDX-License-Identifier: MIT
"""``ropekit bench`` modes "matrix" and "decode": ropekit's backends against the memory floor and every peer.

RoPE only streams memory, so the reference is the *floor*: the faster of copying q and k into preallocated
buffers (``copy_``) and an in-place scalar multiply of them (``mul_(1.0)``). Implementations are timed side by side
in one process, round-robin (every round runs each implementation once), and the median over rounds is reported;
decode-sized calls are timed in batches of calls. Peers are included when importable: transformers' eager
``apply_rotary_pos_emb`` and ``torch.compile`` of it, rotary-embedding-torch, and on GPUs flash-attn's and Liger's
rotary kernels.

Shapes (format "bhsd", in place): prefill 1 x 32 q heads x 8 kv heads x 4096 tokens x 128; decode 32 sequences x
1 token, each at its own position.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ropekit.bench.timing import measure, rows
from ropekit.module import Rotary
from ropekit.phases import rope_tables
from ropekit.rotation.apply import apply_rope, apply_rope_tables
from ropekit.spec import RopeSpec

__all__ = ["Case", "cases", "machine_info", "run_cases"]


@dataclass(frozen=True)
class Case:
    kind: str  # "prefill" or "decode"
    dtype: torch.dtype
    layout: str
    rotary_dim: int = 128
    batch: int = 1
    q_heads: int = 32
    kv_heads: int = 8
    seq: int = 4096
    head_dim: int = 128

    @property
    def name(self) -> str:
        dt = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.dtype]
        partial = f" rot{self.rotary_dim}" if self.rotary_dim != self.head_dim else ""
        return f"{self.kind} {dt} {self.layout}{partial}"


def cases(quick: bool) -> list[Case]:
    decode = {"batch": 32, "seq": 1}
    if quick:
        return [
            Case("prefill", torch.float32, "half"),
            Case("prefill", torch.bfloat16, "half"),
            Case("decode", torch.float32, "half", **decode),
        ]
    out = [
        Case("prefill", dt, lay) for dt in (torch.float32, torch.bfloat16) for lay in ("half", "interleaved")
    ]
    out.append(Case("prefill", torch.float32, "half", rotary_dim=64))
    out += [Case("decode", dt, "half", **decode) for dt in (torch.float32, torch.bfloat16)]
    return out


def machine_info(device: str) -> dict[str, Any]:
    from ropekit.kernels import cpu_build

    info: dict[str, Any] = {
        "device": device,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    try:
        for line in open("/proc/cpuinfo").read().splitlines():  # noqa: SIM115
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        info["cpu"] = platform.processor()
    if device == "cuda" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    b = cpu_build.build_info()
    info["cpu_kernel"] = {
        "available": b.available,
        "built_now": b.built,
        "build_seconds": round(b.seconds, 3),
        "reason": b.reason,
        "threads": b.threads,
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    return info


def _impls(case: Case, device: str, quick: bool) -> dict[str, Callable[[], Any]]:
    g = torch.Generator(device="cpu").manual_seed(0)
    dt, B, S, D = case.dtype, case.batch, case.seq, case.head_dim
    q = torch.randn(B, case.q_heads, S, D, generator=g).to(device, dt)
    k = torch.randn(B, case.kv_heads, S, D, generator=g).to(device, dt)
    spec = RopeSpec(D, base=500_000.0, rotary_dim=case.rotary_dim, layout=case.layout)  # type: ignore[arg-type]
    pos = (torch.randint(0, 100_000, (B, 1), generator=g) if case.kind == "decode" else torch.arange(S)).to(
        device
    )
    cos, sin = rope_tables(pos, spec)  # exact float32 tables, [S, n] or [B, 1, n]
    qb, kb = torch.empty_like(q), torch.empty_like(k)
    rot = Rotary(spec, max_seq_len=max(S, 4096), format="bhsd", device=device)
    impls: dict[str, Callable[[], Any]] = {
        "floor: copy_": lambda: (qb.copy_(q), kb.copy_(k)),
        "floor: mul_(1.0)": lambda: (q.mul_(1.0), k.mul_(1.0)),
        "ropekit (tables given)": lambda: apply_rope_tables(
            q, k, cos, sin, spec, format="bhsd", inplace=True
        ),
        "ropekit Rotary (cached tables)": lambda: rot(q, k, positions=pos, inplace=True),
        "ropekit apply_rope (exact tables per call)": lambda: apply_rope(
            q, k, pos, spec, format="bhsd", inplace=True
        ),
        "ropekit torch backend": lambda: apply_rope_tables(
            q, k, cos, sin, spec, format="bhsd", inplace=True, backend="torch"
        ),
    }
    if case.kind == "decode":
        impls["one elementwise op on q: mul_(1.0)"] = lambda: q.mul_(1.0)
    if (
        not quick
    ):  # what a compiled model pays per layer (plus the compiled call's own cost: see docs/kernels.md)
        c_rot = torch.compile(lambda q, k, p: rot(q, k, positions=p, inplace=True), fullgraph=True)
        c_apply = torch.compile(
            lambda q, k, p: apply_rope(q, k, p, spec, format="bhsd", inplace=True), fullgraph=True
        )
        impls["torch.compile(ropekit Rotary)"] = lambda: c_rot(q, k, pos)
        impls["torch.compile(ropekit apply_rope)"] = lambda: c_apply(q, k, pos)
    r = case.rotary_dim
    if case.layout == "half":
        try:
            from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as hf_apply

            cf = torch.cat([cos, cos], -1).to(
                dt
            )  # HF's tables: duplicated halves, cast to the activation dtype
            sf = torch.cat([sin, sin], -1).to(dt)
            cf, sf = (cf if cf.dim() == 3 else cf[None]), (sf if sf.dim() == 3 else sf[None])

            def hf_call(fn: Callable[..., Any] = hf_apply) -> Any:
                if r == D:
                    return fn(q, k, cf, sf)
                return fn(
                    q[..., :r], k[..., :r], cf, sf
                )  # HF partial rotary rotates a slice, then concatenates

            impls["transformers eager"] = hf_call
            if not quick:
                compiled = torch.compile(hf_apply, dynamic=False)
                impls["torch.compile(transformers)"] = lambda: hf_call(compiled)
        except ImportError:
            pass
    if case.kind == "prefill":
        try:
            from rotary_embedding_torch import RotaryEmbedding

            rete = RotaryEmbedding(dim=r, theta=500_000.0).to(device)  # interleaved pairs, positions 0..S-1
            impls["rotary-embedding-torch"] = lambda: (
                rete.rotate_queries_or_keys(q),
                rete.rotate_queries_or_keys(k),
            )
        except ImportError:
            pass
    if device == "cuda":
        _gpu_peers(impls, q, k, cos, sin, case)
    return impls


def _gpu_peers(
    impls: dict[str, Callable[[], Any]],
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    case: Case,
) -> None:
    try:
        from flash_attn.layers.rotary import apply_rotary_emb

        qs, ks = q.transpose(1, 2), k.transpose(1, 2)  # flash-attn wants bshd
        c2, s2 = cos.to(q.dtype), sin.to(q.dtype)
        il = case.layout == "interleaved"
        impls["flash-attn rotary"] = lambda: (
            apply_rotary_emb(qs, c2, s2, interleaved=il, inplace=True),
            apply_rotary_emb(ks, c2, s2, interleaved=il, inplace=True),
        )
    except ImportError:
        pass
    try:
        from liger_kernel.transformers.rope import liger_rotary_pos_emb

        if case.layout == "half":
            cf, sf = torch.cat([cos, cos], -1)[None].to(q.dtype), torch.cat([sin, sin], -1)[None].to(q.dtype)
            impls["liger rope"] = lambda: liger_rotary_pos_emb(q, k, cf, sf)
    except ImportError:
        pass


def run_cases(
    selected: list[Case],
    *,
    mode: str,
    device: str,
    quick: bool,
    rounds: int,
    progress: Callable[[str], None] | None,
) -> list[dict[str, Any]]:
    """Time every implementation of each case; rows as in :func:`ropekit.bench.timing.rows`."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    out: list[dict[str, Any]] = []
    with torch.no_grad():
        for case in selected:
            if progress:
                progress(f"{mode}: {case.name}")
            impls = _impls(case, device, quick)
            inner = 200 if case.kind == "decode" else 1
            samples = measure(impls, inner=inner, rounds=rounds, sync=sync)
            out += rows(case.name, mode, samples, ("floor: copy_", "floor: mul_(1.0)"))
    return out
