"""``lenient_reading()``: every read in the block is ``strict=False`` (the CLI's ``--lenient``), scoped to the block;
a strict refusal of what ``strict=False`` accepts is a ``StrictRefusal`` (a ValueError) the CLI can name the flag
for. Oracle: the same config read with an explicit ``strict=False``."""

from __future__ import annotations

import warnings

import pytest

from ropekit import RopeSpec
from ropekit.hf.config import StrictRefusal, lenient_reading

CFG = {
    "model_type": "llama",
    "head_dim": 64,
    "max_position_embeddings": 8192,
    "rope_parameters": {
        "rope_type": "llama3",
        "rope_theta": 5e5,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}


def test_strict_refusal_is_a_value_error_naming_the_keys() -> None:
    with pytest.raises(StrictRefusal, match="original_max_position_embeddings=8192 must be < max_position"):
        RopeSpec.from_hf(CFG)
    assert issubclass(StrictRefusal, ValueError)


def test_reads_in_the_block_are_lenient_and_warn() -> None:
    with pytest.warns(UserWarning, match="strict=False"):
        want = RopeSpec.from_hf(CFG, strict=False)
    with lenient_reading(), pytest.warns(UserWarning, match="must be < max_position_embeddings=8192"):
        got = RopeSpec.from_hf(CFG)  # no strict= (as the CLI's layer views call it)
    assert got == want
    with pytest.raises(StrictRefusal):  # the block ended: strict again
        RopeSpec.from_hf(CFG)


def test_what_strict_false_refuses_stays_refused_in_the_block() -> None:
    bad = {**CFG, "rope_parameters": {**CFG["rope_parameters"], "factor": 0}}  # type: ignore[dict-item]
    with lenient_reading(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="factor=0 cannot be computed") as e:
            RopeSpec.from_hf(bad)
    assert not isinstance(e.value, StrictRefusal)
