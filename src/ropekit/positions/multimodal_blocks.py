# SPDX-License-Identifier: MIT
"""The vision block of M-RoPE position ids and what the builders of :mod:`ropekit.positions.multimodal` share.

- :class:`VisionBlock`: one image or video in the token stream, its (T, h, w) patch grid;
- the argument checks (family, rule, spatial merge, tokens per second, start, ids past int64);
- the ids of one block's grid, ``cur + (t_i, row, col)`` with the family's temporal step, and the per-frame
  split of Qwen3-VL / GLM-4V videos (the rules are in :mod:`ropekit.positions.multimodal`).

Shapes: T frames (temporal patches), h, w patches per side, m spatial merge; T * (h/m) * (w/m) tokens a block.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Literal

import torch

from ropekit.integers import as_int
from ropekit.positions.grid import _grid_thw_ints

__all__ = ["FAMILIES", "Family", "Rule", "VisionBlock"]

Family = Literal["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v"]
Rule = Literal["v4", "v5"]
FAMILIES: tuple[str, ...] = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v")


_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def _pos_int(x: object) -> bool:
    n = as_int(x)  # ints and numpy ints alike (not bools), as across ropekit
    return n is not None and n > 0


def _pos_finite(x: object) -> bool:
    """A real number (not bool), finite and > 0: inf would make ``i * second_per_grid_t * tokens_per_second``
    NaN at i = 0 and infinite after."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) and float(x) > 0


def _check_start_int(start: object) -> int:
    """``start`` of the int64 ids: an int (not bool, not a float: no silent truncation) within int64."""
    n = as_int(start)
    if n is None:
        raise TypeError(f"start must be an int, got {start!r} ({type(start).__name__})")
    start = n
    if not _I64_MIN <= start <= _I64_MAX:
        raise ValueError(f"start must fit int64 (the ids' dtype), got {start!r}")
    return start


def _check_fits(last: int, what: str) -> None:
    """Refuse ids past int64 before building them (int64 addition would wrap silently)."""
    if last > _I64_MAX:
        raise ValueError(f"M-RoPE ids overflow int64: {what} reaches id {last} > 2^63 - 1")


