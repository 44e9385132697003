# SPDX-License-Identifier: MIT
"""M-RoPE ids of tokens generated after a prompt: the two continuations of transformers' ``generate()``.

The prompt's ids and rope deltas come from :func:`ropekit.positions.multimodal.mrope_position_ids` (re-exported,
with the functions here, by :mod:`ropekit.positions.multimodal`, their documented home):

- :func:`mrope_decode_positions`: the original model code (and transformers 4.x ``generate()``): new tokens at
  ``past + delta`` on all three rows, the first one at ``max id + 1``;
- :func:`mrope_generate_positions`: transformers 5.x ``generate()``: each row (axis) continues from the prompt's
  last id + 1. After a multi-frame video or a prompt that ends in an image or video the two differ.

Both refuse ids past int64 (never wrapped). M-RoPE: Wang et al. 2024, "Qwen2-VL", arXiv 2409.12191.

Shapes: b batch (b0 before beam expansion), s new tokens, L prompt length.
"""

from __future__ import annotations

import torch

from ropekit.integers import whole
from ropekit.positions.multimodal_blocks import _I64_MAX, _check_batch, _check_fits, _check_int_tensor

__all__ = ["mrope_decode_positions", "mrope_generate_positions"]


def mrope_decode_positions(
    rope_deltas: torch.Tensor, past_length: int | torch.Tensor, seq_len: int = 1, *, batch: int | None = None
) -> torch.Tensor:
    """Ids of new tokens from the rope deltas: ``past_length + arange(seq_len) + delta`` on all three rows.

    The decode rule of the original model code (transformers 4.x ``generate()``): with v4 deltas and the padded
    cache length, or v5 deltas and each row's real length, the first generated token sits at
    ``max(prefill ids) + 1``. transformers 5.x ``generate()`` continues from the prompt's last ids instead: use
    :func:`mrope_generate_positions` to reproduce it. (Its model forward without ``position_ids``, given a cache
    and no attention mask, is this function with v5 deltas and ``past_length`` the padded cache length.)

    Args:
        rope_deltas: integer [b0, 1] from :func:`mrope_position_ids` (computed once at prefill, a per-sequence
            constant); float deltas are refused, not truncated.
        past_length: tokens before the new ones: an int >= 0, or an integer tensor [b] (not bool) of values >= 0.
        seq_len: number of new tokens.
        batch: expand deltas computed for fewer rows (beams, ``num_return_sequences``); a positive multiple of b0.

    Returns:
        int64 [3, b, seq_len].

    Raises:
        ValueError: naming the argument and value, before anything is computed; also when an id would pass int64
            (``past_length + seq_len - 1 + delta > 2^63 - 1``: refused, naming past_length and rope_deltas, not
            wrapped to a negative id).
    """
    _check_int_tensor(rope_deltas, "rope_deltas", "[batch, 1]", 2)
    if rope_deltas.shape[1] != 1:
        raise ValueError(f"rope_deltas must be a [batch, 1] tensor, got shape {tuple(rope_deltas.shape)}")
    seq_len = whole(seq_len, 0, f"seq_len must be a non-negative int, got {seq_len!r}")
    rows = _check_batch(batch, rope_deltas.shape[0], "deltas")
    if isinstance(past_length, torch.Tensor):
        _check_int_tensor(past_length, "past_length", f"[batch={rows}]", 1)
        if past_length.shape[0] != rows:
            raise ValueError(f"past_length tensor must have shape ({rows},), got {tuple(past_length.shape)}")
        if (past_length < 0).any():
            raise ValueError(f"past_length must be non-negative, got {past_length.tolist()}")
        starts: list[int] | None = None if past_length.device.type == "meta" else past_length.tolist()
    else:
        past_length = whole(
            past_length,
            0,
            f"past_length must be a non-negative int or an integer tensor, got {past_length!r}",
        )
        if past_length > _I64_MAX:
            raise ValueError(
                f"past_length={past_length} is past int64 (2^63 - 1); ids past int64 are refused"
            )
        starts = [past_length] * rows
    reps = rows // rope_deltas.shape[0]
    if seq_len and starts is not None and rope_deltas.device.type != "meta":
        # the last id of each row, in Python ints: int64 addition would wrap past 2^63 - 1 silently
        deltas = [dl for dl in rope_deltas[:, 0].tolist() for _ in range(reps)]  # as repeat_interleave below
        for i, (p0, dl) in enumerate(zip(starts, deltas, strict=True)):
            last = p0 + seq_len - 1 + dl
            if last > _I64_MAX:
                row = i // reps
                raise ValueError(
                    f"M-RoPE ids overflow int64: past_length={p0}{f' (row {i})' if len(set(starts)) > 1 else ''} + "
                    f"seq_len={seq_len} - 1 + rope_deltas[{row}]={dl} reaches id {last} > 2^63 - 1 (ids past "
                    "int64 are refused, not wrapped)"
                )
    if isinstance(past_length, torch.Tensor):
        start = past_length.to(rope_deltas.device, torch.int64).unsqueeze(1)
    else:
        start = torch.tensor([[past_length]], dtype=torch.int64, device=rope_deltas.device)
    d = rope_deltas.to(torch.int64).repeat_interleave(reps, dim=0)
    ids = start + torch.arange(seq_len, dtype=torch.int64, device=d.device) + d  # [b, s]
    return ids.unsqueeze(0).expand(3, -1, -1).clone()


