"""pytest plugin: with ROPEKIT_PATCH=1 every transformers model the tests build is patched by ropekit.

Wraps ``PreTrainedModel.post_init`` (the last step of every model's constructor): after it, ``ropekit.hf.patch``
runs on the model. A model with no rotary module of its own (its inner model was patched already) or one ropekit
refuses stays as built; every outcome is counted and written to ``$ROPEKIT_PATCH_LOG`` (JSON) at the end.
"""

from __future__ import annotations

import collections
import json
import os
import warnings

OUTCOMES: collections.Counter[str] = collections.Counter()


def pytest_configure(config: object) -> None:
    if os.environ.get("ROPEKIT_PATCH") != "1":
        return
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

    PreTrainedModel.post_init = post_init  # type: ignore[method-assign]


def pytest_unconfigure(config: object) -> None:
    path = os.environ.get("ROPEKIT_PATCH_LOG")
    if path and os.environ.get("ROPEKIT_PATCH") == "1":
        with open(path, "w") as f:
            json.dump(dict(OUTCOMES), f, indent=1)
