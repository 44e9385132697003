# SPDX-License-Identifier: MIT
"""The fused CPU kernel's C interface as ctypes sees it: the ABI check and every entry point's signature.

A library whose ``ropekit_abi_version()`` is not :data:`~ropekit.kernels.build_key.ABI_VERSION` (a stale or foreign
build) is refused before any other symbol is looked up.

Shapes: none (the entry points take raw pointers, sizes and strides; ``ropekit.rotation.cpu_backend`` calls them).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from ropekit.kernels.build_key import ABI_VERSION

__all__: list[str] = []


def _setup(lib: ctypes.CDLL) -> ctypes.CDLL:
    # the ABI first: a stale or foreign library fails here, before its symbols are looked up
    lib.ropekit_abi_version.restype = ctypes.c_int
    if (abi := lib.ropekit_abi_version()) != ABI_VERSION:
        raise RuntimeError(f"stale kernel library (ABI {abi}, expected {ABI_VERSION})")
    I, P = ctypes.c_int64, ctypes.c_void_p
    for name in ("ropekit_rope_f32", "ropekit_rope_bf16", "ropekit_rope_f16"):
        fn = getattr(lib, name)
        fn.argtypes = [
            P,
            P,
            I,
            I,
            I,
            I,
            I,
            I,
            I,
            I,
            I,
            I,
            P,
            P,
            I,
            I,
            I,
            I,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
        ]
        fn.restype = None
    for name in ("ropekit_plan_f32", "ropekit_plan_bf16", "ropekit_plan_f16"):
        fn = getattr(lib, name)
        fn.argtypes = [P, P, P, P, P, P, P]
        fn.restype = None
    for name in ("ropekit_plan_gather_f32", "ropekit_plan_gather_bf16", "ropekit_plan_gather_f16"):
        fn = getattr(lib, name)
        fn.argtypes = [P, P, P, P, P, I, P, I, P]
        fn.restype = ctypes.c_int64
    for name in ("ropekit_plan_axes_f32", "ropekit_plan_axes_bf16", "ropekit_plan_axes_f16"):
        fn = getattr(lib, name)
        fn.argtypes = [P, P, P, P, P, I, P, I, I, P, P, P]
        fn.restype = ctypes.c_int64
    for name in ("ropekit_cache_write_f32", "ropekit_cache_write_bf16", "ropekit_cache_write_f16"):
        fn = getattr(lib, name)
        fn.argtypes = [P, P, P, P, P, P, P, P, P, I, P]
        fn.restype = ctypes.c_int64
    lib.ropekit_check_slots.argtypes = [P, I, I, P]
    lib.ropekit_check_slots.restype = ctypes.c_int
    lib.ropekit_check_offsets.argtypes = [P, I, I, I, P]
    lib.ropekit_check_offsets.restype = ctypes.c_int
    lib.ropekit_axis_gather.argtypes = [P, I, I, P, I, I, P, P, ctypes.c_int]
    lib.ropekit_axis_gather.restype = ctypes.c_int64
    C, D = ctypes.c_int, ctypes.c_double  # float positions' tables (rope_phase.h)
    lib.ropekit_phase_tables.argtypes = [P, C, I, P, I, D, P, P, C, C]
    lib.ropekit_phase_tables.restype = ctypes.c_int64
    return lib


def _open(path: Path) -> ctypes.CDLL:
    """Load the library at ``path`` and declare its entry points (RuntimeError for a stale or foreign ABI)."""
    return _setup(ctypes.CDLL(str(path)))
