# SPDX-License-Identifier: MIT
"""A rotary ``inv_freq`` buffer edited after :func:`ropekit.hf.patch`: followed, with a warning.

A hand-made context extension rewrites ``model.model.rotary_emb.inv_freq`` (``copy_``, ``mul_``, a new
``register_buffer``); transformers then rotates with the edited buffer. The patch's probe refuses a model whose
buffer is not its config's frequencies, but an edit made after the patch used to be ignored: the patched model kept
the config's frequencies (logits 1.2 relative apart, silently; found by a user trial). A static spec's float32 /
float64 buffer whose values are neither the config's frequencies nor a float16 / bfloat16 round trip of them
(:func:`ropekit.hf.cast.round_trip_dtype`) is such an edit: the patched model rotates with the buffer's values, as
transformers does (:func:`ropekit.hf.cast.buffer_spec`), and warns once per buffer state. Dynamic specs are left
out: transformers itself rewrites their buffer as the length grows.

Shapes: the buffer [n] (n = spec.n_bands).
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from ropekit.hf.cast import _round_trip_dtype, buffer_state, judged_buffer
from ropekit.spec import RopeSpec

__all__ = ["buffer_states", "edited_after_patch"]

_EDIT_MEMO = "_ropekit_buffer_edits"


def edited_after_patch(module: nn.Module, spec: RopeSpec, layer_type: str | None = None) -> bool:
    """Whether the module's frequency buffer was edited (see the module docstring); warns once per buffer state.

    Checked once per buffer state (storage, version, dtype): one comparison of n numbers when the buffer changes,
    a dict lookup otherwise.
    """
    at_patch = module.__dict__.get(
        "_ropekit_patched"
    )  # the buffers' states when patched; not on the probe's copies
    if spec.dynamic or not isinstance(at_patch, dict):  # (the probe's refusal stands for an edit made before)
        return False
    name = f"{layer_type}_inv_freq" if layer_type else "inv_freq"
    buf = module._buffers.get(name)
    if buf is None or buf.dtype not in (torch.float32, torch.float64) or buf.numel() != spec.n_bands:
        return False
    if at_patch.get(name) == buffer_state(buf):  # untouched since the patch
        return False

    def judge(got: torch.Tensor, want: torch.Tensor) -> bool:
        rel = float(((got - want).abs() / want.abs().clamp_min(1e-300)).max())
        edited = rel > 1e-6 and _round_trip_dtype(got, want) is None
        if edited:  # warned once per buffer state: judged once per state
            warnings.warn(
                f"{type(module).__name__}: its {name} buffer was changed after ropekit.hf.patch (up to {rel:.2g} "
                "relative from its config's frequencies): the patched model now rotates with the buffer's "
                "frequencies, as transformers does (the config's attention factor kept); to change the RoPE for "
                "good, change the config and rebuild the model, or unpatch, edit and patch again",
                UserWarning,
                stacklevel=9,
            )
        return edited

    return judged_buffer(module, _EDIT_MEMO, layer_type, buf, spec, judge)


def buffer_states(module: nn.Module) -> dict[str, tuple[int, int, torch.dtype]]:
    """The (storage, version, dtype) of each ``*inv_freq`` buffer: recorded by the patch, compared by
    :func:`edited_after_patch` (a buffer in the state it was patched in is never an edit)."""
    return {
        n: buffer_state(b) for n, b in module._buffers.items() if n.endswith("inv_freq") and b is not None
    }
