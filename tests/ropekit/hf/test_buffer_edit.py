"""A rotary inv_freq buffer edited after ropekit.hf.patch (a hand-made context extension): the patched model follows
it, as transformers does, with a warning (ropekit.hf.buffer_edit).

Trial finding (T2): the patched model kept the config's frequencies, 1.2 relative from the unpatched model's logits,
silently. Oracle: transformers' own unpatched model with the same edit.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM

import ropekit.hf

EDITED = 1.0 / (40_000.0 ** (torch.arange(0, 16, 2).float() / 16))  # a base change 1e4 -> 4e4, head_dim 16


def _model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        initializer_range=0.5,
    )
    return LlamaForCausalLM(cfg).eval()


def _edit_in_place(m: LlamaForCausalLM) -> None:
    m.model.rotary_emb.inv_freq.copy_(EDITED)


def _edit_by_register(m: LlamaForCausalLM) -> None:
    m.model.rotary_emb.register_buffer("inv_freq", EDITED.clone(), persistent=False)


@pytest.mark.parametrize("edit", [_edit_in_place, _edit_by_register], ids=["copy_", "register_buffer"])
def test_an_edit_after_patch_is_followed_with_a_warning(edit: object) -> None:
    model = _model()
    ids = torch.randint(1, 128, (1, 40), generator=torch.Generator().manual_seed(1))
    ref = copy.deepcopy(model)
    edit(ref)  # type: ignore[operator]
    ropekit.hf.patch(model)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # the unedited patched model: no warning
        model(ids)
    edit(model)  # type: ignore[operator]
    with torch.no_grad():
        with pytest.warns(UserWarning, match=r"inv_freq buffer was changed after ropekit\.hf\.patch"):
            got = model(ids).logits
        want = ref(ids).logits
        unedited = _model()(ids).logits
    assert float((got - want).abs().max()) <= 1e-5 * float(want.abs().max())
    assert float((unedited - want).abs().max()) > 0.1 * float(want.abs().max())  # the edit matters
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # once per buffer state
        model(ids)


def test_an_edit_before_patch_is_still_refused() -> None:
    model = _model()
    _edit_in_place(model)
    with pytest.raises(ValueError, match="tables differ from transformers'"):
        ropekit.hf.patch(model)
