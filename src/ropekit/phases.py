# SPDX-License-Identifier: MIT
"""Exact phases: cos and sin of phi_i(p) = p * theta_i at any position.

The common recipe (HF transformers, Megatron, TransformerEngine, torchtune) forms ``p * theta_i`` in float32.
Both the float32 rounding of theta_i and of the product cost about half an ulp of the angle, so the phase error
grows linearly with the position: ~7e-3 rad at 1e5, ~6e-2 at 1e6, ~0.8 at 1e7. Even one float64 product loses
1.7e-5 rad at 2^40 and 0.6 rad at 2^53. ropekit instead (``docs/precision.md`` has the measured tables)

1. takes the spec's float64 frequencies theta_i (for scaling schemes the scaled float64 frequency, e.g.
   ``fl(theta_i / s)`` for linear scaling: "exact" means exact for that float64 number),
2. reduces ``p * theta_i`` modulo one turn with an exact split of p and theta (:mod:`ropekit.reduction`), within
   ~3e-15 rad of the true phase for every int64 position and every float position below 2^63 in magnitude,
3. takes cos and sin in float64 of the reduced angle (in [-pi, pi]), multiplies by the attention factor, and
   rounds once to float32.

Everything is elementwise (never a matmul, so TF32 and autocast cannot touch it) and branch-free, so it traces
under ``torch.compile(fullgraph=True)``. Devices without float64 (Apple MPS) compute on the CPU.

Float (continuous) positions on the CPU, eagerly, take one call of ropekit's C kernel instead of ~20 PyTorch ops
(``kernels/rope_phase.h``): the same reduction, operation for operation (the same turns), then float64 cos/sin of
the reduced angle, the attention factor and one rounding to float32: the guarantees above. Its cos/sin are within
1.3e-16 of those of the exact reduced angle (torch's: 3.5e-16), so float64 tables differ from the PyTorch path's in
the last bits (~40% of entries measured); float32 tables matched in 2.5 million entries. Traced calls, torch.func /
forward-AD / dispatch-mode calls, other devices and a process without the kernel keep the PyTorch path; integer
positions always do (the shared table cache's rows are its values).

Shapes: P any position shape, n = rotary_dim // 2 bands.
"""

from __future__ import annotations

import ctypes
import math
import operator

import torch
import torch.autograd.forward_ad as _fwad

from ropekit.kernels import cpu_build
from ropekit.reduction import FLOAT_POSITION_BOUND, band_constants, reduced_turns
from ropekit.spec import RopeSpec, _frequencies_cpu, check_seq_len, require_spec

__all__ = ["FLOAT32_POSITION_BOUND", "FLOAT_POSITION_BOUND", "INT_DTYPES", "check_positions", "rope_tables"]

_TWO_PI = 2.0 * math.pi
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
_INT_DTYPES = INT_DTYPES
_EXACT_FLOAT_DTYPES = (torch.float32, torch.float64)
#: float32 positions must satisfy |x| < FLOAT32_POSITION_BOUND: past 2^24 float32 cannot hold every integer
FLOAT32_POSITION_BOUND = 2.0**24
_UNIQUE_THRESHOLD = 4096  # above this many integer positions, tables are built once per distinct position


