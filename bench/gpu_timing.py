"""Timing for bench/gpu.py: device time with events (L2 flushed, median), host time of an eager loop, device time
inside a captured CUDA graph; running a table of implementations and printing it."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

import torch

Fn = Callable[[], object]


class Unavailable(Exception):
    """A peer that cannot run here; the message says why."""


def ms(fn: Fn, rep: int = 100) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=rep, return_mode="median"))


def host_us(fn: Fn, n: int = 200) -> float:
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


def graph_us(fn: Fn, calls: int = 20) -> float:
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
    return ms(g.replay, rep=50) * 1e3 / calls


def run_impls(impls: dict[str, Callable[[], Fn]], nbytes: int, mode: str) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for name, build in impls.items():
        try:
            fn = build()
            fn()
            torch.cuda.synchronize()
            if mode == "device":
                t = ms(fn) * 1e3
                rows[name] = {"us": t, "GBps": nbytes / t / 1e3}
            else:
                rows[name] = {"host_us": host_us(fn)}
                try:
                    rows[name]["graph_us"] = graph_us(fn)
                except Exception as e:  # noqa: BLE001 - reported: a call that cannot be captured
                    rows[name]["graph_us"] = None
                    rows[name]["graph_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                    torch.cuda.synchronize()
        except Unavailable as e:
            rows[name] = {"unavailable": str(e)}
        except Exception as e:  # noqa: BLE001 - a peer that breaks is reported, not fatal
            rows[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"}
    return rows


# ---------------------------------------------------------------------------------------------------- output
def fmt_row(r: dict[str, Any]) -> str:
    if "unavailable" in r:
        return "n/a"
    if "error" in r:
        return "ERROR"
    if "us" in r:
        return f"{r['us']:.1f} us"
    g = r.get("graph_us")
    return f"{r['host_us']:.1f} / {'-' if g is None else f'{g:.2f}'} us"


def print_row(row: dict[str, Any]) -> None:
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
        print(f"   {name:44s} {fmt_row(r):>22s}{extra}  {why}", flush=True)
