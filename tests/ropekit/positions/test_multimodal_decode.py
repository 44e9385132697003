"""The decoding continuations moved to ropekit.positions.multimodal_decode stay importable, unchanged, from
ropekit.positions.multimodal (their documented home: docs, the API reference and user code import them there)."""

from __future__ import annotations

import torch

import ropekit.positions.multimodal as mm
import ropekit.positions.multimodal_decode as md


def test_moved_names_are_the_same_objects_from_the_old_module() -> None:
    for name in md.__all__:
        assert getattr(mm, name) is getattr(md, name)
        assert name in mm.__all__  # still documented under ropekit.positions.multimodal (docs/api.md)


def test_decode_ids_from_the_old_path() -> None:
    """past_length + arange(seq_len) + delta on all three rows (written from the formula)."""
    ids = mm.mrope_decode_positions(torch.tensor([[-3], [5]]), 10, 2)
    assert ids.tolist() == [[[7, 8], [15, 16]]] * 3
    prefill = torch.tensor([[[0, 1, 4]], [[0, 2, 3]], [[0, 1, 9]]])  # [3, 1, 3]: last ids 4, 3, 9
    assert mm.mrope_generate_positions(prefill, generated=1, seq_len=2).tolist() == [
        [[6, 7]],
        [[5, 6]],
        [[11, 12]],
    ]