def check_positions(positions: object, name: str = "positions") -> torch.Tensor:
    """Validate a positions argument and return it; raises before anything is computed.

    Accepted: integer tensors (every int64 value: phases are exact over the whole range), float64 tensors of
    finite values with magnitude below 2^63 (:data:`FLOAT_POSITION_BOUND`; continuous positions such as
    time-series timestamps, exact for the value float64 represents), and float32 tensors of finite values with
    magnitude below 2^24 (:data:`FLOAT32_POSITION_BOUND`: past it float32 cannot hold every integer, so the
    positions were already rounded before they arrived -- 16777217 reads as 16777216; pass int64, or float64 for
    fractional positions). Refused: bool, float16/bfloat16 (they cannot represent positions above 256 or 2048
    exactly -- rotary-embedding-torch's bug, pitfalls item 50), complex, non-finite or too large float values,
    and positions that require grad (ropekit does not differentiate with respect to positions). Eagerly the
    value check of float positions raises a ValueError naming the largest magnitude (one ``aminmax``; on CUDA
    that reads two numbers back, a host sync for float positions only: integer positions have no value check).
    Under ``torch.compile`` it runs on the device (``torch._assert_async``: a RuntimeError naming the rule when
    the graph runs, no host sync).
    """
    if not isinstance(positions, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of integer or float32/float64 positions, got {type(positions).__name__}"
        )
    dt = positions.dtype
    if dt not in _INT_DTYPES and dt not in _EXACT_FLOAT_DTYPES:
        if dt in (torch.float16, torch.bfloat16):
            hint = " (low-precision floats cannot represent most positions exactly: pass integers or float32/float64)"
        elif not dt.is_floating_point and not dt.is_complex and dt != torch.bool:
            hint = " (unsigned integers wider than 8 bits are not read: convert to int64)"
        else:
            hint = ""
        accepted = ", ".join(str(d).removeprefix("torch.") for d in (*_INT_DTYPES, *_EXACT_FLOAT_DTYPES))
        raise ValueError(f"{name} must have one of the dtypes {accepted}, got {dt}{hint}")
    if positions.requires_grad:
        raise ValueError(
            f"{name} requires grad, but ropekit does not differentiate with respect to positions"
        )
    if dt in _EXACT_FLOAT_DTYPES and positions.device.type != "meta" and positions.numel():
        if torch.compiler.is_compiling():
            _assert_float_positions(
                positions, name
            )  # traced: on the device when the graph runs, no host sync
            return positions
        vals = _unwrapped(positions)  # under vmap / grad: the values of every batch entry
        lo, hi = torch.aminmax(vals)  # one pass; nan propagates to both
        mag = max(-float(lo), float(hi))
        if not mag < FLOAT_POSITION_BOUND:  # nan and +-inf too
            bad = vals[~(vals.abs() < FLOAT_POSITION_BOUND)].flatten()[0].item()
            raise ValueError(
                f"{name} must be finite with magnitude below 2**63 = {FLOAT_POSITION_BOUND:.6g} "
                f"(the integer part must fit in int64 for exact phases), found {bad!r}"
            )
        if dt == torch.float32 and mag >= FLOAT32_POSITION_BOUND:
            raise ValueError(
                f"{name} are float32 with magnitude up to {mag:.9g} >= 2**24 = 16777216, where float32 cannot "
                "represent every integer (16777217 reads as 16777216): the positions were already rounded; pass "
                "int64 positions, or float64 for fractional ones"
            )
    return positions


def _unwrapped(positions: torch.Tensor) -> torch.Tensor:
    """The plain tensor under torch.func wrappers (vmap's batched tensors, grad's tracking tensors): its values can
    be read on the host, which a wrapper refuses (``.item()`` under vmap)."""
    fn = torch._C._functorch
    while fn.is_batchedtensor(positions) or fn.is_gradtrackingtensor(positions):
        positions = fn.get_unwrapped(positions)
    return positions


def _assert_float_positions(positions: torch.Tensor, name: str) -> None:
    """:func:`check_positions`' value rules for float positions as device asserts (``torch._assert_async``, constant
    messages): no host sync, for traced calls. The 2**63 rule is asserted first (its message stays
    that of non-finite float32 positions too)."""
    mag = positions.abs()
    torch._assert_async(
        (mag < FLOAT_POSITION_BOUND).all(),  # False for nan and +-inf too
        f"{name} must be finite with magnitude below 2**63 (float positions, checked on the device)",
    )
    if positions.dtype == torch.float32:
        torch._assert_async(
            (mag < FLOAT32_POSITION_BOUND).all(),
            f"{name} are float32 with magnitude >= 2**24, where float32 cannot represent every integer: pass int64 "
            "positions, or float64 for fractional ones (checked on the device)",
        )


def _compute_device(device: torch.device) -> torch.device:
    return torch.device("cpu") if device.type == "mps" else device


