"""timm tests run in the second environment (.venv-timm, `make test`'s second step, `-m timm`).

Where timm is not installed (the main .venv) these files are not collected at all; `-m "not timm"` deselects them
in the main run, and `-m timm` without timm collects nothing, so pytest exits non-zero (never a silent pass).
"""

from __future__ import annotations

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("timm") is not None else ["test_*.py", "zoo.py"]
