# SPDX-License-Identifier: MIT
"""Builders of explicit global position ids (int64), the only way positions enter ropekit.

- :func:`positions_with_offset`: ``offset + arange(seq_len)``; an offset per row for batched KV-cache decoding
  (each sequence at its own cache length).
- :func:`positions_from_mask`: from a [b, s] attention mask with left or right padding: the i-th real token of a
  row gets position i (``cumsum(mask) - 1``), padding gets ``pad_position`` -- never a shared ``cache_position``
  (pitfalls item 40).
- :func:`positions_from_cu_seqlens`: packed documents, positions restart at 0 per document (pitfalls item 38).

Shapes: b batch, s sequence, t packed tokens, n documents.
"""

from __future__ import annotations

import operator

import numpy as np
import torch

from ropekit.phases import INT_DTYPES as _INT

__all__ = ["positions_from_cu_seqlens", "positions_from_mask", "positions_with_offset"]


_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


def check_int(name: str, value: object, low: int | None = None, *, kind: str = "an int") -> int:
    """``value`` as an int: an int or an integer-like (numpy ints, 0-d integer tensors; ``operator.index``), not a
    bool, and >= ``low`` when given. Shared by the position builders and :mod:`ropekit.distributed`.

    Traced by ``torch.compile``, a symbolic int (``q.shape[0]`` of a dynamic dimension) is returned as it is:
    ``operator.index`` would specialise it to its current value, so every new length would compile a new graph.
    ``low`` is then compared symbolically (nothing is added to the graph for a size against ``low=0``).

    Raises:
        TypeError: not an integer (``kind`` says what was expected, e.g. "an int or a 1-D integer tensor").
        ValueError: below ``low``.
    """
    # dynamo reports a symbolic int's type as int: the first test takes both (and a plain int without a call)
    if type(value) is int or isinstance(value, torch.SymInt):
        n: int = value  # type: ignore[assignment]  # a SymInt stands for an int in traced code
    else:
        if isinstance(value, (bool, np.bool_)) or (
            isinstance(value, torch.Tensor) and (value.dtype == torch.bool or value.dim() != 0)
        ):  # a one-element 1-D tensor also has __index__: only 0-d tensors are integers here
            raise TypeError(f"{name} must be {kind}, got {value!r}")
        try:
            n = operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(f"{name} must be {kind}, got {value!r}") from None
    if low is not None and n < low:
        raise ValueError(f"{name} must be >= {low}, got {n}")
    return n


def positions_with_offset(
    seq_len: int, offset: int | torch.Tensor = 0, *, device: torch.device | str | None = None
) -> torch.Tensor:
    """Positions ``offset, offset + 1, ..., offset + seq_len - 1``.

    Args:
        seq_len: number of new tokens (>= 0): an int or an integer-like (numpy int, 0-d integer tensor).
        offset: an int or a numpy int (e.g. the KV-cache length), a 0-d integer tensor (read on its device, no
            host sync), or an integer tensor [b] of per-sequence offsets.
        device: device of the result (default: the offset tensor's, else the default device).

    Returns:
        int64 [s] for an int or 0-d tensor offset, [b, s] for a 1-D tensor offset.

    Raises:
        ValueError: a negative ``seq_len``, a bad offset tensor, or positions past int64 (they would wrap).
        TypeError: a ``seq_len`` that is not an integer (a bool, a float), an offset that is neither an integer
            nor a tensor.
    """
    seq_len = check_int("seq_len", seq_len, 0)
    if isinstance(offset, torch.Tensor) and offset.dim() == 0 and offset.dtype in _INT:
        return positions_with_offset(seq_len, offset.reshape(1), device=device)[0]
    if isinstance(offset, torch.Tensor):
        if offset.dtype not in _INT or offset.dim() != 1:
            raise ValueError(
                f"offset tensor must be a 0-d or 1-D integer tensor ({', '.join(str(d) for d in _INT)}), got "
                f"{offset.dtype} of shape {tuple(offset.shape)}"
            )
        dev = device if device is not None else offset.device
        if seq_len and offset.numel() and offset.device.type != "meta":
            # a wrapped int64 would be a silently wrong position; no host sync off the CPU (a decode loop calls this
            # every step): there the device asserts it when the check runs
            limit = _I64_MAX - (seq_len - 1)
            if offset.device.type == "cpu" and not torch.compiler.is_compiling():
                hi = int(offset.max())
                if hi > limit:
                    raise ValueError(
                        f"offset + seq_len - 1 must fit int64 (<= {_I64_MAX}), got offset {hi} with seq_len {seq_len}"
                    )
            else:
                torch._assert_async(
                    offset.max() <= limit, f"offset + seq_len - 1 must fit int64 (<= {_I64_MAX})"
                )
        return offset.to(dev, torch.int64).unsqueeze(1) + torch.arange(seq_len, dtype=torch.int64, device=dev)
    offset = check_int("offset", offset, kind="an int or a 1-D integer tensor")
    if not _I64_MIN <= offset <= _I64_MAX - max(seq_len - 1, 0):
        raise ValueError(
            f"offset and offset + seq_len - 1 must fit int64 ([{_I64_MIN}, {_I64_MAX}]), got offset {offset} with "
            f"seq_len {seq_len}"
        )
    return torch.arange(seq_len, dtype=torch.int64, device=device) + offset  # arange's end could pass int64