def _constants_eager(spec: RopeSpec, seq_len: int | None) -> tuple[tuple[float, ...], ...]:
    """Exact per-band reduction constants (computed once per frequency table; a constant under torch.compile)."""
    return band_constants(tuple(_frequencies_cpu(spec, seq_len).tolist()))


#: specs whose constants a trace has read, by ``id``: kept alive for good, so that the id a compiled graph was
#: specialised on (dynamo's ID_MATCH guard) can never be taken by another object while that graph may run
_TRACED_SPECS: dict[int, RopeSpec] = {}


def _traced_constants(spec_id: int, seq_len: int | None) -> tuple[tuple[tuple[float, ...], ...], float]:
    """(band constants, attention factor) of the spec whose ``id`` is ``spec_id``: constant-folded by dynamo.

    The spec crosses into the folded call as its ``id`` (a Python int that dynamo makes a constant and guards with
    ID_MATCH), not as its fields: under ``torch.compile(dynamic=True)`` dynamo turns every float it reads from an
    object (``spec.base``, ``spec.p``, a scaling's factor) into a symbolic graph input, which can be neither
    folded nor passed on as a constant; and torch 2.11's dynamo cannot hand the frozen dataclass itself to a
    folded function ("can't reconstruct arbitrary frozen dataclass instances"). The spec object is alive while its
    frame is traced (the traced code holds it), so its id names it; it is then kept in :data:`_TRACED_SPECS`.
    Called for real (not folded) by non-dynamo tracers (``torch.export`` non-strict), with the same result.
    """
    spec = _TRACED_SPECS.get(spec_id)
    if spec is None:
        obj = ctypes.cast(spec_id, ctypes.py_object).value  # the live object of that id (see above)
        if not isinstance(obj, RopeSpec):
            raise TypeError(f"spec must be a ropekit.RopeSpec, got {type(obj).__name__}")
        spec = _TRACED_SPECS[spec_id] = obj
    return _constants_eager(spec, seq_len), spec.attention_factor


# Marked as dynamo's ``assume_constant_result`` does (it only sets this attribute), without importing
# torch._dynamo: that import costs ~1.2 s and `import ropekit` must stay cheap. Under torch.compile the constants
# are then traced as a constant of (spec, seq_len), not as data-dependent Python.
_traced_constants._dynamo_marked_constant = True  # type: ignore[attr-defined]


def _traced_seq_len(spec: RopeSpec, seq_len: int | None) -> int | None:
    """The ``seq_len`` a traced call folds its constants at: None for a static spec (its frequencies do not depend
    on it, so a symbolic length stays symbolic), else the length as a Python int (``operator.index`` specialises a
    symbolic one: a dynamic spec's frequencies are a function of its value, one graph per length)."""
    if seq_len is None or not spec.dynamic:
        return None
    return operator.index(seq_len)


_CONST_TENSORS: dict[tuple[object, ...], torch.Tensor] = {}


def band_constant_tensor(spec: RopeSpec, seq_len: int | None, device: torch.device) -> torch.Tensor:
    """[7, n] float64 constants of :func:`ropekit.reduction.reduced_turns` for ``spec`` on ``device``."""
    if torch.compiler.is_compiling():
        consts = _traced_constants(id(spec), _traced_seq_len(spec, seq_len))[0]
        return torch.tensor(consts, dtype=torch.float64, device=device)
    key = (spec, seq_len, device)
    t = _CONST_TENSORS.get(key)
    if t is None:
        if len(_CONST_TENSORS) >= 256:
            _CONST_TENSORS.clear()
        consts = _constants_eager(spec, seq_len)
        t = _CONST_TENSORS[key] = torch.tensor(consts, dtype=torch.float64, device=device)
    return t


