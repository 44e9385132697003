"""pytest plugin: with ROPEKIT_PATCH=1 every transformers model the tests build is patched by ropekit.

Wraps ``PreTrainedModel.post_init`` (the last step of every model's constructor): after it, ``ropekit.hf.patch``
runs on the model. A model with no rotary module of its own (its inner model was patched already) or one ropekit
refuses stays as built; every outcome is counted and written to ``$ROPEKIT_PATCH_LOG`` (JSON) at the end.

Whatever ROPEKIT_PATCH says, a transformers test tree that imports a helper module its checkout lacks (the
distributed-testing helpers of newer common mixins, when the per-model tests come from an older checkout) gets a
stand-in whose every function skips the test that calls it.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import sys
import types
import unittest
import warnings
from typing import Any

OUTCOMES: collections.Counter[str] = collections.Counter()
#: full refusal message -> ids of the tests whose models it refused (written beside the counts)
REFUSALS: dict[str, list[str]] = collections.defaultdict(list)
CURRENT = {"test": "(collection)"}
#: helper modules of transformers' tests/ that a stand-in may replace when absent
STAND_INS = ("tests.distributed_testing_utils",)


def _stand_in(name: str) -> types.ModuleType:
    mod = types.ModuleType(name, f"ropekit hf_suite stand-in for the absent {name}")

    def __getattr__(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)

        def skip(*_a: Any, **_k: Any) -> Any:
            raise unittest.SkipTest(f"{name}.{attr} is absent from this transformers checkout")

        return skip

    mod.__getattr__ = __getattr__  # type: ignore[method-assign]
    return mod


def install_stand_ins() -> list[str]:
    """Put a stand-in in sys.modules for each absent helper module of an importable ``tests`` package."""
    done = []
    try:
        has_tests = importlib.util.find_spec("tests") is not None
    except (ImportError, ValueError):
        has_tests = False
    for name in STAND_INS if has_tests else ():
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            sys.modules[name] = _stand_in(name)
            done.append(name)
    return done


def patch_every_model() -> None:
    """From now on every transformers model is patched by ropekit right after it is built (or first called)."""
    from transformers.modeling_utils import PreTrainedModel

    import ropekit.hf

    original = PreTrainedModel.post_init

    def attempt(self: PreTrainedModel) -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ropekit.hf.patch(self)
            OUTCOMES["patched"] += 1
        except ValueError as e:
            msg = str(e)
            key = "no rotary of its own" if "found no rotary module" in msg else f"refused: {msg[:160]}"
            OUTCOMES[key] += 1
            if key.startswith("refused"):
                where = REFUSALS[msg]
                if CURRENT["test"] not in where:
                    where.append(CURRENT["test"])

    def post_init(self: PreTrainedModel) -> None:
        original(self)
        if any(b.device.type == "meta" for b in self.buffers()):  # loading: patch once the weights are in
            OUTCOMES["deferred (meta device at construction)"] += 1

            def first_call(module: PreTrainedModel, args: object) -> None:
                handle.remove()
                attempt(module)

            handle = self.register_forward_pre_hook(first_call)
            return
        attempt(self)

    post_init.__wrapped__ = original  # type: ignore[attr-defined]
    PreTrainedModel.post_init = post_init  # type: ignore[method-assign]


def pytest_configure(config: object) -> None:
    install_stand_ins()
    if os.environ.get("ROPEKIT_PATCH") == "1":
        patch_every_model()


def pytest_runtest_setup(item: Any) -> None:
    CURRENT["test"] = str(item.nodeid)


def pytest_unconfigure(config: object) -> None:
    path = os.environ.get("ROPEKIT_PATCH_LOG")
    if path and os.environ.get("ROPEKIT_PATCH") == "1":
        with open(path, "w") as f:
            json.dump({**OUTCOMES, "_refusals": dict(REFUSALS)}, f, indent=1)