def mrope_generate_positions(
    prefill_ids: torch.Tensor, generated: int = 0, seq_len: int = 1, *, batch: int | None = None
) -> torch.Tensor:
    """Ids of new tokens as transformers 5.x ``generate()`` gives them: each row's last prompt id + 1, onward.

    ``generate()`` prepares the prompt's ids (``get_rope_index``, the v5 rule) and extends them by
    ``ids[..., -1] + 1 + k`` for the k-th new token, on every row (axis) separately: after a prompt that ends in
    an image or video the three rows differ, and after a multi-frame Qwen2/2.5-VL video the text continues below
    the video's largest t id. The same for Qwen2-VL, Qwen2.5-VL, Qwen3-VL and GLM-4V (tested against their
    ``generate()`` in transformers 5.23). The original code continues at ``max + 1``: :func:`mrope_decode_positions`.

    Args:
        prefill_ids: integer [3, b0, L] (or [4, b0, L] with Qwen3-VL's text row) ids of the prompt, e.g. from
            :func:`mrope_position_ids` with ``rule="v5"``; L >= 1. ``generate()`` reads the last column, so
            pad on the left (with right padding it continues from the padding's id, and so does this).
        generated: new tokens already generated (and cached) before these.
        seq_len: number of new tokens.
        batch: expand for beams / ``num_return_sequences`` (``repeat_interleave``); a positive multiple of b0.

    Returns:
        int64 [rows, b, seq_len] with the rows of ``prefill_ids``.

    Example:
        >>> from ropekit.positions.multimodal import mrope_position_ids
        >>> p, _ = mrope_position_ids(torch.tensor([[0, 0, 1, 1, 1, 1]]), image_grid_thw=[[1, 4, 4]], rule="v5")
        >>> mrope_generate_positions(p)[:, 0, 0].tolist()
        [3, 4, 4]
    """
    _check_int_tensor(prefill_ids, "prefill_ids", "[3 or 4, batch, seq]", 3)
    if prefill_ids.shape[0] not in (3, 4) or prefill_ids.shape[2] == 0:
        raise ValueError(
            f"prefill_ids must be [3 or 4, batch, seq >= 1], got shape {tuple(prefill_ids.shape)}"
        )
    generated = whole(generated, 0, f"generated must be a non-negative int, got {generated!r}")
    seq_len = whole(seq_len, 0, f"seq_len must be a non-negative int, got {seq_len!r}")
    rows = _check_batch(batch, prefill_ids.shape[1], "prefill ids")
    last = prefill_ids[:, :, -1:].to(torch.int64)
    _check_fits(int(last.max()) + generated + seq_len, f"generated={generated} + seq_len={seq_len}")
    last = last.repeat_interleave(rows // prefill_ids.shape[1], dim=1)
    return last + 1 + generated + torch.arange(seq_len, dtype=torch.int64, device=last.device)