@dataclass(frozen=True)
class VisionBlock:
    """One image or video in the token stream.

    Args:
        grid_thw: (T, h, w) in patches, as the processor's ``image_grid_thw`` / ``video_grid_thw`` rows: three
            positive ints (Python, NumPy or 0-d integer tensors) or a 1-D integer tensor of 3; stored as ints.
        video: True for a video (temporal scaling and per-frame splitting apply), False for an image.
        second_per_grid_t: seconds per temporal patch (Qwen2.5-VL videos: ``temporal_patch_size / fps``); refused
            for an image (``video=False``), which has no frame interval.
    """

    grid_thw: tuple[int, int, int]
    video: bool = False
    second_per_grid_t: float | None = None

    def __post_init__(self) -> None:
        # ints, NumPy ints, 0-d integer tensors or a 1-D integer tensor of 3; floats and bools are refused
        # (int() would truncate 4.5 to 4 and turn True into 1)
        object.__setattr__(self, "grid_thw", _grid_thw_ints(self.grid_thw, "VisionBlock.grid_thw"))
        s = self.second_per_grid_t
        if s is not None and not _pos_finite(s):
            raise ValueError(f"VisionBlock.second_per_grid_t must be a finite number > 0 or None, got {s!r}")
        if s is not None and not self.video:
            # an image has no frame interval: the timing would be ignored
            raise ValueError(
                f"VisionBlock.second_per_grid_t={s!r} applies to videos only: pass video=True or leave it out"
            )

    def tokens(self, merge: int) -> int:
        t, h, w = self.grid_thw
        return t * (h // merge) * (w // merge)


def _check_common(family: str, rule: str, merge: int, tps: float | None) -> float:
    """Check the shared arguments; return ``tokens_per_second`` (None: 2.0, the released Qwen2.5-VL checkpoints).

    Only Qwen2.5-VL reads video timing: an explicit ``tokens_per_second`` for another family is refused rather
    than ignored (the default family is qwen2_vl, so a forgotten ``family="qwen2_5_vl"`` would lose the timing).
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    if rule not in ("v4", "v5"):
        raise ValueError(f"rule must be 'v4' or 'v5', got {rule!r}")
    if not _pos_int(merge):
        raise ValueError(f"spatial_merge_size must be a positive int, got {merge!r}")
    if tps is None:
        return 2.0
    if not _pos_finite(tps):
        raise ValueError(f"tokens_per_second must be a finite number > 0, got {tps!r}")
    _check_timed_family(family, f"tokens_per_second={tps!r}")
    return float(tps)


def _check_timed_family(family: str, what: str) -> None:
    """Refuse video timing (``tokens_per_second``, ``second_per_grid_t(s)``) for a family that does not read it."""
    if family != "qwen2_5_vl":
        raise ValueError(
            f"{what} is read by family='qwen2_5_vl' only (absolute-time video axis); family={family!r} would "
            "ignore it: pass family='qwen2_5_vl' or leave it out"
        )


def _check_divisible(grid: tuple[int, int, int], merge: int, what: str) -> None:
    if grid[1] % merge or grid[2] % merge:
        raise ValueError(f"{what}={grid} has h or w not divisible by spatial_merge_size={merge}")


def _block_ids(block: VisionBlock, cur: int, family: str, merge: int, tps: float, rule: str) -> torch.Tensor:
    t, h, w = block.grid_thw
    _check_divisible(block.grid_thw, merge, "VisionBlock.grid_thw")
    hh, ww = h // merge, w // merge
    if block.video and family == "qwen2_5_vl":
        spg = 1.0 if block.second_per_grid_t is None else float(block.second_per_grid_t)
        last = (t - 1) * spg * tps  # the largest step (spg, tps > 0: the steps do not decrease)
        if not math.isfinite(last) or cur + int(last) > _I64_MAX:
            raise ValueError(
                f"M-RoPE ids overflow int64: frame {t - 1} of VisionBlock.grid_thw={block.grid_thw} sits at "
                f"{cur} + {t - 1} * second_per_grid_t={spg!r} * tokens_per_second={tps!r} > 2^63 - 1"
            )
        # transformers' arithmetic (after its PR #48669), whose truncation the ids must copy: the interval
        # tokens_per_second * second_per_grid_t, then i * interval in the default float dtype (float32), then
        # truncation toward zero. Exact multiples land either side of an integer depending on that order and
        # dtype (25 fps: 25 * 0.08 gives 4 in float32 and 3 in float64 when 0.08 came from a float32 tensor).
        steps = (torch.arange(t) * (tps * spg)).long().tolist()
    elif family == "qwen2_5_vl" and rule == "v4":
        # the original Qwen2.5-VL code times an image with second_per_grid_t = 0: every temporal patch at offset
        # 0 (transformers 5.x steps them by 1, its PR #45325)
        steps = [0] * t
    else:
        steps = list(range(t))
    _check_fits(cur + max(steps[-1], hh - 1, ww - 1), f"VisionBlock.grid_thw={block.grid_thw}")
    tt = torch.tensor(steps, dtype=torch.int64)
    grid = torch.stack(
        torch.meshgrid(tt, torch.arange(hh), torch.arange(ww), indexing="ij")  # [3, T, H', W']
    )
    return grid.reshape(3, -1) + cur


def _split_frames(item: int | VisionBlock, family: str) -> list[int | VisionBlock]:
    if (
        isinstance(item, VisionBlock)
        and item.video
        and family in ("qwen3_vl", "glm4v")
        and item.grid_thw[0] > 1
    ):
        t, h, w = item.grid_thw
        return [VisionBlock((1, h, w), video=True, second_per_grid_t=item.second_per_grid_t)] * t
    return [item]


def _check_int_tensor(x: object, name: str, shape: str, dim: int) -> None:
    """An integer tensor (not bool: True would read as 1; not float: 2.7 would truncate to 2) of ``dim`` dims."""
    if not isinstance(x, torch.Tensor) or x.dim() != dim:
        raise ValueError(f"{name} must be a {shape} tensor, got {getattr(x, 'shape', x)!r}")
    if x.dtype == torch.bool or x.dtype.is_floating_point or x.dtype.is_complex:
        raise ValueError(f"{name} must be an integer tensor, got {x.dtype} {x.flatten()[:4].tolist()}")


def _check_batch(batch: object, rows: int, what: str) -> int:
    """The rows after expanding ``rows`` for beams: ``batch`` (a positive multiple of ``rows``) or ``rows``."""
    if batch is None:
        return rows
    n = as_int(batch)
    if n is None or n < 1 or n % rows:
        raise ValueError(
            f"batch={batch!r} must be a positive multiple of the {rows} rows the {what} were computed for "
            "(stale deltas from another batch must be recomputed, transformers PR #44873)"
        )
    return n
