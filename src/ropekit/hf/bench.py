# SPDX-License-Identifier: MIT
"""Forward time of a patched transformers Llama against the unpatched one, and the time spent in RoPE inside it.

``ropekit bench --mode hf`` (or ``python -m ropekit.hf.bench``) builds a small random Llama (4 layers, hidden 512,
8 query heads and 2 kv heads of 64, vocab 1000, float32) and times, round by round in the same process:

* a prefill (1 x 2048 tokens; 1 x 256 with ``quick``) and a decode step (32 sequences x 1 token after a
  256-token cache; 8 x 1 after 64 with ``quick``), each forward timed alone (the cache is copied outside the
  timer);
* for each, the **time in RoPE**: the rotary module's forward (tables) plus every call of the modeling file's
  ``apply_rotary_pos_emb`` (rotation), summed over the forward by a timer around both, installed identically on
  both models;
* a decode step with a static KV cache, RoPE fused with the cache write or not (:mod:`ropekit.hf.bench_fused`);
* the unpatched model runs with transformers' own apply function (the patch's wrapper is taken out of the
  modeling module while it runs), so it pays nothing for ropekit being imported.

Floors (as every ``ropekit bench`` mode reports ratios to a floor measured in the same run): for the time in
RoPE, ``copy_`` of every layer's q and k into preallocated tensors (the bytes a rotation must at least move); for
the forward, the unpatched forward with RoPE skipped (the rotary module returns stored tables, the apply function
returns q and k unchanged), i.e. what the forward would cost if RoPE were free.

Shapes: q [b, 8, s, 64], k [b, 2, s, 64] per layer (bhsd, as transformers' attention has them).
Timings on a shared machine are noisy: read the ratios within one run, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import copy
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["main", "measure", "run_hf"]

_LAYERS, _HIDDEN, _HEADS, _KV, _HD = 4, 512, 8, 2, 64
UNPATCHED, PATCHED = "transformers eager", "ropekit patched"
FLOOR_ROPE, FLOOR_FWD = "floor: copy_ of q and k, every layer", "floor: forward with RoPE skipped"


class _Clock:
    """Accumulates the seconds spent inside the wrapped callables."""

    def __init__(self) -> None:
        self.total = 0.0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - t0

        return timed


def _models() -> tuple[Any, Any, Any]:
    import transformers
    from transformers.models.llama import modeling_llama

    import ropekit.hf

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.LlamaConfig(
            vocab_size=1000,
            hidden_size=_HIDDEN,
            intermediate_size=2 * _HIDDEN,
            num_hidden_layers=_LAYERS,
            num_attention_heads=_HEADS,
            num_key_value_heads=_KV,
            max_position_embeddings=8192,
        )
        ref = transformers.LlamaForCausalLM(cfg).eval()  # type: ignore[no-untyped-call]
        ours = ropekit.hf.patch(copy.deepcopy(ref))
    return ref, ours, modeling_llama


@contextmanager
def _installed(model: Any, modeling: Any, apply_fn: Callable[..., Any], clock: _Clock) -> Iterator[None]:
    """Run ``model`` with ``apply_fn`` as the modeling file's apply function, both RoPE pieces timed by clock."""
    rotary = model.model.rotary_emb
    saved = modeling.apply_rotary_pos_emb
    modeling.apply_rotary_pos_emb = clock.wrap(apply_fn)
    rotary.forward = clock.wrap(type(rotary).forward.__get__(rotary))
    try:
        yield
    finally:
        modeling.apply_rotary_pos_emb = saved
        del rotary.forward


@contextmanager
def _skipped(model: Any, modeling: Any, tables: tuple[torch.Tensor, torch.Tensor]) -> Iterator[None]:
    """Run ``model`` with RoPE free: stored tables, and an apply function that returns q and k unchanged."""
    rotary = model.model.rotary_emb
    saved = modeling.apply_rotary_pos_emb
    modeling.apply_rotary_pos_emb = lambda q, k, *a, **kw: (q, k)
    rotary.forward = lambda *a, **kw: tables
    try:
        yield
    finally:
        modeling.apply_rotary_pos_emb = saved
        del rotary.forward


def _cases(quick: bool) -> list[tuple[str, int, int, int]]:
    """(name, batch, new tokens, cached tokens)."""
    if quick:
        return [("prefill 1x256", 1, 256, 0), ("decode 8x1 after 64", 8, 1, 64)]
    return [("prefill 1x2048", 1, 2048, 0), ("decode 32x1 after 256", 32, 1, 256)]


