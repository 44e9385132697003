# SPDX-License-Identifier: MIT
"""Lab checkpoints as a report SOURCE: the RoPE a lab model rotates with, and optionally its weight analysis.

Lab checkpoints of the rotary encodings whose rotation is a :class:`~ropekit.spec.RopeSpec` are read: ``rope``
(its spec from the checkpoint's metadata: a ``spec`` dict, else the ``tag``, where the frequencies experiment's
``prope<p>`` tags give p-RoPE with fraction p), ``p-rope`` and ``single-frequency`` (their default parameters,
which the lab trains). ``xpos`` (a per-band decay no RopeSpec describes), ``dense-rotation`` (no bands) and the
non-rotary encodings are refused. Nothing is unpickled (safetensors only).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ropekit.analysis.weights import WeightAnalysis
from ropekit.spec import RopeSpec

if TYPE_CHECKING:
    from ropekit.lab.model import LMConfig

__all__ = ["LAB_ENCODINGS", "lab_checkpoint"]

#: lab encodings a report can read: their rotation is a RopeSpec (see the module docstring)
LAB_ENCODINGS = ("rope", "p-rope", "single-frequency")
_LAB_REFUSED = {
    "xpos": "xPos scales q and k by a per-band decay that no RopeSpec describes, so the report's spectrum, decay "
    "and precision would describe plain RoPE",
    "dense-rotation": "a dense rotation of the whole head has no bands",
}


def lab_checkpoint(path: Path, weights: bool) -> tuple[RopeSpec, int, WeightAnalysis | None]:
    """(spec, training length, weight analysis or None) of the lab checkpoint at ``path``.

    Raises:
        ValueError: naming the file, for anything the report cannot read (see the module docstring).
    """
    from ropekit.lab.model import LMConfig
    from ropekit.lab.train import checkpoint_info

    info = checkpoint_info(path)  # ValueError naming the file when it is not a readable lab checkpoint
    meta = info.meta
    train_len = meta.get("train_len")
    if type(train_len) is not int or train_len < 1:
        raise ValueError(
            f"SOURCE {str(path)!r}: lab checkpoint metadata 'train_len' must be a positive int, got {train_len!r}"
        )
    encoding = info.config.encoding if info.config is not None else meta.get("encoding")
    if encoding not in LAB_ENCODINGS:
        why = _LAB_REFUSED.get(str(encoding), "only RoPE models have bands")
        raise ValueError(
            f"SOURCE {str(path)!r}: lab checkpoint with encoding {encoding!r}; {why} (the report reads "
            f"{', '.join(LAB_ENCODINGS)})"
        )
    # written before the model config was recorded: the default model at the training length
    cfg = info.config or LMConfig(encoding=str(encoding), max_positions=train_len)
    try:
        spec = _lab_spec(meta, cfg)
    except ValueError as e:
        raise ValueError(
            f"SOURCE {str(path)!r}: lab checkpoint metadata gives no usable RoPE ({e})"
        ) from None
    if spec.head_dim != cfg.head_dim:
        raise ValueError(
            f"SOURCE {str(path)!r}: lab checkpoint metadata 'spec' has head_dim {spec.head_dim}, the model's "
            f"head_dim is {cfg.head_dim}"
        )
    w = _lab_weights(path, cfg, spec, train_len) if weights else None
    return spec, train_len, w


def _lab_weights(path: Path, cfg: LMConfig, spec: RopeSpec, train_len: int) -> WeightAnalysis:
    from ropekit.lab.model import TinyLM
    from ropekit.lab.train import load_checkpoint
    from ropekit.report.models import analyse_lab_model

    if cfg.vocab < 256:
        raise ValueError(
            f"SOURCE {str(path)!r}: the weight analysis feeds bytes (vocab 256), the model's vocab is {cfg.vocab}"
        )
    model = TinyLM(cfg, spec=spec) if cfg.encoding == "rope" else TinyLM(cfg)
    load_checkpoint(path, model, None, None)  # ValueError naming the file when its tensors do not fit
    model.eval()
    text = Path(json.__file__).read_bytes()  # stdlib text: deterministic, no download
    length = min(train_len, len(text) // 2)
    tokens = _bytes_tokens(text, length)
    return analyse_lab_model(model, tokens, f"2 x {length} bytes of Python's json/__init__.py")


def _lab_spec(meta: dict[str, Any], cfg: LMConfig) -> RopeSpec:
    """The RoPE of a lab model: ``rope``'s from the metadata, the other encodings' from the encoding itself."""
    if cfg.encoding != "rope":  # p-rope, single-frequency: their spec at the parameters the lab trains
        from ropekit.lab.encodings import build_encoding

        spec = getattr(build_encoding(cfg.encoding, cfg.d_model, cfg.n_heads, cfg.head_dim), "spec", None)
        assert isinstance(spec, RopeSpec), cfg.encoding
        return spec
    if isinstance(meta.get("spec"), dict):
        return RopeSpec.from_hf(meta["spec"])
    tag = meta.get("tag", "rope")
    if not isinstance(tag, str) or not tag.startswith("prope"):
        return RopeSpec(cfg.head_dim)  # "rope" or a run's own label: the lab's plain RoPE
    text = tag[len("prope") :]  # the frequencies experiment's p-RoPE tags: prope0.25, prope0.5, ...
    try:
        p = float(text)
    except ValueError:
        raise ValueError(
            f"metadata 'tag' is {tag!r}: a tag starting with 'prope' must be 'prope<p>' with p the fraction of "
            "frequencies kept, a number in (0, 1] (e.g. 'prope0.5', as the frequencies experiment writes)"
        ) from None
    try:
        return RopeSpec(cfg.head_dim, p=p)
    except ValueError as e:
        raise ValueError(f"metadata 'tag' is {tag!r}: {e}") from None


def _bytes_tokens(text: bytes, length: int) -> Any:
    import torch

    t = torch.tensor(list(text), dtype=torch.int64)
    return t[: 2 * length].view(2, length)
