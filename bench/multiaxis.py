"""Multi-axis vs 1-D rotation time on the same tensors: ``python bench/multiaxis.py [--quick] [--seq N]``."""

from ropekit.axis_bench import main

if __name__ == "__main__":
    main()
