"""The frequencies experiment's verdicts on hand-made numbers: the band-norm ratio, the positional heads' bands and
the p-RoPE losses (paired by seed), each judged on every seed with the spread named."""

from __future__ import annotations

from typing import Any

import pytest

from ropekit.lab.experiments import frequencies

BANDS, LAYERS = 15, 2  # thirds of 5 bands: 0..4 fastest, 10..14 slowest


def _norms(low: float, high: float) -> list[list[float]]:
    """[layer][band]: ``high`` on the fastest third, ``low`` on the slowest, 1 in between."""
    row = [high] * 5 + [1.0] * 5 + [low] * 5
    return [row[:] for _ in range(LAYERS)]


def _heads(top: list[int]) -> list[dict[str, Any]]:
    return [
        {"layer": 0, "head": i, "kind": "previous-token", "score": 0.7, "top_bands": [t, 0, 1]}
        for i, t in enumerate(top)
    ]


def _result(
    ratios: list[float], tops: list[list[int]], losses: dict[float, list[float]], legacy: bool = False
) -> dict[str, Any]:
    per_seed = [
        {"seed": s, "band_norms": {"q": _norms(r, 1.0), "k": _norms(1.0, 1.0)}, "positional_heads": _heads(t)}
        for s, (r, t) in enumerate(zip(ratios, tops))
    ]
    sweep = [
        {"p": p, "seed": s, "loss_1x": v, "loss_2x": v + 0.1}
        for p, vs in losses.items()
        for s, v in enumerate(vs)
    ]
    res: dict[str, Any] = {
        "p_sweep": sweep,
        **{k: per_seed[0][k] for k in ("band_norms", "positional_heads")},
    }
    if not legacy:
        res["per_seed"] = per_seed
    return res


# Barbero's ordering on every seed: NoPE worst, 0.75 < 1.0 < 0.25 (paired by seed)
LOSSES = {
    1.0: [1.40, 1.50, 1.45],
    0.75: [1.39, 1.49, 1.44],
    0.5: [1.41, 1.52, 1.46],
    0.25: [1.45, 1.55, 1.50],
    0.0: [1.9, 2.0, 1.95],
}


def _by_claim(res: dict[str, Any]) -> dict[str, Any]:
    return {v.claim.split(" (")[0]: v for v in frequencies.claims(res)}


def test_every_claim_reproduced_names_its_number_and_spread() -> None:
    v = _by_claim(_result([2.0, 3.0, 2.5], [[0, 1], [2], [4, 0, 9]], LOSSES))
    assert {x.status for x in v.values()} == {"reproduced"}
    assert (
        "2.5 [2..3] (3 seeds) vs threshold 1" in v["low-frequency bands carry the largest q norms"].evidence
    )
    heads = v["positional heads rely on the highest-frequency bands"]
    assert "0.889 [0.667..1] (3 seeds)" in heads.evidence and "heads found [2, 1, 3]" in heads.evidence
    # 0.75 vs 1.0: 0.01 lower on every seed, paired -- reproduced although the seeds' losses overlap
    assert "0.01 [0.01..0.01]" in v["0.75-RoPE beats RoPE"].evidence
    assert "0.51 [0.51..0.51]" in v["NoPE has the highest loss"].evidence  # NoPE - 0.75 (the lowest)


def test_opposite_and_straddling_numbers() -> None:
    flipped = {**LOSSES, 0.75: [1.41, 1.51, 1.46]}  # 0.75 worse than RoPE on every seed
    v = _by_claim(_result([0.5, 0.4, 0.6], [[10], [12, 11], [14]], flipped))
    assert v["low-frequency bands carry the largest q norms"].status == "not reproduced"
    assert v["positional heads rely on the highest-frequency bands"].status == "not reproduced"
    assert v["0.75-RoPE beats RoPE"].status == "not reproduced"
    mixed = {**LOSSES, 0.75: [1.39, 1.51, 1.44]}
    v = _by_claim(_result([0.9, 1.2, 1.5], [[0], [12], [0]], mixed))
    assert v["low-frequency bands carry the largest q norms"].status == "inconclusive"
    assert (
        v["0.75-RoPE beats RoPE"].status == "inconclusive" and "straddle" in v["0.75-RoPE beats RoPE"].reason
    )


def test_a_seed_without_positional_heads_is_untestable_not_a_failure() -> None:
    v = _by_claim(_result([2.0, 3.0, 2.5], [[0], [], [1]], LOSSES))
    heads = v["positional heads rely on the highest-frequency bands"]
    assert (
        heads.status == "inconclusive"
        and "[1, 0, 1]" in heads.evidence
        and "no positional head" in heads.reason
    )


def test_results_from_before_per_seed_are_judged_on_seed_0_only() -> None:
    v = _by_claim(_result([2.0, 3.0, 2.5], [[0], [1], [2]], LOSSES, legacy=True))
    norms = v["low-frequency bands carry the largest q norms"]
    assert norms.status == "inconclusive" and "2 (1 seed)" in norms.evidence
    assert v["0.75-RoPE beats RoPE"].status == "reproduced"  # the sweep has its 3 seeds


def test_norm_ratio_is_lowest_over_highest_third() -> None:
    assert frequencies.norm_ratio(_norms(3.0, 1.5)) == pytest.approx(2.0)
    assert frequencies.norm_ratio([[4.0, 1.0, 1.0, 2.0]]) == pytest.approx(0.5)  # thirds of one band
