"""timm tests run with the overlay folder .timm-site on PYTHONPATH (torchvision + timm; `make test`'s second step,
`-m timm`).

Where timm is not importable (the main run, without the overlay) these files are not collected at all; `-m "not timm"`
deselects them in the main run, and `-m timm` without timm collects nothing, so pytest exits non-zero (never a silent
pass).

torchvision on a CPU torch. timm imports torchvision (``torchvision.ops.misc.FrozenBatchNorm2d``, its transforms).
On x86_64, PyPI's torchvision wheels are CUDA builds: beside the project's CPU torch 2.13.0 their C++ extension
(``torchvision/_C.so``, which needs ``libtorch_cuda.so``) cannot load, and ``import torchvision`` then stops at
``torch.library.register_fake("torchvision::nms")`` ("operator torchvision::nms does not exist"), the one place its
Python code assumes the extension loaded. Only in that case, and before torchvision is imported, the two operator
schemas it registers fakes for (nms, qnms; as torchvision's own C++ declares them) are declared with no kernel: a call
to either raises. No timm test calls a torchvision operator; the rotary code under test is timm's own Python.
"""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path

import torch

collect_ignore_glob = [] if importlib.util.find_spec("timm") is not None else ["test_*.py", "zoo.py"]


def _torchvision_extension_loads() -> bool:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return True  # nothing to mend: timm's own import then fails with its own message
    libraries = sorted(Path(spec.origin).parent.glob("_C*.so"))
    if not libraries:
        return False
    try:
        ctypes.CDLL(str(libraries[0]))
    except OSError:
        return False
    return True


if importlib.util.find_spec("timm") is not None and not _torchvision_extension_loads():
    _TORCHVISION_SCHEMAS = torch.library.Library("torchvision", "DEF")  # kept alive: dropping it drops the schemas
    _TORCHVISION_SCHEMAS.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _TORCHVISION_SCHEMAS.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
