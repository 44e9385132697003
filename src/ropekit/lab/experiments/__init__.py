# SPDX-License-Identifier: MIT
"""The lab's experiments; each writes a JSON result, a PNG plot and a Markdown table to its output folder."""

from ropekit.lab.experiments import extrapolation, frequencies, invariance, passkey, scaling

EXPERIMENTS = {
    "extrapolation": extrapolation.run,
    "scaling": scaling.run,
    "frequencies": frequencies.run,
    "passkey": passkey.run,
    "invariance": invariance.run,
}

__all__ = ["EXPERIMENTS"]
