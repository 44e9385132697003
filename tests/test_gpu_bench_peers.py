"""bench/gpu_peers.py builds every implementation it times, also where no GPU is (on CPU tensors here).

The GPU run of the twelfth session found the Liger row broken: after the split of bench/gpu.py the builder of the
Liger call had the same name as the module-level import helper it calls, so it called itself (RecursionError) and
the same-rotation check and every Liger timing failed. Nothing had run that code between the split and that GPU run.
Here every builder runs on small CPU tensors: each one either says the peer is unavailable (not installed here) or
rotates q and k like ropekit's PyTorch backend (within one bf16 ulp of the values, which reach |4|).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import gpu_peers


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_every_builder_builds_or_says_unavailable(layout: str) -> None:
    q, k = gpu_peers.qk(1, 8, 4, 2, 128, device="cpu")
    pos = torch.arange(8)[None]
    built = []
    for name, build in gpu_peers.impls(q, k, pos, layout).items():
        if name.startswith(("transformers torch.compile", "ropekit rotate_qk")):
            continue  # a compile and the Triton interpreter: covered by the same-rotation test below
        try:
            call = build()
        except gpu_peers.Unavailable:
            continue
        call()
        built.append(name)
    assert "ropekit apply_rope (positions)" in built and "copy (floor)" in built


def test_same_rotation_check_runs_every_available_peer() -> None:
    q, k = gpu_peers.qk(1, 8, 4, 2, 128, device="cpu")
    diffs = gpu_peers.check_same_rotation(q, k, torch.arange(8)[None])
    ulp = 2.0**-5  # bf16 spacing in [4, 8)
    assert {"ropekit apply_rope (positions)", "ropekit Rotary module", "transformers eager"} <= set(diffs)
    assert all(d <= ulp for d in diffs.values()), diffs
