# SPDX-License-Identifier: MIT
"""M-RoPE position ids [3, ...] (rows t, h, w) for interleaved text, images and video, and their rope deltas.

Rules of Qwen2-VL (Wang et al. 2024, arXiv 2409.12191), Qwen2.5-VL (absolute-time temporal axis), Qwen3-VL and
GLM-4V, as transformers' ``get_rope_index`` of each family computes them:

- a text run of n tokens gets ``cur + [0, n)`` on all three rows, then ``cur += n``;
- a vision block with grid (T, h, w) in patch units and spatial merge m has ``T * (h/m) * (w/m)`` tokens in
  raster order per frame; ids are ``cur + (t_i, row, col)``;
- temporal step: ``t_i = i`` (Qwen2-VL, images everywhere but in Qwen2.5-VL's original code, which puts every
  temporal patch of an image at ``t_i = 0``: rule v4); Qwen2.5-VL videos ``t_i = int(i * (tokens_per_second *
  second_per_grid_t))`` -- the float product first, then truncation, so fractional intervals are right
  (transformers truncated ``second_per_grid_t`` first until its PR #48669), computed as transformers computes it
  (the interval, then ``i * interval`` in float32): truncation depends on the order and dtype;
- Qwen3-VL and GLM-4V split a video into single-frame blocks (time is carried by timestamp text);
- the advance after a block: ``rule="v4"`` (the original model code the checkpoints were trained with, and the
  default): ``cur = max(all ids so far) + 1``; ``rule="v5"`` (transformers 5.x): ``cur += max(h/m, w/m)``. They
  agree for single-frame blocks and differ after multi-frame Qwen2/2.5-VL videos (transformers #45381 / #45325);
- rope delta per row: ``max id + 1 - length`` with the padded length (v4) or the unpadded length (v5); padding
  slots hold 1 (v4) or 0 (v5);
- decoding: the original code (and transformers 4.x ``generate()``) puts new tokens at ``past + delta``, the
  first one at ``max id + 1`` (:func:`mrope_decode_positions`); transformers 5.x ``generate()`` continues each
  row (axis) from the prompt's last id + 1 instead (:func:`mrope_generate_positions`): after a multi-frame video
  or a prompt that ends in an image or video the two differ. Only Qwen2.5-VL reads video timing
  (``tokens_per_second``, ``second_per_grid_t(s)``): other families refuse it.

:class:`VisionBlock`, the argument checks and the ids of one block's grid are in
:mod:`ropekit.positions.multimodal_blocks`; this module builds whole sequences and batches from them.
:func:`videorope_positions` (VideoRoPE's diagonal layout) is in :mod:`ropekit.positions.videorope`, the decoding
continuations :func:`mrope_decode_positions` and :func:`mrope_generate_positions` in
:mod:`ropekit.positions.multimodal_decode` (all importable from here).

Shapes: b batch, L padded sequence length.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ropekit.positions.grid import _grid_thw_ints
from ropekit.positions.multimodal_blocks import (
    FAMILIES,
    Family,
    Rule,
    VisionBlock,
    _block_ids,
    _check_common,
    _check_divisible,
    _check_fits,
    _check_start_int,
    _check_timed_family,
    _pos_finite,
    _split_frames,
)
from ropekit.positions.multimodal_decode import mrope_decode_positions, mrope_generate_positions
from ropekit.positions.videorope import videorope_positions

__all__ = [
    "FAMILIES",
    "Family",
    "Rule",
    "VisionBlock",
    "mrope_decode_positions",
    "mrope_generate_positions",
    "mrope_position_ids",
    "mrope_positions",
    "split_text_row",
    "videorope_positions",
]


def mrope_positions(
    segments: Sequence[int | VisionBlock],
    *,
    family: Family = "qwen2_vl",
    spatial_merge_size: int = 2,
    tokens_per_second: float | None = None,
    rule: Rule = "v4",
    start: int = 0,
) -> torch.Tensor:
    """M-RoPE ids of one unpadded sequence from its segments.

    Args:
        segments: in order, an int n for a run of n text tokens or a :class:`VisionBlock`.
        family: "qwen2_vl", "qwen2_5_vl", "qwen3_vl" or "glm4v" (see the module docstring).
        spatial_merge_size: m, patches merged per side into one LLM token (2 for every family here).
        tokens_per_second: Qwen2.5-VL's ``vision_config.tokens_per_second``; None: 2 (the released checkpoints).
            Refused for the other families, which do not read it (nor a video's ``second_per_grid_t``).
        rule: "v4" (default; the original model code) or "v5" (transformers 5.x advance rule).
        start: position of the first token, an int (ids past int64 are refused, not wrapped).

    Returns:
        int64 [3, L] with L the number of tokens.

    Raises:
        ValueError: naming the argument (family, rule, spatial_merge_size, tokens_per_second, segments, start or
            ids past int64).
        TypeError: start not an int.

    Example:
        >>> mrope_positions([2, VisionBlock((1, 4, 6)), 2])[1].tolist()
        [0, 1, 2, 2, 2, 3, 3, 3, 5, 6]
    """
    tps = _check_common(family, rule, spatial_merge_size, tokens_per_second)
    cur = _check_start_int(start)
    top = cur - 1
    parts: list[torch.Tensor] = []
    items = [x for seg in segments for x in _split_frames(seg, family)]
    for seg in items:
        if isinstance(seg, VisionBlock):
            if seg.video and seg.second_per_grid_t is not None:
                _check_timed_family(family, f"VisionBlock.second_per_grid_t={seg.second_per_grid_t!r}")
            ids = _block_ids(seg, cur, family, spatial_merge_size, tps, rule)
            top = max(top, int(ids.max()))
            _, h, w = seg.grid_thw
            cur = top + 1 if rule == "v4" else cur + max(h, w) // spatial_merge_size
        elif isinstance(seg, int) and not isinstance(seg, bool) and seg >= 0:
            _check_fits(cur + seg - 1, f"a text run of {seg} tokens")
            ids = (torch.arange(seg, dtype=torch.int64) + cur).expand(3, seg)
            cur += seg
            top = max(top, cur - 1)
        else:
            raise ValueError(f"segments must hold non-negative ints (text runs) or VisionBlocks, got {seg!r}")
        parts.append(ids)
    return torch.cat(parts, dim=1) if parts else torch.zeros(3, 0, dtype=torch.int64)


def _check_mask(mask: object, b: int, length: int) -> None:
    if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != (b, length):
        raise ValueError(
            f"attention_mask must have shape ({b}, {length}), got {getattr(mask, 'shape', None)}"
        )
    bad = (mask != 0) & (mask != 1)
    if bad.any():
        raise ValueError(
            f"attention_mask must hold only 0 and 1, got {mask[bad][0].item()!r} at {tuple(bad.nonzero()[0].tolist())}"
        )


def _grids(
    given: torch.Tensor | Sequence[Sequence[int]] | None, name: str, merge: int
) -> list[tuple[int, int, int]]:
    """The grids as int triples, each checked before any token is matched to it (a grid of odd h would otherwise
    be blamed on the token count)."""
    out = [_grid_thw_ints(g, f"{name}[{i}]") for i, g in enumerate(given if given is not None else [])]
    for i, g in enumerate(out):
        _check_divisible(g, merge, f"{name}[{i}]")
    return out


def _spg(s: object, i: int) -> float:
    v = s.item() if isinstance(s, torch.Tensor) and s.numel() == 1 else s
    if not _pos_finite(v):
        raise ValueError(f"second_per_grid_ts[{i}] must be a finite number > 0, got {s!r}")
    return float(v)  # type: ignore[arg-type]


def _runs(types: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for t in types:
        if out and out[-1][0] == t:
            out[-1] = (t, out[-1][1] + 1)
        else:
            out.append((t, 1))
    return out


def mrope_position_ids(
    token_types: torch.Tensor,
    *,
    attention_mask: torch.Tensor | None = None,
    image_grid_thw: torch.Tensor | Sequence[Sequence[int]] | None = None,
    video_grid_thw: torch.Tensor | Sequence[Sequence[int]] | None = None,
    second_per_grid_ts: Sequence[float] | torch.Tensor | None = None,
    family: Family = "qwen2_vl",
    spatial_merge_size: int = 2,
    tokens_per_second: float | None = None,
    rule: Rule = "v4",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batched M-RoPE ids and rope deltas, as a VL model's ``get_rope_index`` computes them.

    Args:
        token_types: [b, L] integer ``mm_token_type_ids`` (0 text, 1 image, 2 video); build it from input ids with
            ``(ids == image_token_id) + 2 * (ids == video_token_id)`` for v4-style inputs.
        attention_mask: [b, L] holding only 0 and 1 (any dtype; left or right padding); None = no padding.
            transformers keeps a token where ``mask.bool()`` but numbers text positions with ``mask.long()``, so
            a 0.4 would mean both; other values are refused.
        image_grid_thw, video_grid_thw: [n, 3] grids in the order the images / videos appear in the batch; h and w
            must be multiples of ``spatial_merge_size``.
        second_per_grid_ts: one value per video, Qwen2.5-VL only (refused for the other families); None means 1.0.
        family, spatial_merge_size, tokens_per_second, rule: as :func:`mrope_positions`.

    Returns:
        (position_ids int64 [3, b, L], rope_deltas int64 [b, 1]).

    Raises:
        ValueError: naming the argument when the vision tokens do not match the grids (count or run lengths), a
            grid is not divisible by the merge, the mask is not 0/1, or timing is given to a family without it.
    """
    tps = _check_common(family, rule, spatial_merge_size, tokens_per_second)
    if not isinstance(token_types, torch.Tensor) or token_types.dim() != 2:
        raise ValueError(
            f"token_types must be a [batch, seq] tensor, got {getattr(token_types, 'shape', token_types)!r}"
        )
    b, length = token_types.shape
    if attention_mask is not None:
        _check_mask(attention_mask, b, length)
    grids = {
        1: _grids(image_grid_thw, "image_grid_thw", spatial_merge_size),
        2: _grids(video_grid_thw, "video_grid_thw", spatial_merge_size),
    }
    spgs: list[float | None] = [None] * len(grids[2])
    if second_per_grid_ts is not None:
        _check_timed_family(family, "second_per_grid_ts")
        spgs = [_spg(s, i) for i, s in enumerate(second_per_grid_ts)]
        if len(spgs) != len(grids[2]):
            raise ValueError(f"second_per_grid_ts has {len(spgs)} entries for {len(grids[2])} videos")
    queues = {
        1: [VisionBlock(g) for g in grids[1]],
        2: [VisionBlock(g, video=True, second_per_grid_t=s) for g, s in zip(grids[2], spgs)],
    }
    queues[2] = [f for v in queues[2] for f in _split_frames(v, family)]  # type: ignore[misc]
    pad = 1 if rule == "v4" else 0
    out = torch.full((3, b, length), pad, dtype=torch.int64)
    deltas = []
    for row in range(b):
        keep = (
            torch.ones(length, dtype=torch.bool)
            if attention_mask is None
            else attention_mask[row].to(torch.bool)
        )
        types = token_types[row][keep.to(token_types.device)].tolist()
        segs: list[int | VisionBlock] = []
        for kind, n in _runs(types):
            if kind == 0:
                segs.append(n)
                continue
            if kind not in queues:
                raise ValueError(f"token_types must hold 0 (text), 1 (image) or 2 (video), got {kind}")
            while n > 0:
                if not queues[kind]:
                    what = "image_grid_thw" if kind == 1 else "video_grid_thw"
                    raise ValueError(
                        f"row {row} has more {'image' if kind == 1 else 'video'} tokens than {what} covers"
                    )
                blk = queues[kind].pop(0)
                need = blk.tokens(spatial_merge_size)
                if need > n:
                    raise ValueError(
                        f"row {row}: a run of {n} vision tokens cannot hold grid {blk.grid_thw} "
                        f"({need} tokens at spatial_merge_size={spatial_merge_size})"
                    )
                segs.append(blk)
                n -= need
        ids = mrope_positions(
            segs,
            family=family,
            spatial_merge_size=spatial_merge_size,
            tokens_per_second=tps if family == "qwen2_5_vl" else None,
            rule=rule,
        )
        out[:, row, keep.cpu()] = ids
        ref_len = length if rule == "v4" else int(keep.sum())
        deltas.append((int(ids.max()) + 1 if ids.numel() else 0) - ref_len)
    left = [q for q in (*queues[1], *queues[2]) if q]
    if left:
        raise ValueError(f"{len(left)} image/video grids were not used by any vision tokens in token_types")
    return out.to(token_types.device), torch.tensor(
        deltas, dtype=torch.int64, device=token_types.device
    ).unsqueeze(1)


def split_text_row(position_ids: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Split Qwen3-VL / ERNIE 4-row ids ``[text; t; h; w]`` into (text row or None, the 3 M-RoPE rows).

    Row 0 drives masking and packing only; rows 1-3 drive the rotation. A 3-row input has no text row; a
    [b, s] input is broadcast to the three axes (pure text).
    """
    p = position_ids
    if not isinstance(p, torch.Tensor) or p.dim() not in (2, 3):
        raise ValueError(f"position_ids must be [4 or 3, b, s] or [b, s], got {getattr(p, 'shape', p)!r}")
    if p.dim() == 2:
        return None, p.unsqueeze(0).expand(3, -1, -1)
    if p.shape[0] == 4:
        return p[0], p[1:]
    if p.shape[0] == 3:
        return None, p
    raise ValueError(f"position_ids must have 4 ([text; t; h; w]) or 3 ([t; h; w]) rows, got {p.shape[0]}")
