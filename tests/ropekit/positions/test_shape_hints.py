"""Shape errors that name the fix: positions given [s, b] (``positions.T``) and q in bhsd passed with
format='bshd' (and the reverse), for apply_rope, Rotary and apply_rope_axes; no hint where the shapes do not single
out one fix. Oracle: the shapes themselves (the suggested call is then accepted)."""

from __future__ import annotations

import pytest
import torch

from ropekit import RopeSpec, Rotary, apply_rope
from ropekit.axis_tables import apply_rope_axes
from ropekit.presets_vl import rope_vit_axial_spec

SPEC = RopeSpec(head_dim=8)


def test_transposed_positions_suggest_positions_t() -> None:
    q = torch.randn(2, 5, 3, 8)
    pos = torch.arange(5).repeat(2, 1)  # [b, s]
    with pytest.raises(ValueError, match=r"positions look transposed.*pass positions\.T\)") as e:
        apply_rope(q, None, pos.T, SPEC)
    assert "format=" not in str(e.value)
    apply_rope(q, None, pos.T.T, SPEC)  # the suggested fix is accepted
    with pytest.raises(ValueError, match=r"pass positions\.T\)"):
        Rotary(SPEC)(q, None, positions=pos.T)


@pytest.mark.parametrize("given", ["bshd", "bhsd"])
def test_q_in_the_other_format_suggests_it(given: str) -> None:
    other = "bhsd" if given == "bshd" else "bshd"
    q = torch.randn(2, 5, 3, 8) if other == "bshd" else torch.randn(2, 3, 5, 8)  # q truly in `other`
    k = torch.randn(2, 5, 1, 8) if other == "bshd" else torch.randn(2, 1, 5, 8)  # GQA: one kv head
    pos = torch.arange(5)
    with pytest.raises(ValueError, match=rf"positions must have shape.*pass format='{other}'\)"):
        apply_rope(q, None, pos, SPEC, format=given)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=rf"k must match q.*pass format='{other}'\)"):
        apply_rope(q, k, pos, SPEC, format=given)  # type: ignore[arg-type]
    apply_rope(q, k, pos, SPEC, format=other)  # type: ignore[arg-type]


def test_multi_axis_positions_hints() -> None:
    spec = rope_vit_axial_spec(8)
    q = torch.randn(2, 5, 3, 8)
    pos = torch.randint(0, 4, (2, 2, 5))  # [A, b, s]
    with pytest.raises(ValueError, match=r"pass positions\.transpose\(1, 2\)\)"):
        apply_rope_axes(q, None, pos.transpose(1, 2), spec)
    with pytest.raises(ValueError, match=r"pass format='bhsd'\)"):
        apply_rope_axes(q.transpose(1, 2), None, pos, spec)


def test_no_hint_when_the_shapes_do_not_single_out_a_fix() -> None:
    q = torch.randn(2, 5, 3, 8)
    for bad in (torch.arange(7), torch.zeros(3, 7, dtype=torch.int64)):
        with pytest.raises(ValueError, match=r"positions must have shape") as e:
            apply_rope(q, None, bad, SPEC)
        assert "pass" not in str(e.value)
