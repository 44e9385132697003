"""The ``backend`` fixture of the KV-cache write tests: the C kernel, or the PyTorch path as without a compiler
(a test that parametrizes its own ``backend`` overrides it)."""

from __future__ import annotations

import pytest

from ropekit.kernels import cpu_build

BACKENDS = ["kernel", "torch"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "kernel":
        if cpu_build.load() is None:
            pytest.skip("no C compiler: the kernel path is unavailable")
    else:
        monkeypatch.setattr(
            cpu_build, "load", lambda: None
        )  # as without a compiler: checks and writes in torch
    return str(request.param)


