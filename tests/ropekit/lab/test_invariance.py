"""Seed 004's counter-examples measured: the dense rotation's shift error and the single frequency's aliasing."""

from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stdout
from pathlib import Path

import torch

from ropekit.cli.main import main
from ropekit.lab.encodings import DenseRotation, RoPE, SingleFrequency
from ropekit.lab.experiments.invariance import ENCODINGS, confusability, shift_error


def test_shift_error_separates_relative_from_absolute_rotations() -> None:
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(32, 16, generator=g), torch.randn(32, 16, generator=g)
    assert shift_error(RoPE(64, 4, 16), q, k) < 1e-5
    assert shift_error(DenseRotation(64, 4, 16, generators=1), q, k) < 1e-5
    assert shift_error(DenseRotation(64, 4, 16), q, k) > 1e-1


def test_single_frequency_confuses_distances_one_period_apart() -> None:
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(32, 16, generator=g), torch.randn(32, 16, generator=g)
    gap, d1, d2 = confusability(SingleFrequency(64, 4, 16, theta=2 * math.pi / 50), q, k, 200)
    assert gap < 1e-4 and abs(d1 - d2) % 50 == 0  # the period: D and D + 50 give the same logits
    rope_gap, _, _ = confusability(RoPE(64, 4, 16), q, k, 200)
    assert rope_gap > 0.1


def test_invariance_command(tmp_path: Path) -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["lab", "invariance", "--out", str(tmp_path), "--quick", "--seeds", "3", "--json"]) == 0
    rep = json.loads(out.getvalue())
    assert {r["encoding"] for r in rep["results"]} == set(ENCODINGS) and len(rep["results"]) == 3 * len(
        ENCODINGS
    )
    md = (tmp_path / "invariance.md").read_text()
    assert "sec. 8.3): **reproduced**" in md and "sec. 8.2): **reproduced**" in md
    assert main(["lab", "invariance", "--out", str(tmp_path), "--steps", "5"]) == 2  # refused, not ignored
