# SPDX-License-Identifier: MIT
"""Counter-example of seed 004, section 8.2: a rotation with a single frequency theta for every band.

The logit of a (q, k) pair at distance D is then a*cos(D*theta) + b*sin(D*theta): still a function of D alone
(relative, like RoPE), but of one period T = 2*pi/theta. Distances D and D + T are indistinguishable, and
neighbouring distances differ by at most ~theta*|q||k|: it is either sharp nearby and wraps around quickly, or
stable far away and blind nearby -- the multi-scale structure of RoPE (Su et al. 2021) is gone. The default
theta = 0.01 is the seed's example (T ~ 628.3). Measured in ``ropekit lab invariance`` (distance confusability)
and by training it in ``ropekit lab extrapolation --encodings single-frequency``.
Shapes: as :class:`ropekit.lab.encodings.rope.RoPE`.
"""

from __future__ import annotations

from ropekit.lab.encodings.rope import RoPE
from ropekit.spec import RopeSpec

__all__ = ["SingleFrequency"]


class SingleFrequency(RoPE):
    name = "single-frequency"
    paper = "seed 004 section 8.2 (counter-example)"

    def __init__(self, d_model: int, n_heads: int, head_dim: int, theta: float = 0.01) -> None:
        if not theta > 0:
            raise ValueError(f"single-frequency needs theta > 0, got theta={theta}")
        super().__init__(
            d_model, n_heads, head_dim, spec=RopeSpec(head_dim, freqs=(theta,) * (head_dim // 2))
        )
        self.theta = theta
