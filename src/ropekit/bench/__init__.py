# SPDX-License-Identifier: MIT
"""``ropekit bench``: every way of calling ropekit against the memory floor measured in the same run.

RoPE only streams memory, so each mode has a *floor*: the cheapest way to move the same bytes without rotating
(``copy_``/``mul_(1.0)`` of q and k; for the cache write, the write alone). Implementations are timed side by side,
round-robin, and every result is a median with its 25th-75th percentile spread and a ratio to that floor.

Modes (``--mode``, repeatable; default "matrix"):

* ``matrix``: prefill and decode, dtypes, layouts, partial rotary, ropekit's entry points and the peers
  (:mod:`ropekit.bench.matrix`);
* ``decode``: only the decode cases of the matrix (32 sequences x 1 token);
* ``busy``: the kernel beside processes loading every core, idle and busy in one run (:mod:`ropekit.bench.busy`);
* ``cache-write``: RoPE fused with the KV-cache write, contiguous and paged (:mod:`ropekit.bench.cache_write`);
* ``axes``: multi-axis RoPE (M-RoPE, 2-D vision) against 1-D RoPE of the same tensors (:mod:`ropekit.bench.axes`);
* ``hf``: a patched transformers Llama against the unpatched one, time in RoPE and whole forward, prefill and
  decode (:mod:`ropekit.hf.bench`; needs transformers);
* ``lab``: training throughput of the lab's default model, tokens/s per variant (:mod:`ropekit.bench.lab`);
* ``all``: matrix, busy, cache-write, axes, hf and lab;
* ``extension``: a torch C++ extension against the ctypes kernel, with cold starts (:mod:`ropekit.bench.extension`;
  compiles for minutes the first time, so not in ``all``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ropekit.bench.matrix import Case, cases, machine_info, run_cases

__all__ = ["ALL", "MODES", "Case", "cases", "format_table", "machine_info", "run"]

MODES: tuple[str, ...] = ("matrix", "decode", "busy", "cache-write", "extension", "axes", "hf", "lab")
ALL: tuple[str, ...] = ("matrix", "busy", "cache-write", "axes", "hf", "lab")


def run(
    *,
    quick: bool = False,
    device: str = "cpu",
    rounds: int | None = None,
    progress: Callable[[str], None] | None = None,
    modes: Sequence[str] = ("matrix",),
) -> dict[str, Any]:
    """Run the modes; returns {"machine": {...}, "modes": [...], "rounds": N, "results": [row, ...]} (rows:
    :func:`ropekit.bench.timing.rows`).

    ``rounds``: timed rounds per implementation, a positive int (None: 5 with ``quick``, else 15); the report
    records the number used. Bad arguments raise (TypeError / ValueError) before anything is timed.
    """
    if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, int)):
        raise TypeError(f"rounds must be a positive int or None, got {type(rounds).__name__} {rounds!r}")
    if rounds is not None and rounds < 1:
        raise ValueError(f"rounds must be a positive int or None, got {rounds}")
    selected = list(dict.fromkeys(m for mode in modes for m in (ALL if mode == "all" else (mode,))))
    for m in selected:
        if m not in MODES:
            raise ValueError(f"bench mode must be one of {', '.join(MODES)} or all, got {m!r}")
    cpu_only = [m for m in selected if m in ("busy", "cache-write", "extension", "axes", "hf", "lab")]
    if device != "cpu" and cpu_only:
        raise ValueError(
            f"bench modes {', '.join(cpu_only)} run on the CPU only (busy, cache-write, extension, axes, hf, lab), "
            f"got device {device!r}"
        )
    if rounds is None:
        rounds = 5 if quick else 15
    results: list[dict[str, Any]] = []
    if "matrix" in selected:
        results += run_cases(
            cases(quick), mode="matrix", device=device, quick=quick, rounds=rounds, progress=progress
        )
    elif "decode" in selected:
        decode = [c for c in cases(quick) if c.kind == "decode"]
        results += run_cases(
            decode, mode="decode", device=device, quick=quick, rounds=rounds, progress=progress
        )
    cold: dict[str, Any] | None = None
    if "extension" in selected:  # before busy, which then times the extension op too
        from ropekit.bench.extension import run_extension

        ext_rows, cold = run_extension(quick=quick, rounds=rounds, progress=progress)
        results += ext_rows
    if "busy" in selected:
        from ropekit.bench.busy import run_busy

        results += run_busy(quick=quick, rounds=rounds, progress=progress)
    if "cache-write" in selected:
        from ropekit.bench.cache_write import run_cache_write

        results += run_cache_write(quick=quick, rounds=rounds, progress=progress)
    axes_summary: dict[str, float] | None = None
    if "axes" in selected:
        from ropekit.bench.axes import run_axes, summary

        axes_rows = run_axes(quick=quick, rounds=rounds, progress=progress)
        axes_summary = summary(axes_rows)
        results += axes_rows
    if "hf" in selected:
        from ropekit.hf.bench import run_hf

        results += run_hf(quick=quick, rounds=rounds, progress=progress)
    if "lab" in selected:
        from ropekit.bench.lab import run_lab

        results += run_lab(quick=quick, rounds=rounds, progress=progress)
    report: dict[str, Any] = {
        "machine": machine_info(device),
        "modes": selected,
        "rounds": rounds,
        "results": results,
    }
    if axes_summary is not None:
        report["axes_worst_ratio_to_1d"] = axes_summary
    if cold is not None:
        report["cold_start"] = cold
    return report


def format_table(report: dict[str, Any]) -> str:
    """The report as text: one block per (mode, case), ratios to that block's floor."""
    m = report["machine"]
    lines = [
        f"machine: {m.get('cpu', '?')} ({m.get('cpu_count')} cores, {m.get('torch_threads')} torch threads), "
        f"torch {m['torch']}"
        + (f", GPU {m['gpu']}" if "gpu" in m else "")
        + (
            f", CPU kernel threads: {m['cpu_kernel']['threads']}"
            if "threads" in m.get("cpu_kernel", {})
            else ""
        )
    ]
    blocks: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in report["results"]:
        blocks.setdefault((r.get("mode", "matrix"), r["case"]), []).append(r)
    for (mode, case), rs in blocks.items():
        hf = next((r["median_ms"] for r in rs if r["impl"] == "transformers eager"), math.nan)
        lines += ["", f"[{mode}] {case}"]
        lines.append(
            f"  {'implementation':<58} {'median':>11} {'IQR x floor':>14} {'x floor':>8} {'vs HF':>7}"
        )
        for r in rs:
            ms = r["median_ms"]
            t = f"{ms * 1e3:8.1f} us" if ms < 1 else f"{ms:8.3f} ms"
            floor = ms / r["ratio_to_floor"]
            iqr = (
                f"{r['q25_ms'] / floor:5.2f}-{r['q75_ms'] / floor:<5.2f}"
                if "q25_ms" in r and "q75_ms" in r
                else ""
            )
            speed = f"{hf / ms:6.1f}x" if not math.isnan(hf) else ""
            if "ratio_to_1d" in r:  # --mode axes: multi-axis time / the same entry point's 1-D time
                speed = f"{r['ratio_to_1d']:5.2f}x 1-D"
            lines.append(f"  {r['impl']:<58} {t:>11} {iqr:>14} {r['ratio_to_floor']:>8.2f} {speed:>7}")
    if "axes_worst_ratio_to_1d" in report:
        lines += ["", "[axes] largest multi-axis / 1-D ratio over the cases (target <= 1.3):"]
        lines += [f"  {k:<40} {v:6.2f}" for k, v in report["axes_worst_ratio_to_1d"].items()]
    return "\n".join(lines)
