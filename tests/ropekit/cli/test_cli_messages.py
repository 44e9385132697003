"""CLI wording found confusing by a user trial (T2): a base above the printed lower bound that fails the condition,
and a SOURCE that is a misspelt preset or a missing file.

Oracle for the bound: the condition B(m) = sum_i cos(m theta_i) >= 0 for every m below the context, scanned here in
float64 (Men et al. 2024), independent of ropekit.analysis.
"""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

import torch

from ropekit.cli.main import main


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _first_violation(base: float, d: int, context: int) -> int | None:
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    m = torch.arange(context, dtype=torch.float64)[:, None]
    b = torch.cos(m * theta).sum(-1)
    bad = (b < 0).nonzero()
    return int(bad[0]) if len(bad) else None


def test_a_base_above_the_bound_that_fails_says_the_condition_is_not_monotone() -> None:
    first = _first_violation(1e6, 128, 32768)
    assert first == 27115 and _first_violation(6.3e5, 128, 32768) is None  # 6.3e5 passes, 1e6 above it fails
    rc, out, _ = _run(["inspect", "--head-dim", "128", "--base", "1000000", "--context", "32768"])
    line = next(x for x in out.splitlines() if "base lower bound" in x)
    assert rc == 0 and f"base 1e+06 fails it (B(m) < 0 first at m = {first:,})" in line
    assert "not monotone in the base" in line
    rc, out, _ = _run(["inspect", "--head-dim", "8", "--base", "10000", "--context", "4096"])
    assert "not monotone" not in out  # below the bound: plainly too small


def test_a_misspelt_preset_or_missing_file_is_named() -> None:
    rc, _, err = _run(["inspect", "llama-3.1-8B"])
    assert rc == 2 and "no such file or folder, and not a preset (did you mean 'llama-3.1-8b'?)" in err
    rc, _, err = _run(["inspect", "nope.json"])
    assert rc == 2 and "'nope.json': no such file or folder, and not a preset;" in err