def positions_from_mask(attention_mask: torch.Tensor, *, pad_position: int = 0) -> torch.Tensor:
    """Per-row positions from a padding mask (1 = real token, 0 = padding), left or right padded.

    For KV-cache decoding pass the mask of cache + new tokens and keep the last ``s_new`` columns.

    Args:
        attention_mask: [b, s] bool or integer tensor of 0/1.
        pad_position: position given to padding tokens (they are masked out of attention anyway); an int or a
            numpy int.

    Returns:
        int64 [b, s].

    Example:
        >>> positions_from_mask(torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])).tolist()
        [[0, 0, 0, 1], [0, 1, 2, 3]]
    """
    pad_position = check_int("pad_position", pad_position)
    if not _I64_MIN <= pad_position <= _I64_MAX:
        raise ValueError(f"pad_position must fit int64 ([{_I64_MIN}, {_I64_MAX}]), got {pad_position}")
    m = attention_mask
    if not isinstance(m, torch.Tensor) or m.dim() != 2:
        shape = tuple(m.shape) if isinstance(m, torch.Tensor) else type(m).__name__
        raise ValueError(f"attention_mask must be a [batch, seq] tensor, got {shape}")
    if m.dtype != torch.bool:
        if m.dtype not in _INT:
            raise ValueError(f"attention_mask must be bool or integer 0/1, got {m.dtype}")
        if m.device.type == "meta":  # no values to check
            pass
        elif torch.compiler.is_compiling():  # traced: checked on the device, no host sync (raises when run)
            torch._assert_async(((m == 0) | (m == 1)).all(), "attention_mask must contain only 0 and 1")
        elif m.numel() and not bool(((m == 0) | (m == 1)).all()):
            raise ValueError(
                f"attention_mask must contain only 0 and 1, found {sorted(set(m.flatten().tolist()))}"
            )
    real = m.to(torch.bool)
    pos = real.to(torch.int64).cumsum(-1) - 1
    return pos.masked_fill(~real, pad_position)


def positions_from_cu_seqlens(cu_seqlens: torch.Tensor, *, total: int | None = None) -> torch.Tensor:
    """Positions of packed documents, restarting at 0 for each document.

    Args:
        cu_seqlens: [n + 1] integer cumulative lengths, starting at 0 and non-decreasing
            (flash-attn's varlen convention), e.g. [0, 3, 5] for documents of lengths 3 and 2.
        total: the number of tokens t (e.g. ``q.shape[0]``), checked against ``cu_seqlens[-1]``. Needed under
            ``torch.compile`` and for a meta ``cu_seqlens`` (then unchecked), where the output length cannot come
            from the tensor's values.

    Returns:
        int64 [t] with t = cu_seqlens[-1], e.g. [0, 1, 2, 0, 1].

    Raises:
        TypeError: ``total`` not an int (numpy ints are ints; a bool or a float is not).
        ValueError: a bad ``cu_seqlens`` (naming what is wrong), a negative ``total``, or ``total`` differing from
            its last entry.
            Traced by ``torch.compile``, the value checks run on the device (``torch._assert_async``: a
            RuntimeError with the same wording when the graph runs).
    """
    tok, doc, cu = packed_documents(cu_seqlens, total)
    return tok - cu[doc]


def packed_documents(
    cu_seqlens: torch.Tensor, total: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Checked packing: (token index [t], its document index [t], cu_seqlens as int64 [n + 1]); see
    :func:`positions_from_cu_seqlens` for the arguments and errors."""
    cu = cu_seqlens
    if not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.numel() < 1 or cu.dtype not in _INT:
        desc = f"{cu.dtype} of shape {tuple(cu.shape)}" if isinstance(cu, torch.Tensor) else type(cu).__name__
        raise ValueError(f"cu_seqlens must be a 1-D integer tensor [0, l0, l0 + l1, ...], got {desc}")
    if total is not None:
        total = check_int("total", total, 0, kind="an int (the token count) or None")
    cu = cu.to(torch.int64)
    if cu.device.type == "meta":  # no values: the shape comes from total, nothing can be checked
        if total is None:
            raise ValueError(
                "cu_seqlens on the meta device needs total= (the token count, e.g. q.shape[0]): the output length "
                "cannot be read from a meta tensor's values"
            )
    elif torch.compiler.is_compiling():
        if total is None:
            raise ValueError(
                "positions_from_cu_seqlens under torch.compile needs total= (the token count, e.g. q.shape[0]): "
                "the output length cannot be read from cu_seqlens' values in a traced graph"
            )
        ok = (cu[0] == 0) & (cu[-1] == total) & (cu[1:] >= cu[:-1]).all()
        torch._assert_async(ok, "cu_seqlens must start at 0, be non-decreasing and end at total")
    else:
        # one read of three numbers (one host sync on a GPU, not one per check)
        decreasing = (cu[1:] < cu[:-1]).any() if cu.numel() > 1 else cu.new_zeros(())
        first, last, bad = torch.stack((cu[0], cu[-1], decreasing.to(torch.int64))).tolist()
        if first != 0:
            raise ValueError(f"cu_seqlens must start at 0, got {cu.tolist()[:8]}")
        if bad:
            raise ValueError(f"cu_seqlens must be non-decreasing, got {cu.tolist()[:16]}")
        if total is not None and last != total:
            raise ValueError(
                f"cu_seqlens ends at {last} tokens but total={total} (the token count, e.g. q.shape[0])"
            )
        total = int(last)
    tok = torch.arange(total, dtype=torch.int64, device=cu.device)
    doc = torch.searchsorted(cu[1:], tok, right=True)  # document index of each token
    return tok, doc, cu
