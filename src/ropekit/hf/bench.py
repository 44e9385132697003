# SPDX-License-Identifier: MIT
"""Forward time of a patched transformers Llama against the unpatched one, measured in the same run.

``python -m ropekit.hf.bench [--threads N]`` builds a small random Llama (4 layers, hidden 512, 8 heads of 64,
vocab 1000) and times, alternating the two models repetition by repetition, a prefill (batch 2 x 256 tokens) and a
decode step (batch 2, one token after a 256-token cache). Prints medians and the patched/unpatched ratio. Needs
transformers. Timings on a shared machine are noisy: read the ratio, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
import warnings
from collections.abc import Callable

import torch

__all__ = ["main", "measure"]


def _time(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(reps: int = 15, seq: int = 256, batch: int = 2) -> dict[str, tuple[float, float, float]]:
    """{case: (unpatched median s, patched median s, median of per-repetition ratios patched/unpatched)}."""
    import transformers

    import ropekit.hf

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.LlamaConfig(
            vocab_size=1000,
            hidden_size=512,
            intermediate_size=1024,
            num_hidden_layers=4,
            num_attention_heads=8,
            num_key_value_heads=8,
            max_position_embeddings=4096,
        )
        ref = transformers.LlamaForCausalLM(cfg).eval()  # type: ignore[no-untyped-call]
        ours = ropekit.hf.patch(copy.deepcopy(ref))
    ids = torch.randint(0, 1000, (batch, seq))
    nxt = torch.randint(0, 1000, (batch, 1))
    out: dict[str, tuple[float, float, float]] = {}
    with torch.no_grad():
        caches = {id(m): m(ids, use_cache=True).past_key_values for m in (ref, ours)}

        def prefill(m: torch.nn.Module) -> Callable[[], object]:
            return lambda: m(ids)

        def decode(m: torch.nn.Module) -> Callable[[], object]:
            def step() -> object:
                cache = copy.deepcopy(caches[id(m)])
                return m(nxt, past_key_values=cache, position_ids=torch.full((batch, 1), seq))

            return step

        for name, make in (("prefill", prefill), ("decode", decode)):
            a_fn, b_fn = make(ref), make(ours)
            a_fn(), b_fn()  # warm-up (kernel build, caches)
            ta, tb = [], []
            for _ in range(reps):
                ta.append(_time(a_fn))
                tb.append(_time(b_fn))
            ratio = statistics.median(b / a for a, b in zip(ta, tb))
            out[name] = (statistics.median(ta), statistics.median(tb), ratio)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--reps", type=int, default=15)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    for name, (a, b, r) in measure(args.reps).items():
        print(f"{name:8s} unpatched {a * 1e3:8.2f} ms  patched {b * 1e3:8.2f} ms  ratio {r:.3f}")


if __name__ == "__main__":
    main()
