# SPDX-License-Identifier: MIT
"""``python -m ropekit.lab EXPERIMENT [options]`` is ``ropekit lab EXPERIMENT [options]``; under torchrun
(``torchrun --nproc_per_node 2 -m ropekit.lab extrapolation --quick``) each process joins the group (gloo on CPU)
and training is data-parallel (:mod:`ropekit.lab.distributed`); only rank 0 prints."""

from __future__ import annotations

import contextlib
import os
import sys

from ropekit.cli.main import main
from ropekit.lab.distributed import setup, teardown


def run(argv: list[str]) -> int:
    rank, size = setup()
    try:
        if rank == 0:
            return main(["lab", *argv])
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            return main(["lab", *argv])
    finally:
        if size > 1:
            teardown()


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
