# SPDX-License-Identifier: MIT
"""Decode step of a patched Llama with a static KV cache: RoPE fused with the cache write against not fused.

Part of ``ropekit bench --mode hf`` (:mod:`ropekit.hf.bench`, same model). One decode step (32 sequences x 1 token
after a 256-token prefill; 8 x 1 after 64 with ``quick``) is timed, round by round in the same process, for:

* ``transformers eager + StaticCache``: the unpatched model with transformers' own static cache;
* ``ropekit patched + StaticCache``: rotation by ropekit, then transformers' cache write (not fused);
* ``ropekit patched + FusedStaticCache``: q rotated by ropekit, k rotated while it is written
  (:mod:`ropekit.hf.fused_cache`).

Each forward gets its own copy of the prefilled cache (copied outside the timer). Two blocks: the whole forward,
and the time in RoPE plus the cache write (the rotary module, the apply function and ``cache.update``, timed
around each call). Floors: the unpatched forward with RoPE skipped, and the cache writes alone (its ``update``
time, same forward).

Shapes: cache keys/values [b, 2, past + 8, 64] per layer.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import torch

from ropekit.hf.bench import _Clock, _installed, _models, _skipped

__all__ = ["measure_fused"]

REF, NOT_FUSED, FUSED = (
    "transformers eager + StaticCache",
    "ropekit patched + StaticCache",
    "ropekit patched + FusedStaticCache",
)
FLOOR_FWD, FLOOR_WRITE = "floor: forward with RoPE skipped", "floor: the cache writes alone"


def measure_fused(
    *, quick: bool = False, rounds: int = 9, progress: Callable[[str], None] | None = None
) -> tuple[str, dict[str, list[float]], dict[str, list[float]]]:
    """(case name, {impl: forward ms per round}, {impl: RoPE + cache-write ms per round})."""
    import transformers

    from ropekit.hf.fused_cache import FusedStaticCache

    b, past = (8, 64) if quick else (32, 256)
    name = f"decode {b}x1 after {past}, static cache"
    if progress:
        progress(f"hf: llama {name}")
    ref, ours, modeling = _models()
    wrapped = modeling.apply_rotary_pos_emb
    original = getattr(wrapped, "_ropekit_original", wrapped)
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 1000, (b, past), generator=g)
    ids = torch.randint(0, 1000, (b, 1), generator=g)
    pos = torch.full((b, 1), past)
    size = past + 8
    plan = {
        REF: (ref, original, transformers.StaticCache(config=ref.config, max_cache_len=size)),
        NOT_FUSED: (ours, wrapped, transformers.StaticCache(config=ours.config, max_cache_len=size)),
        FUSED: (ours, wrapped, FusedStaticCache(ours, max_cache_len=size)),
    }
    fwd: dict[str, list[float]] = {FLOOR_FWD: [], REF: [], NOT_FUSED: [], FUSED: []}
    rope: dict[str, list[float]] = {FLOOR_WRITE: [], REF: [], NOT_FUSED: [], FUSED: []}
    with torch.no_grad():
        for model, fn, cache in plan.values():
            modeling.apply_rotary_pos_emb = fn
            model(prompt, past_key_values=cache, use_cache=True)
        modeling.apply_rotary_pos_emb = wrapped
        tables = ref.model.rotary_emb(ref.model.embed_tokens(ids), pos)

        def step(model: Any, cache: Any, clock: _Clock) -> float:
            c = copy.deepcopy(cache)
            c.update = clock.wrap(c.update)
            t0 = time.perf_counter()
            model(ids, position_ids=pos, past_key_values=c, use_cache=True)
            return (time.perf_counter() - t0) * 1e3

        for r in range(rounds + 1):  # round 0 warms up and is dropped
            clock = _Clock()
            with _skipped(ref.model, modeling, tables):
                got = {FLOOR_FWD: (step(ref, plan[REF][2], clock), clock.total * 1e3)}
            for key, (model, fn, cache) in plan.items():
                clock = _Clock()
                with _installed(model.model, modeling, fn, clock):
                    got[key] = (step(model, cache, clock), clock.total * 1e3)
            if r:
                for key, (tf, tr) in got.items():
                    fwd[key].append(tf)
                    rope[FLOOR_WRITE if key == FLOOR_FWD else key].append(tr)
    return name, fwd, rope
