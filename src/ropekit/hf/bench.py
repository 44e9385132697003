# SPDX-License-Identifier: MIT
"""Forward time of patched transformers models against the unpatched ones, and the time spent in RoPE inside them.

``ropekit bench --mode hf`` (or ``python -m ropekit.hf.bench``) builds two small random models of the same size
(4 layers, hidden 512, 8 query heads and 2 kv heads of 64, float32): a Llama (1-D RoPE, vocab 1000) and the text
decoder of a Qwen2-VL (M-RoPE, ``mrope_section`` [8, 12, 12]; its inputs are embeddings and [3, b, s] position ids
in which an image grid of side ~sqrt(tokens / 2) follows a few text tokens: temporal id constant, height and width
ids running, as Qwen2-VL's ``get_rope_index`` lays them out). For each it times, round by round in the same
process:

* a prefill (1 x 2048 tokens; 1 x 256 with ``quick``) and a decode step (32 sequences x 1 token after a
  256-token cache; 8 x 1 after 64 with ``quick``), each forward timed alone (the cache is copied outside the
  timer);
* for each, the **time in RoPE**: the rotary module's forward (tables) plus every call of the modeling file's
  ``apply_rotary_pos_emb`` (rotation), summed over the forward by a timer around both, installed identically on
  both models;
* (Llama) a decode step with a static KV cache, RoPE fused with the cache write or not
  (:mod:`ropekit.hf.bench_fused`);
* a Qwen2-VL vision tower encoding one image (:mod:`ropekit.hf.bench_vision`);
* the unpatched model runs with transformers' own apply function (the patch's wrapper is taken out of the
  modeling module while it runs), so it pays nothing for ropekit being imported.

Floors (as every ``ropekit bench`` mode reports ratios to a floor measured in the same run): for the time in
RoPE, ``copy_`` of every layer's q and k into preallocated tensors (the bytes a rotation must at least move); for
the forward, the unpatched forward with RoPE skipped (the rotary module returns stored tables, the apply function
returns q and k unchanged), i.e. what the forward would cost if RoPE were free.

Shapes: q [b, 8, s, 64], k [b, 2, s, 64] per layer (bhsd, as transformers' attention has them); Qwen2-VL
position ids [3, b, s] (temporal, height, width).
Timings on a shared machine are noisy: read the ratios within one run, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import copy
import math
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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
    """(unpatched Llama, patched copy, modeling module)."""
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


def _vl_models() -> tuple[Any, Any, Any]:
    """(unpatched Qwen2-VL, patched copy, modeling module); the vision tower is minimal (not timed)."""
    import transformers
    from transformers.models.qwen2_vl import modeling_qwen2_vl

    import ropekit.hf

    torch.manual_seed(0)
    section = [_HD // 8, 3 * _HD // 16, 3 * _HD // 16]  # [8, 12, 12]: Qwen2-VL's split of 32 bands
    text = {
        "vocab_size": 1000, "hidden_size": _HIDDEN, "intermediate_size": 2 * _HIDDEN,
        "num_hidden_layers": _LAYERS, "num_attention_heads": _HEADS, "num_key_value_heads": _KV,
        "max_position_embeddings": 8192, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": section},
    }  # fmt: skip
    vision = {"depth": 1, "embed_dim": 32, "hidden_size": _HIDDEN, "num_heads": 2, "mlp_ratio": 2}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.Qwen2VLConfig(text_config=text, vision_config=vision)
        ref = transformers.Qwen2VLForConditionalGeneration(cfg).eval()  # type: ignore[no-untyped-call]
        ours = ropekit.hf.patch(copy.deepcopy(ref))
    return ref, ours, modeling_qwen2_vl


def _image(n: int) -> tuple[int, int]:
    """(text tokens before the image, image side) in a Qwen2-VL sequence of n tokens."""
    return min(64, n // 8), math.isqrt(n // 2)


def _mrope_positions(b: int, s: int, past: int) -> torch.Tensor:
    """[3, b, s] ids of tokens past .. past + s - 1 of a sequence holding one image (see the module docstring)."""
    n = past + s
    prefix, side = _image(n)
    rows = [(i, i, i) for i in range(prefix)]
    rows += [(prefix, prefix + h, prefix + w) for h in range(side) for w in range(side)]
    nxt = prefix + side
    rows += [(p, p, p) for p in range(nxt, nxt + n - len(rows))]
    return torch.tensor(rows[past:n]).T[:, None, :].expand(3, b, s)


@dataclass(frozen=True)
class _Family:
    """What the timing loop needs of one model family."""

    name: str
    build: Callable[[], tuple[Any, Any, Any]]  # (unpatched, patched, modeling module)
    decoder: Callable[[Any], Any]  # model -> the module that holds rotary_emb
    inputs: Callable[[int, int, torch.Generator], torch.Tensor]  # (b, s, g) -> token ids or embeddings
    positions: Callable[[int, int, int], torch.Tensor]  # (b, s, past) -> position ids
    call: Callable[..., Any]  # (model, inputs, position ids, **kwargs) -> output
    detail: Callable[[int], str] = lambda n: ""  # sequence length -> what the case name adds


FAMILIES = (
    _Family(
        "llama",
        _models,
        lambda m: m.model,
        lambda b, s, g: torch.randint(0, 1000, (b, s), generator=g),
        lambda b, s, past: torch.arange(past, past + s).expand(b, s),
        lambda m, x, pos, **kw: m(x, position_ids=pos, **kw),
    ),
    _Family(
        "qwen2-vl",
        _vl_models,
        lambda m: m.model.language_model,
        lambda b, s, g: torch.randn(b, s, _HIDDEN, generator=g),
        _mrope_positions,
        lambda m, x, pos, **kw: m.model.language_model(inputs_embeds=x, position_ids=pos, **kw),
        lambda n: f" (image {_image(n)[1]}x{_image(n)[1]})",
    ),
)


@contextmanager
def _installed(
    decoder: Any,
    modeling: Any,
    apply_fn: Callable[..., Any],
    clock: _Clock,
    names: tuple[str, str] = ("rotary_emb", "apply_rotary_pos_emb"),
) -> Iterator[None]:
    """Run ``decoder`` (the module holding the rotary module ``names[0]``) with ``apply_fn`` as the modeling file's
    apply function ``names[1]``, both RoPE pieces timed by clock."""
    rotary = getattr(decoder, names[0])
    saved = getattr(modeling, names[1])
    setattr(modeling, names[1], clock.wrap(apply_fn))
    rotary.forward = clock.wrap(type(rotary).forward.__get__(rotary))
    try:
        yield
    finally:
        setattr(modeling, names[1], saved)
        del rotary.forward


@contextmanager
def _skipped(
    decoder: Any,
    modeling: Any,
    tables: tuple[torch.Tensor, torch.Tensor],
    names: tuple[str, str] = ("rotary_emb", "apply_rotary_pos_emb"),
) -> Iterator[None]:
    """Run ``decoder`` with RoPE free: stored tables, and an apply function that returns q and k unchanged."""
    rotary = getattr(decoder, names[0])
    saved = getattr(modeling, names[1])
    setattr(modeling, names[1], lambda q, k, *a, **kw: (q, k))
    rotary.forward = lambda *a, **kw: tables
    try:
        yield
    finally:
        setattr(modeling, names[1], saved)
        del rotary.forward


def _cases(quick: bool) -> list[tuple[str, int, int, int]]:
    """(name, batch, new tokens, cached tokens)."""
    if quick:
        return [("prefill 1x256", 1, 256, 0), ("decode 8x1 after 64", 8, 1, 64)]
    return [("prefill 1x2048", 1, 2048, 0), ("decode 32x1 after 256", 32, 1, 256)]


def _case(
    fam: _Family,
    models: tuple[Any, Any, Any],
    b: int,
    s: int,
    past: int,
    rounds: int,
    g: torch.Generator,
) -> dict[str, dict[str, list[float]]]:
    """{"forward" | "rope": {impl: [ms per forward, one per round]}} for one shape."""
    ref, ours, modeling = models
    wrapped = modeling.apply_rotary_pos_emb
    original = getattr(wrapped, "_ropekit_original", wrapped)
    x = fam.inputs(b, s, g)
    pos = fam.positions(b, s, past)
    caches: dict[str, Any] = {}
    if past:
        prompt = fam.inputs(b, past, g)
        for key, m, fn in ((UNPATCHED, ref, original), (PATCHED, ours, wrapped)):
            modeling.apply_rotary_pos_emb = fn
            caches[key] = fam.call(m, prompt, fam.positions(b, past, 0), use_cache=True).past_key_values
        caches[FLOOR_FWD] = caches[UNPATCHED]
    modeling.apply_rotary_pos_emb = wrapped
    tables = fam.decoder(ref).rotary_emb(torch.zeros(1), pos)
    q = torch.randn(_LAYERS, b, _HEADS, s, _HD, generator=g)
    k = torch.randn(_LAYERS, b, _KV, s, _HD, generator=g)
    qo, ko = torch.empty_like(q), torch.empty_like(k)

    def forward(m: Any, key: str) -> float:
        kw: dict[str, Any] = {"use_cache": bool(past)}
        if past:
            kw["past_key_values"] = copy.deepcopy(caches[key])
        t0 = time.perf_counter()
        fam.call(m, x, pos, **kw)
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
        with _skipped(fam.decoder(ref), modeling, tables):
            t_skip = forward(ref, FLOOR_FWD)
        t_copy = floor_copy()
        row = {}
        for key, m, fn in ((UNPATCHED, ref, original), (PATCHED, ours, wrapped)):
            clock = _Clock()
            with _installed(fam.decoder(m), modeling, fn, clock):
                row[key] = (forward(m, key), clock.total * 1e3)
        if r:
            _record(fwd, rope, t_skip, t_copy, row)
    return {"forward": fwd, "rope": rope}


def _record(
    fwd: dict[str, list[float]],
    rope: dict[str, list[float]],
    t_skip: float,
    t_copy: float,
    row: dict[str, tuple[float, float]],
) -> None:
    """Append one round: the two floors, and (forward ms, ms in RoPE) of each implementation."""
    fwd[FLOOR_FWD].append(t_skip)
    rope[FLOOR_ROPE].append(t_copy)
    for key, (tf, tr) in row.items():
        fwd[key].append(tf)
        rope[key].append(tr)


def measure(
    *, quick: bool = False, rounds: int = 9, progress: Callable[[str], None] | None = None
) -> dict[str, dict[str, dict[str, list[float]]]]:
    """{"family case": {"forward" | "rope": {impl: [ms per forward, one per round]}}} (module docstring)."""
    g = torch.Generator().manual_seed(0)
    out: dict[str, dict[str, dict[str, list[float]]]] = {}
    with torch.no_grad():
        for fam in FAMILIES:
            models = fam.build()
            for name, b, s, past in _cases(quick):
                if progress:
                    progress(f"hf: {fam.name} {name}")
                out[f"{fam.name} {name}{fam.detail(s + past)}"] = _case(fam, models, b, s, past, rounds, g)
    return out


def run_hf(*, quick: bool, rounds: int, progress: Callable[[str], None] | None) -> list[dict[str, Any]]:
    """Result rows for ``ropekit bench --mode hf`` (see :func:`ropekit.bench.timing.rows`)."""
    from ropekit.bench.timing import rows

    out: list[dict[str, Any]] = []
    for name, parts in measure(quick=quick, rounds=rounds, progress=progress).items():
        out += rows(f"hf {name} fp32: time in RoPE", "hf", parts["rope"], [FLOOR_ROPE])
        out += rows(f"hf {name} fp32: forward", "hf", parts["forward"], [FLOOR_FWD])
    from ropekit.hf.bench_vision import measure_vision

    name, fwd, rope = measure_vision(quick=quick, rounds=rounds, progress=progress)
    out += rows(f"hf {name} fp32: time in RoPE", "hf", rope, [FLOOR_ROPE])
    out += rows(f"hf {name} fp32: forward", "hf", fwd, [FLOOR_FWD])
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
