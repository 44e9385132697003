"""Multi-axis vs 1-D rotation time on the same tensors: ``python bench/multiaxis.py [--quick] [--out FILE]``,
the same as ``ropekit bench --mode axes`` (:mod:`ropekit.bench.axes`)."""

import sys

from ropekit.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["bench", "--mode", "axes", *sys.argv[1:]]))
