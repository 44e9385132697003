# SPDX-License-Identifier: MIT
"""Honest verdicts on the seeds' claims: each claim is judged by the quantity it is about, seed by seed, and the
verdict rests on the spread across seeds (min..max), not on one number.

- ``reproduced``: every seed is on the claim's side (for a comparison, the two spreads do not overlap and are in
  the claimed order);
- ``not reproduced``: every seed is on the other side (spreads apart in the opposite order);
- ``inconclusive``: the spread straddles the threshold or the spreads overlap -- or fewer than ``min_seeds``
  seeds were run (default 3), in which case the text still gives what the seeds measured.

Each :class:`Verdict` names the number it rests on (e.g. "ppl(2x)/ppl(1x) of learned: 3.41 [3.12..3.80]").
Shapes: every value list is one number per seed.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MIN_SEEDS", "Verdict", "above", "below", "greater", "ordering", "summary", "untestable"]

MIN_SEEDS = 3
REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"


@dataclass(frozen=True)
class Verdict:
    claim: str
    status: str  # "reproduced" | "not reproduced" | "inconclusive"
    evidence: str  # the quantity and its numbers
    reason: str

    def line(self) -> str:
        return f"{self.claim}: **{self.status}** -- {self.evidence}; {self.reason}"


def summary(values: Sequence[float]) -> str:
    """ "mean [min..max] (n seeds)" with 3 significant digits."""
    _check(values, "values")
    m = statistics.fmean(values)
    if len(values) == 1:
        return f"{m:.3g} (1 seed)"
    return f"{m:.3g} [{min(values):.3g}..{max(values):.3g}] ({len(values)} seeds)"


def _check(values: Sequence[float], name: str) -> None:
    if len(values) == 0:
        raise ValueError(f"{name} must hold one number per seed, got none")


def _few(n: int, min_seeds: int) -> str | None:
    return None if n >= min_seeds else f"only {n} seed(s); a verdict needs >= {min_seeds}"


def above(
    claim: str, quantity: str, values: Sequence[float], threshold: float, *, min_seeds: int = MIN_SEEDS
) -> Verdict:
    """Claim: ``quantity`` > ``threshold`` (every seed)."""
    _check(values, quantity)
    ev = f"{quantity}: {summary(values)} vs threshold {threshold:g}"
    few = _few(len(values), min_seeds)
    if few:
        side = "above" if statistics.fmean(values) > threshold else "not above"
        return Verdict(claim, INCONCLUSIVE, ev, f"{few} (the mean is {side} the threshold)")
    if min(values) > threshold:
        return Verdict(claim, REPRODUCED, ev, "every seed is above the threshold")
    if max(values) <= threshold:
        return Verdict(claim, NOT_REPRODUCED, ev, "no seed is above the threshold")
    return Verdict(claim, INCONCLUSIVE, ev, "the seeds straddle the threshold")


def below(
    claim: str, quantity: str, values: Sequence[float], threshold: float, *, min_seeds: int = MIN_SEEDS
) -> Verdict:
    """Claim: ``quantity`` < ``threshold`` (every seed)."""
    _check(values, quantity)
    ev = f"{quantity}: {summary(values)} vs threshold {threshold:g}"
    few = _few(len(values), min_seeds)
    if few:
        side = "below" if statistics.fmean(values) < threshold else "not below"
        return Verdict(claim, INCONCLUSIVE, ev, f"{few} (the mean is {side} the threshold)")
    if max(values) < threshold:
        return Verdict(claim, REPRODUCED, ev, "every seed is below the threshold")
    if min(values) >= threshold:
        return Verdict(claim, NOT_REPRODUCED, ev, "no seed is below the threshold")
    return Verdict(claim, INCONCLUSIVE, ev, "the seeds straddle the threshold")


def greater(
    claim: str,
    quantity: str,
    a: tuple[str, Sequence[float]],
    b: tuple[str, Sequence[float]],
    *,
    min_seeds: int = MIN_SEEDS,
) -> Verdict:
    """Claim: ``quantity`` of a[0] > that of b[0], judged on the spreads (min..max over seeds)."""
    (na, va), (nb, vb) = a, b
    _check(va, f"{quantity} of {na}")
    _check(vb, f"{quantity} of {nb}")
    ev = f"{quantity}: {na} {summary(va)} vs {nb} {summary(vb)}"
    few = _few(min(len(va), len(vb)), min_seeds)
    if few:
        side = "greater" if statistics.fmean(va) > statistics.fmean(vb) else "not greater"
        return Verdict(claim, INCONCLUSIVE, ev, f"{few} (the mean of {na} is {side})")
    if min(va) > max(vb):
        return Verdict(claim, REPRODUCED, ev, "the spreads are apart, in the claimed order")
    if max(va) < min(vb):
        return Verdict(claim, NOT_REPRODUCED, ev, "the spreads are apart, in the opposite order")
    return Verdict(claim, INCONCLUSIVE, ev, "the spreads overlap")


def ordering(
    claim: str, quantity: str, ranked: Sequence[tuple[str, Sequence[float]]], *, min_seeds: int = MIN_SEEDS
) -> Verdict:
    """Claim: ``quantity`` increases along ``ranked`` (first is smallest); each neighbouring pair is judged as in
    :func:`greater`: all apart in order -> reproduced, any pair apart in the opposite order -> not reproduced."""
    if len(ranked) < 2:
        raise ValueError(f"ranked must name at least 2 entries, got {len(ranked)}")
    pairs = [greater("", quantity, hi, lo, min_seeds=min_seeds) for lo, hi in itertools.pairwise(ranked)]
    ev = f"{quantity}: " + ", ".join(f"{n} {summary(v)}" for n, v in ranked)
    names = " < ".join(n for n, _ in ranked)
    measured = " < ".join(n for n, _ in sorted(ranked, key=lambda nv: statistics.fmean(nv[1])))
    n = min(len(v) for _, v in ranked)
    few = _few(n, min_seeds)
    if few:
        return Verdict(claim, INCONCLUSIVE, ev, f"{few} (means ordered {measured})")
    if any(p.status == NOT_REPRODUCED for p in pairs):
        return Verdict(
            claim, NOT_REPRODUCED, ev, f"a neighbouring pair of {names} is apart in the opposite order"
        )
    if all(p.status == REPRODUCED for p in pairs):
        return Verdict(claim, REPRODUCED, ev, "every neighbouring pair is apart, in the claimed order")
    return Verdict(claim, INCONCLUSIVE, ev, f"some neighbouring spreads overlap (means ordered {measured})")


def untestable(claim: str, evidence: str, reason: str) -> Verdict:
    """An inconclusive verdict for a claim this run cannot test (e.g. no seed found a positional head, or the
    quantity is undefined); ``evidence`` still names what was measured."""
    if not evidence or not reason:
        raise ValueError(f"untestable needs the evidence and the reason, got {evidence!r} and {reason!r}")
    return Verdict(claim, INCONCLUSIVE, evidence, reason)
