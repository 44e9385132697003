# SPDX-License-Identifier: MIT
"""ropekit's lab: train small byte-level language models with each positional encoding on a laptop CPU and test
the seeds' claims (extrapolation, scaled RoPE, frequency usage and p-RoPE, passkey retrieval).

Needs the `lab` extra (safetensors for checkpoints, matplotlib for plots): ``pip install 'ropekit[lab]'``.
"""

from ropekit.lab.encodings import ENCODINGS, build_encoding
from ropekit.lab.model import LMConfig, TinyLM

__all__ = ["ENCODINGS", "LMConfig", "TinyLM", "build_encoding"]
