# SPDX-License-Identifier: MIT
"""The lab's experiments; each writes a JSON result, a PNG plot and a Markdown table to its output folder."""

from collections.abc import Callable
from typing import Any

from ropekit.lab.experiments import extrapolation, frequencies, invariance, passkey, scaling, vision

# each run(out, *, quick=..., seeds=..., ...) -> the JSON result; the options differ per experiment
EXPERIMENTS: dict[str, Callable[..., dict[str, Any]]] = {
    "extrapolation": extrapolation.run,
    "scaling": scaling.run,
    "frequencies": frequencies.run,
    "passkey": passkey.run,
    "invariance": invariance.run,
    "vision": vision.run,
}

__all__ = ["EXPERIMENTS"]
