# SPDX-License-Identifier: MIT
"""RopeSpec: the single place RoPE frequencies come from.

RoPE (Su et al. 2021, "RoFormer", arXiv 2104.09864; seed 004) rotates band i of a head -- a pair of channels --
by the phase phi_i(p) = g(p) * theta_i. A spec fixes everything that decides those phases and how channels pair:

- the frequency table theta_i: ``base ** (-2i / rotary_dim)`` (seed 004 section 11.1), or an explicit ``freqs``
  table, optionally thinned by p-RoPE (Barbero et al. 2025, "Round and Round We Go!", arXiv 2410.06205, seed 001):
  keep the highest fraction ``p`` of the frequencies, set the others to zero (those channels carry no position);
- partial rotation: only the first ``rotary_dim`` channels of a head rotate, the rest pass through unchanged
  (GPT-NeoX, Phi);
- the phase map g (``scaling``; see :mod:`ropekit.scaling`), None meaning g(p) = p;
- the channel layout: ``"half"`` pairs channel i with i + rotary_dim/2 (HF ``rotate_half``, GPT-NeoX, Llama in
  HF format); ``"interleaved"`` pairs 2i with 2i + 1 (GPT-J, Meta's original Llama, the seed's matrices).

Shapes: r = rotary_dim, n = r // 2 bands.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

import torch

from ropekit.axes import AxisMap
from ropekit.integers import INT64_SPAN, as_int, as_real, past_float64, shown
from ropekit.scaling import Scaling
from ropekit.scaling.base import MAX_DIM
from ropekit.spec_freqs import _freq_table, _kept_bands
from ropekit.spec_freqs import _frequencies_cpu as _frequencies_cpu  # noqa: PLC0414  # ropekit.phases reads it

__all__ = ["LAYOUTS", "Layout", "RopeSpec"]

Layout = Literal["half", "interleaved"]
LAYOUTS: tuple[str, ...] = ("half", "interleaved")
_DEFAULT_BASE = 10_000.0


def check_seq_len(seq_len: object, name: str = "seq_len", *, optional: bool = True) -> int | None:
    """None (when ``optional``), or a sequence length: an integer in [1, 2**63] (bool refused; integer-likes such
    as numpy ints and 0-d integer tensors accepted, returned as a Python int).

    Dynamic phase maps read it; a float, 0 or a negative length would silently mean "unscaled". Positions are
    int64, so a length (the largest position + 1) above 2**63 is refused too.

    Raises:
        TypeError: not an integer (bool, float, str, ...), naming ``name`` and the value.
        ValueError: an integer < 1 or > 2**63, naming ``name`` and the value.
    """
    if seq_len is None and optional:
        return None
    # A Python int, or a traced symbolic length (``q.shape[1]`` under torch.compile: dynamo reports a SymInt's type
    # as int, so an isinstance test for SymInt misses it): compared, never converted -- operator.index would pin a
    # symbolic length to its value (one graph per length); the comparisons are range guards, not specialisations.
    if (type(seq_len) is int or isinstance(seq_len, torch.SymInt)) and 1 <= seq_len <= INT64_SPAN:
        return seq_len  # type: ignore[return-value]  # a SymInt stands for an int in traced code
    want = f"{name} must be an int >= 1 (a sequence length){' or None' if optional else ''}"
    n = as_int(seq_len)
    if n is None:
        raise TypeError(f"{want}, got {shown(seq_len)}")
    if n < 1:
        raise ValueError(f"{want}, got {shown(seq_len)}")
    if n > INT64_SPAN:
        raise ValueError(
            f"{name} must be an int in [1, 2**63] (a sequence length: positions are int64), got {shown(seq_len)}"
        )
    return n


#: largest head_dim (and so rotary_dim) a spec accepts
_MAX_HEAD_DIM = MAX_DIM


@dataclass(frozen=True)
class RopeSpec:
    """Frozen, hashable description of a RoPE configuration.

    Args:
        head_dim: channels per attention head (positive, even).
        base: frequency base B in theta_i = B^(-2i / rotary_dim); finite and > 1. Llama 2 uses 1e4, Llama 3 5e5.
        rotary_dim: leading channels that rotate (even, 2 <= rotary_dim <= head_dim); None means head_dim.
            After construction the field holds the resolved value.
        layout: "half" (i pairs with i + rotary_dim/2) or "interleaved" (2i pairs with 2i + 1).
        freqs: explicit frequency table theta_0..theta_{n-1} (finite, >= 0), replacing the base formula. ``base``
            must then be left at its default.
        p: p-RoPE fraction in (0, 1]: the floor(p * n) highest frequencies are kept, the others set to 0.
        scaling: phase map (e.g. ``ropekit.scaling.Linear(8)``); None is plain RoPE.
        axes: multi-axis band assignment (:class:`ropekit.axes.AxisMap`, M-RoPE / 2-D / 3-D RoPE) or None for
            1-D RoPE. Band j then turns at the position of axis ``axes.slots[j]``; positions come as
            [n_axes, *P] (:func:`ropekit.axis_tables.apply_rope_axes`); 1-D positions are refused, since a
            missing axis is far more likely a mistake than a choice. Text tokens give every axis the same
            position (``pos.expand(n_axes, *pos.shape)``), which is plain RoPE with this spec's frequencies.

    Raises:
        ValueError: naming the field, for any invalid value.

    Example:
        >>> spec = RopeSpec(head_dim=8)
        >>> spec.inv_freq(dtype=torch.float64).tolist()
        [1.0, 0.1, 0.01, 0.001]
    """

    head_dim: int
    base: float = _DEFAULT_BASE
    rotary_dim: int | None = None
    layout: Layout = "half"
    freqs: tuple[float, ...] | None = None
    p: float = 1.0
    scaling: Scaling | None = field(default=None)
    axes: AxisMap | None = field(default=None, repr=False)  # repr below: a 1-D spec prints as before

    def __post_init__(self) -> None:
        hd = as_int(self.head_dim)
        if hd is None or not 0 < hd <= _MAX_HEAD_DIM or hd % 2:
            big = " (at most 2**31 - 2)" if hd is not None and hd > _MAX_HEAD_DIM else ""
            raise ValueError(
                f"RopeSpec.head_dim must be a positive even integer{big}, got {shown(self.head_dim)}"
            )
        object.__setattr__(self, "head_dim", hd)
        rd = hd if self.rotary_dim is None else as_int(self.rotary_dim)
        if rd is None or rd <= 0 or rd % 2 or rd > hd:
            raise ValueError(
                f"RopeSpec.rotary_dim must be an even integer in [2, head_dim={hd}] (or None), "
                f"got {shown(self.rotary_dim)}"
            )
        object.__setattr__(self, "rotary_dim", rd)
        b = as_real(self.base)
        if b is None or b <= 1.0:
            raise ValueError(
                f"RopeSpec.base must be a finite number > 1{past_float64(self.base)}, got {shown(self.base)}"
            )
        object.__setattr__(self, "base", b)
        if self.layout not in LAYOUTS:
            raise ValueError(f"RopeSpec.layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.freqs is not None:
            table = _freq_table(self.freqs, rd // 2)
            if self.base != _DEFAULT_BASE:
                raise ValueError(
                    f"RopeSpec.base={self.base!r} has no effect when freqs is given; leave base at its default"
                )
            object.__setattr__(self, "freqs", table)
        pp = as_real(self.p)
        if pp is None or not 0.0 < pp <= 1.0:
            raise ValueError(
                f"RopeSpec.p must be a number in (0, 1]{past_float64(self.p)}, got {shown(self.p)}"
            )
        object.__setattr__(self, "p", pp)
        if _kept_bands(pp, rd // 2) == 0:
            raise ValueError(
                f"RopeSpec.p={shown(self.p)} keeps floor(p * {rd // 2}) = 0 of the {rd // 2} bands; use p >= {1 / (rd // 2):.6g}"
            )
        if self.scaling is not None:
            if not isinstance(self.scaling, Scaling):
                raise ValueError(
                    f"RopeSpec.scaling must be a ropekit.scaling.Scaling (e.g. Linear(factor)) or None, "
                    f"got {self.scaling!r}"
                )
            if self.freqs is not None and self.scaling.needs_base:
                raise ValueError(
                    f"RopeSpec.scaling={type(self.scaling).__name__} is defined from the base and cannot apply to "
                    "an explicit freqs table"
                )
            self.scaling.check(rd // 2, rd)
        if self.axes is not None:
            if not isinstance(self.axes, AxisMap):
                raise ValueError(f"RopeSpec.axes must be a ropekit.axes.AxisMap or None, got {self.axes!r}")
            if self.axes.n_bands != rd // 2:
                raise ValueError(
                    f"RopeSpec.axes covers {self.axes.n_bands} bands ({self.axes!r}) but rotary_dim={rd} has "
                    f"{rd // 2}; the sections must sum to rotary_dim // 2"
                )
            # the same spec without its axis map, made once: dataclasses.replace does not trace in torch.compile
            object.__setattr__(self, "_one_axis", replace(self, axes=None))

    def __repr__(self) -> str:
        body = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
        if self.axes is not None:
            body += f", axes={self.axes!r}"
        return f"{type(self).__name__}({body})"

    @property
    def n_axes(self) -> int:
        """Number of position axes: 1 for a 1-D spec, ``axes.n_axes`` otherwise."""
        return 1 if self.axes is None else self.axes.n_axes

    # ---------------------------------------------------------------- derived sizes
    @property
    def n_bands(self) -> int:
        """Number of rotating 2-D bands, rotary_dim // 2 (p-RoPE's zero bands included)."""
        return int(self.rotary_dim) // 2  # type: ignore[arg-type]

    @property
    def n_positional_bands(self) -> int:
        """Bands whose frequency is not zeroed by p-RoPE."""
        return _kept_bands(self.p, self.n_bands)

    @property
    def dynamic(self) -> bool:
        """True when the frequencies depend on the sequence length (dynamic scaling schemes)."""
        return bool(self.scaling is not None and self.scaling.dynamic)

    @property
    def attention_factor(self) -> float:
        """Factor multiplying cos and sin (so logits scale by its square, as in HF transformers); 1.0 unscaled."""
        return 1.0 if self.scaling is None else float(self.scaling.attention_factor)

    # ---------------------------------------------------------------- frequencies
    def frequencies(
        self, seq_len: int | None = None, *, device: torch.device | str | None = None
    ) -> torch.Tensor:
        """Effective frequencies theta_i after p-RoPE and the phase map, in float64.

        Phases are formed from these (never from a float32 copy), which is what keeps ropekit's phases exact.

        Args:
            seq_len: current sequence length; only dynamic phase maps use it.
            device: where to put the result (computed on the CPU).

        Returns:
            [n] float64 tensor.
        """
        seq_len = check_seq_len(seq_len)
        fn = (
            _frequencies_cpu.__wrapped__ if torch.compiler.is_compiling() else _frequencies_cpu
        )  # dynamo: no cache
        out = fn(self, seq_len).clone()
        return out if device is None else out.to(device)

    def inv_freq(
        self,
        seq_len: int | None = None,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """The theta table ("inverse frequencies" in HF's naming), rounded once from float64 to ``dtype``.

        Args:
            seq_len: current sequence length; only dynamic phase maps use it.
            dtype: float32 (default, what HF stores) or float64. Low-precision dtypes are refused: a bf16 table
                has a relative error of 4e-3, which wrecks phases beyond a few thousand positions.
            device: target device.

        Returns:
            [n] tensor of ``dtype``.
        """
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"inv_freq dtype must be torch.float32 or torch.float64, got {dtype}")
        seq_len = check_seq_len(seq_len)
        out = _frequencies_cpu(self, seq_len).to(dtype=dtype, copy=True)  # callers must not mutate the cache
        return out if device is None else out.to(device)

    def keys_stale(self, cached_len: int, new_len: int) -> bool:
        """True when keys cached at length ``cached_len`` must be re-rotated for ``new_len`` (dynamic schemes).

        See :func:`ropekit.cache.rerotate_keys`.

        Raises:
            TypeError: a length is not an integer (bool and float included; numpy integers are lengths).
            ValueError: a length is < 1 or > 2**63 (lengths are sequence lengths).
        """
        from ropekit.cache import keys_stale

        return keys_stale(self, cached_len, new_len)

    # ---------------------------------------------------------------- Hugging Face interop
    @classmethod
    def from_hf(
        cls, config: Any, *, layer_type: str | None = None, strict: bool = True, layout: str | None = None
    ) -> RopeSpec:
        """Build a spec from a transformers config object or a config.json dict (v4 and v5 schemas).

        Args:
            config: ``PretrainedConfig`` or dict (with ``model_type`` for family-specific legacy keys).
            layer_type: for per-layer-type configs (Gemma 3 "sliding_attention" / "full_attention", ...).
            strict: raise on what transformers only warns about; False accepts it with a warning (a bool).
            layout: override the family's channel pairing (default: from ``model_type``, else "half").

        Raises:
            ValueError: naming the key and value (missing/unknown/null keys, out-of-range values, a non-integer
                ``head_dim`` or ``max_position_embeddings``, unknown ``layer_types`` entries, ``layer_type=`` for a
                config with one set of RoPE parameters, a top-level key that is a near-miss of a RoPE key such as
                ``rope_scalling``, with a did-you-mean hint, ...); ``strict`` not a bool. With ``strict=False``
                what transformers accepts (unknown or misspelt keys included) is a warning instead.
        """
        from ropekit.hf.config import spec_from_hf

        return spec_from_hf(config, layer_type=layer_type, strict=strict, layout=layout)

    def to_hf(self, schema: Literal["v5", "v4"] = "v5", *, model_type: str | None = None) -> dict[str, Any]:
        """The transformers config fragment; ``RopeSpec.from_hf(spec.to_hf(), layout=spec.layout) == spec``.

        The fragment has no channel layout (transformers takes it from the model family, ``from_hf`` from
        ``model_type``), so pass ``layout=`` back: without it an ``"interleaved"`` spec reads back as ``"half"``.
        ``partial_rotary_factor`` is written as a float that transformers' own ``int(head_dim * factor)`` (for
        p-RoPE, ``int(factor * head_dim // 2)`` bands) maps back to this spec's rotary_dim (kept bands) exactly;
        a p-RoPE fraction written that way reads back as kept bands / (head_dim // 2). A full-rotation spec writes
        no factor: merged into a config of a family whose config class rotates less by default
        (``ropekit.hf.class_defaults.DEFAULT_PARTIAL``: GLM, Phi, StableLM, ...), add ``partial_rotary_factor: 1.0``.

        Only the RoPE keys: the spec does not record the model's context length (except DynamicNTK's), so the
        fragment has no ``max_position_embeddings`` for the other schemes. Merge it into a config that sets one:
        transformers' default (2048) is below e.g. Llama 3.1's ``original_max_position_embeddings`` (8192), a
        config that ``from_hf`` then refuses.

        Args:
            schema: "v5" (default) writes ``{"head_dim", "rope_parameters", ...}``; "v4" writes transformers 4.x's
                ``{"head_dim", "rope_theta", "rope_scaling", ["partial_rotary_factor"], ...}`` (see
                :func:`ropekit.hf.config.spec_to_hf`).
            model_type: the family of the config the fragment goes into, where its keys differ (``"phimoe"``:
                ``short_mscale`` / ``long_mscale`` in place of ``attention_factor``); see
                :func:`ropekit.hf.config.spec_to_hf`. None (default) writes the generic fragment.

        Raises:
            ValueError: naming ``schema`` when it is neither; naming ``model_type`` when it is not a string (or
                None), or when that family cannot express the spec; for specs the schema cannot express.
        """
        from ropekit.hf.config import spec_to_hf

        return spec_to_hf(self, schema=schema, model_type=model_type)

    def pairs(self) -> tuple[list[int], list[int]]:
        """Channel indices (x, y) of each band: band i rotates (x_i, y_i) -> (x cos - y sin, y cos + x sin)."""
        n = self.n_bands
        if self.layout == "half":
            return list(range(n)), list(range(n, 2 * n))
        return list(range(0, 2 * n, 2)), list(range(1, 2 * n, 2))


def require_spec(spec: object, name: str = "spec") -> RopeSpec:
    """``spec`` if it is a :class:`RopeSpec`, else TypeError naming ``name`` and what was given (the functions that
    take a spec call this first, so a wrong argument is not an AttributeError from inside them)."""
    if not isinstance(spec, RopeSpec):
        raise TypeError(f"{name} must be a ropekit.RopeSpec, got {type(spec).__name__}")
    return spec
