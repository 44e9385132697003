"""The phase clock (CPU and wall seconds per phase) and the one-pass plain evaluation the extrapolation experiment
uses (equal to perplexity and per_position_loss computed separately)."""

from __future__ import annotations

import math
import time

import pytest
import torch

from ropekit.lab.evaluate import chunk_losses, per_position_loss, perplexity
from ropekit.lab.model import LMConfig, TinyLM
from ropekit.lab.phases import PhaseClock


def test_phases_accumulate_cpu_and_wall() -> None:
    clock = PhaseClock()
    assert clock.startup_cpu > 0  # the interpreter and imports before the clock started
    with clock.phase("busy"):
        t0 = time.thread_time()  # this thread only: the wall clock then passes at least as much
        while time.thread_time() - t0 < 0.05:
            pass
    with clock.phase("sleep"):
        time.sleep(0.5)
    with clock.phase("busy"):
        t0 = time.thread_time()  # this thread only: the wall clock then passes at least as much
        while time.thread_time() - t0 < 0.05:
            pass
    assert clock.cpu["busy"] >= 0.1 and clock.wall["busy"] >= 0.1
    # process CPU time counts every thread: other threads of the test process (torch's pool after earlier
    # tests) may still spin briefly, so the bound is half the sleep, not zero
    assert clock.wall["sleep"] >= 0.5 and clock.cpu["sleep"] < 0.25
    d = clock.as_dict()
    assert list(d) == ["startup", "busy", "sleep"] and d["startup"]["wall_s"] is None
    assert clock.total_cpu() == pytest.approx(clock.startup_cpu + clock.cpu["busy"] + clock.cpu["sleep"])
    with pytest.raises(ValueError, match="phase name"), clock.phase(""):
        pass


def test_chunk_losses_give_plain_perplexity_and_per_position_loss() -> None:
    torch.manual_seed(0)
    model = TinyLM(LMConfig(encoding="rope", max_positions=16, n_layers=1))
    data = torch.randint(0, 256, (2000,), dtype=torch.uint8)
    losses = chunk_losses(model, data, 64, max_tokens=640)
    assert losses.shape == (10, 64)
    assert math.exp(float(losses.mean())) == perplexity(model, data, 64, max_tokens=640)
    assert losses.mean(0).tolist() == per_position_loss(model, data, 64, max_tokens=640)