def _tables_from_angles(
    pos64: torch.Tensor, freqs64: torch.Tensor, factor: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin of ``pos64 * freqs64`` for any float64 frequency table (e.g. a difference of two, used by
    :func:`ropekit.cache.rerotate_keys`), with the same exact reduction; eager only (reads the frequencies)."""
    consts = torch.tensor(band_constants(tuple(freqs64.tolist())), dtype=torch.float64, device=pos64.device)
    return _tables_from_positions(pos64, consts, factor, dtype)


def _tables_from_positions(
    pos: torch.Tensor, consts: torch.Tensor, factor: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    angle = reduced_turns(pos, consts) * _TWO_PI  # [*P, n] float64 in [-pi, pi], exact to ~3e-15 rad
    cos, sin = torch.cos(angle), torch.sin(angle)
    if factor != 1.0:
        cos, sin = cos * factor, sin * factor
    return cos.to(dtype), sin.to(dtype)


#: (position, band) pairs per thread of the C tables (about 0.1 ms of work: a decode call stays on one thread)
_KERNEL_GRAIN = 1 << 15


def _kernel_tables(
    pos: torch.Tensor, consts: torch.Tensor, factor: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The tables of float positions [*P] on the CPU from ropekit's C kernel (``kernels/rope_phase.h``: the same
    exact reduction, bit for bit, and cos/sin within ~1.3e-16), or None where the PyTorch path must run: integer
    positions (their rows are the shared cache's, kept bit-identical to this module's PyTorch path), traced calls,
    tensors a kernel cannot read through a pointer (torch.func and forward-AD wrappers, subclasses such as fake
    tensors, a dispatch mode recording the ops), or no kernel (no compiler, ``ROPEKIT_DISABLE_CPU_KERNEL=1``)."""
    if (
        pos.dtype not in _EXACT_FLOAT_DTYPES
        or pos.device.type != "cpu"
        or type(pos) is not torch.Tensor
        or torch.compiler.is_compiling()
        or torch._C._are_functorch_transforms_active()
        or _fwad._current_level >= 0
        or torch._C._len_torch_dispatch_stack() > 0
    ):
        return None
    lib = cpu_build.load()
    if lib is None:
        return None
    p = pos.contiguous().resolve_neg()  # the values, not a lazily negated view's storage
    n, m = consts.shape[-1], p.numel()
    cos = torch.empty((*p.shape, n), dtype=dtype)
    sin = torch.empty_like(cos)
    threads = 1 if m * n < 2 * _KERNEL_GRAIN else min(torch.get_num_threads(), m * n // _KERNEL_GRAIN)
    f32, f64 = p.dtype == torch.float32, dtype == torch.float64
    bad = lib.ropekit_phase_tables(
        p.data_ptr(), f32, m, consts.data_ptr(), n, factor, cos.data_ptr(), sin.data_ptr(), f64, threads
    )
    if bad >= 0:  # check_positions refuses these first: never reached through the public entry points
        raise ValueError(
            f"positions must be finite with magnitude below 2**63, found {p.reshape(-1)[bad].item()!r}"
        )
    return cos, sin


def rope_tables(
    positions: torch.Tensor,
    spec: RopeSpec,
    *,
    seq_len: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact cos/sin tables for the given positions.

    Args:
        positions: [*P] integer or float32/float64 positions (see :func:`check_positions`).
        spec: the RoPE spec (frequencies, phase map, attention factor).
        seq_len: current sequence length for dynamic phase maps (default: max position + 1).
        dtype: float32 (default) or float64 tables.
        device: where the tables go (default: the positions' device).

    Returns:
        (cos, sin), each [*P, n] of ``dtype``, already multiplied by ``spec.attention_factor``; fresh tensors.
        float32 tables of integer positions of a static spec are read from a cache shared per spec and device
        (:func:`ropekit.table_cache.shared_cache`), bit-identical to computing them.
    """
    spec = require_spec(spec)
    seq_len = check_seq_len(seq_len)  # a traced symbolic length stays symbolic
    _check_meta_device(positions, device)
    if spec.axes is not None:  # multi-axis spec: positions [n_axes, *P], band j at its axis's position
        from ropekit.axis_tables import axis_tables

        return axis_tables(positions, spec, seq_len=seq_len, dtype=dtype, device=device)
    if isinstance(positions, torch.Tensor) and positions.requires_grad:  # learned / continuous positions
        from ropekit.positions_grad import position_grad_tables

        return position_grad_tables(positions, spec, seq_len=seq_len, dtype=dtype, device=device)
    check_positions(positions)
    if (
        dtype == torch.float32
        and positions.dtype in _INT_DTYPES
        and not spec.dynamic
        and not torch.compiler.is_compiling()
    ):
        from ropekit.table_cache import shared_cache  # the cache is built from this module

        pos = positions if device is None else positions.to(device)
        if pos.device.type == "cuda":  # one Triton launch, no host sync (the cache's range check would sync)
            from ropekit.rotation.dispatch import device_tables

            tables = device_tables(pos, spec)
            if tables is not None:
                return tables
        cache = shared_cache(spec, pos.device)
        hit = None if cache is None else cache.lookup(pos)
        if cache is not None and hit is not None:  # row views of the packed cache (or of a gather from it):
            cos, sin = hit  # plain contiguous copies, which the caller may write to
            return cos.clone(memory_format=torch.contiguous_format), sin.clone(
                memory_format=torch.contiguous_format
            )
    return _rope_tables(positions, spec, seq_len=seq_len, dtype=dtype, device=device)


def _check_meta_device(positions: object, device: torch.device | str | None) -> None:
    """Meta positions have no values: their tables can only be meta tables (``device=None`` or a meta device)."""
    if not isinstance(positions, torch.Tensor) or positions.device.type != "meta" or device is None:
        return
    if torch.device(device).type != "meta":
        raise ValueError(
            f"positions are on the meta device (no values) but device={device!r} asks for tables on "
            f"{torch.device(device)}; pass positions with values, or device='meta' for shape-only tables"
        )


def _rope_tables(
    positions: torch.Tensor,
    spec: RopeSpec,
    *,
    seq_len: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rope_tables` for positions the caller has already checked (no second scan, no extra sync)."""
    if dtype not in _EXACT_FLOAT_DTYPES:
        raise ValueError(f"rope_tables dtype must be torch.float32 or torch.float64, got {dtype}")
    out_device = torch.device(device) if device is not None else positions.device
    n = spec.n_bands
    _check_meta_device(positions, device)  # never meta tables for another device
    if out_device.type == "meta" or positions.device.type == "meta":
        shape = (*positions.shape, n)
        return (
            torch.empty(shape, dtype=dtype, device="meta"),
            torch.empty(shape, dtype=dtype, device="meta"),
        )
    if spec.dynamic and seq_len is None and torch.compiler.is_compiling():
        raise ValueError(
            f"spec with dynamic scaling {type(spec.scaling).__name__} needs seq_len under torch.compile "
            "(its frequencies depend on the largest position, a data-dependent value)"
        )
    if spec.dynamic and seq_len is None and positions.numel():
        seq_len = int(positions.max().item()) + 1
    work = _compute_device(out_device)
    consts = band_constant_tensor(spec, seq_len, work)
    # traced: the folded constant, never a float read from the spec (a symbolic input under dynamic=True)
    factor = _traced_constants(id(spec), None)[1] if torch.compiler.is_compiling() else spec.attention_factor
    fast = _kernel_tables(positions, consts, factor, dtype) if work.type == "cpu" else None
    if fast is not None:  # float positions on the CPU: one C call
        return fast if out_device.type == "cpu" else (fast[0].to(out_device), fast[1].to(out_device))
    with torch.autocast(device_type=work.type, enabled=False):
        pos = positions.to(work)
        if not torch.compiler.is_compiling() and pos.dtype in _INT_DTYPES and pos.numel() > _UNIQUE_THRESHOLD:
            uniq, inverse = torch.unique(pos, return_inverse=True)
            cos, sin = _tables_from_positions(uniq, consts, factor, dtype)
            cos, sin = cos[inverse], sin[inverse]
        else:
            cos, sin = _tables_from_positions(pos, consts, factor, dtype)
    return cos.to(out_device), sin.to(out_device)
