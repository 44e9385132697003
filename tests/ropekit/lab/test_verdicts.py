"""The verdict logic on synthetic numbers: thresholds, comparisons and orderings judged on the seeds' spread."""

from __future__ import annotations

import pytest

from ropekit.lab.verdicts import above, below, greater, ordering, summary, untestable


def test_threshold_verdicts_rest_on_every_seed() -> None:
    assert above("c", "ratio", [1.5, 1.3, 1.4], 1.2).status == "reproduced"
    assert above("c", "ratio", [1.1, 1.0, 1.2], 1.2).status == "not reproduced"  # 1.2 is not above 1.2
    v = above("c", "ratio", [1.1, 1.3, 1.5], 1.2)
    assert v.status == "inconclusive" and "straddle" in v.reason
    assert below("c", "ratio", [1.01, 1.05, 1.09], 1.1).status == "reproduced"
    assert below("c", "ratio", [1.2, 1.1, 1.3], 1.1).status == "not reproduced"
    assert below("c", "ratio", [1.0, 1.2, 1.05], 1.1).status == "inconclusive"


def test_too_few_seeds_is_inconclusive_but_says_what_was_measured() -> None:
    v = above("learned breaks", "ppl(2x)/ppl(1x) of learned", [3.41], 1.2)
    assert v.status == "inconclusive" and "1 seed" in v.reason and "above" in v.reason
    assert "3.41 (1 seed)" in v.evidence and "ppl(2x)/ppl(1x) of learned" in v.line()
    assert above("c", "q", [3.0, 4.0], 1.2, min_seeds=2).status == "reproduced"


def test_comparisons_need_separated_spreads() -> None:
    assert greater("c", "q", ("a", [3.0, 3.2, 3.1]), ("b", [2.0, 2.9, 2.5])).status == "reproduced"
    assert greater("c", "q", ("a", [1.0, 1.2, 1.1]), ("b", [2.0, 2.9, 2.5])).status == "not reproduced"
    v = greater("c", "q", ("a", [3.0, 2.0, 3.1]), ("b", [2.0, 2.9, 2.5]))
    assert v.status == "inconclusive" and "overlap" in v.reason
    assert "a 2.7 [2..3.1] (3 seeds)" in v.evidence


def test_ordering_is_judged_pair_by_pair() -> None:
    ranked = [("alibi", [1.0, 1.01, 1.02]), ("t5", [1.1, 1.12, 1.15]), ("rope", [2.0, 2.5, 3.0])]
    assert ordering("c", "ratio", ranked).status == "reproduced"
    swapped = [ranked[1], ranked[0], ranked[2]]
    v = ordering("c", "ratio", swapped)
    assert v.status == "not reproduced" and "opposite" in v.reason
    close = [("alibi", [1.0, 1.2, 1.02]), ("t5", [1.1, 1.12, 1.15]), ("rope", [2.0, 2.5, 3.0])]
    v = ordering("c", "ratio", close)
    assert v.status == "inconclusive" and "alibi < t5 < rope" in v.reason
    with pytest.raises(ValueError, match="at least 2"):
        ordering("c", "ratio", ranked[:1])


def test_summary_and_empty_values() -> None:
    assert summary([2.0, 4.0, 3.0]) == "3 [2..4] (3 seeds)"
    with pytest.raises(ValueError, match="one number per seed"):
        above("c", "q", [], 1.0)


def test_untestable_is_inconclusive_and_keeps_the_evidence() -> None:
    v = untestable("c", "heads per seed: [1, 0, 2]", "seed 1 found no head")
    assert v.status == "inconclusive" and "[1, 0, 2]" in v.line() and "seed 1 found no head" in v.line()
    with pytest.raises(ValueError, match="evidence and the reason"):
        untestable("c", "", "r")
