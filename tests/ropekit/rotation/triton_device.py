"""Where the Triton tests run, shared by the test modules that import it: on CUDA when a device is present, else
on the CPU through TRITON_INTERPRET=1 (tests/conftest.py sets it); importing this skips the importing module where
neither applies or Triton is absent."""

from __future__ import annotations

import os

import pytest
import torch

triton_backend = pytest.importorskip("ropekit.rotation.triton_backend")
if not triton_backend.available():
    pytest.skip("triton is not installed", allow_module_level=True)
from ropekit.rotation import triton_positions

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
if not CUDA and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no CUDA device and TRITON_INTERPRET is not set", allow_module_level=True)

__all__ = ["CUDA", "DEVICE", "triton_backend", "triton_positions"]
