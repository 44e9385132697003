# SPDX-License-Identifier: MIT
"""``python -m ropekit`` is the ``ropekit`` console script."""

from ropekit.cli.main import main

raise SystemExit(main())