def _case(
    models: tuple[Any, Any, Any], b: int, s: int, past: int, rounds: int, g: torch.Generator
) -> dict[str, dict[str, list[float]]]:
    """{"forward" | "rope": {impl: [ms per forward, one per round]}} for one shape."""
    ref, ours, modeling = models
    wrapped = modeling.apply_rotary_pos_emb
    original = getattr(wrapped, "_ropekit_original", wrapped)
    ids = torch.randint(0, 1000, (b, s), generator=g)
    pos = torch.arange(past, past + s).expand(b, s)
    caches: dict[str, Any] = {}
    if past:
        prompt = torch.randint(0, 1000, (b, past), generator=g)
        for key, m, fn in ((UNPATCHED, ref, original), (PATCHED, ours, wrapped)):
            modeling.apply_rotary_pos_emb = fn
            caches[key] = m(prompt, use_cache=True).past_key_values
        caches[FLOOR_FWD] = caches[UNPATCHED]
    modeling.apply_rotary_pos_emb = wrapped
    tables = ref.model.rotary_emb(ref.model.embed_tokens(ids), pos)
    q = torch.randn(_LAYERS, b, _HEADS, s, _HD, generator=g)
    k = torch.randn(_LAYERS, b, _KV, s, _HD, generator=g)
    qo, ko = torch.empty_like(q), torch.empty_like(k)

    def forward(m: Any, key: str) -> float:
        kw: dict[str, Any] = {"position_ids": pos, "use_cache": bool(past)}
        if past:
            kw["past_key_values"] = copy.deepcopy(caches[key])
        t0 = time.perf_counter()
        m(ids, **kw)
        return (time.perf_counter() - t0) * 1e3

    def floor_copy() -> float:
        t0 = time.perf_counter()
        for i in range(_LAYERS):
            qo[i].copy_(q[i])
            ko[i].copy_(k[i])
        return (time.perf_counter() - t0) * 1e3

    fwd: dict[str, list[float]] = {FLOOR_FWD: [], UNPATCHED: [], PATCHED: []}
    rope: dict[str, list[float]] = {FLOOR_ROPE: [], UNPATCHED: [], PATCHED: []}
    for r in range(rounds + 1):  # round 0 warms up (kernel build, table caches) and is dropped
        with _skipped(ref, modeling, tables):
            t_skip = forward(ref, FLOOR_FWD)
        t_copy = floor_copy()
        row = {}
        for key, m, fn in ((UNPATCHED, ref, original), (PATCHED, ours, wrapped)):
            clock = _Clock()
            with _installed(m, modeling, fn, clock):
                row[key] = (forward(m, key), clock.total * 1e3)
        if r:
            fwd[FLOOR_FWD].append(t_skip)
            rope[FLOOR_ROPE].append(t_copy)
            for key, (tf, tr) in row.items():
                fwd[key].append(tf)
                rope[key].append(tr)
    return {"forward": fwd, "rope": rope}


def measure(
    *, quick: bool = False, rounds: int = 9, progress: Callable[[str], None] | None = None
) -> dict[str, dict[str, dict[str, list[float]]]]:
    """{case: {"forward" | "rope": {impl: [ms per forward, one per round]}}} (see the module docstring)."""
    models = _models()
    g = torch.Generator().manual_seed(0)
    out: dict[str, dict[str, dict[str, list[float]]]] = {}
    with torch.no_grad():
        for name, b, s, past in _cases(quick):
            if progress:
                progress(f"hf: llama {name}")
            out[name] = _case(models, b, s, past, rounds, g)
    return out


def run_hf(*, quick: bool, rounds: int, progress: Callable[[str], None] | None) -> list[dict[str, Any]]:
    """Result rows for ``ropekit bench --mode hf`` (see :func:`ropekit.bench.timing.rows`)."""
    from ropekit.bench.timing import rows

    out: list[dict[str, Any]] = []
    for name, parts in measure(quick=quick, rounds=rounds, progress=progress).items():
        out += rows(f"hf llama {name} fp32: time in RoPE", "hf", parts["rope"], [FLOOR_ROPE])
        out += rows(f"hf llama {name} fp32: forward", "hf", parts["forward"], [FLOOR_FWD])
    from ropekit.hf.bench_fused import FLOOR_WRITE, measure_fused

    name, fwd, rope = measure_fused(quick=quick, rounds=rounds, progress=progress)
    out += rows(f"hf llama {name} fp32: time in RoPE + cache write", "hf", rope, [FLOOR_WRITE])
    out += rows(f"hf llama {name} fp32: forward", "hf", fwd, [FLOOR_FWD])
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from ropekit.bench import format_table, machine_info

    report = {
        "machine": machine_info("cpu"),
        "results": run_hf(quick=args.quick, rounds=args.rounds, progress=None),
    }
    print(format_table(report))


if __name__ == "__main__":
    main()
