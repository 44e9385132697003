"""Shared test configuration: deterministic seeds and a bounded, derandomized Hypothesis profile."""

from __future__ import annotations

import os

import torch

if (
    not torch.cuda.is_available()
):  # Triton kernels run on the CPU through the interpreter (set before any import)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough", max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
