"""A Gemma 3 text model built with flat ``rope_parameters`` (as for every other family): transformers 5.23 keeps
the flat keys and adds its per-layer-type entries beside them, and its rotary module reads only the entries. The
patch accepts it and equals the unpatched model; ``from_hf`` reads the entries and warns that the flat keys are
ignored (a user trial found the patch refusing it with an unrelated reason, and ``from_hf`` reading a flat YaRN the
model does not use). Oracle: the unpatched model's logits and its rotary module's own tables."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

import ropekit.hf
from ropekit import RopeSpec

FLAT = {
    "default": {"rope_type": "default", "rope_theta": 10_000.0},
    "yarn": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 64,
        "rope_theta": 10_000.0,
    },
}


def _gemma3(rope: dict[str, object]) -> torch.nn.Module:
    cfg = transformers.Gemma3TextConfig(
        vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=8, max_position_embeddings=256,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters=copy.deepcopy(rope),
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.Gemma3ForCausalLM(cfg).eval()


@pytest.mark.parametrize("name", sorted(FLAT))
def test_flat_keys_beside_layer_type_entries_read_as_transformers(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = _gemma3(FLAT[name])
    rp = ref.config.rope_parameters
    assert {"full_attention", "sliding_attention"} <= set(rp) and "rope_type" in rp  # the mixed form
    x, pos = torch.zeros(1, dtype=torch.float32), torch.arange(40)[None]
    for lt in ("full_attention", "sliding_attention"):
        with pytest.warns(UserWarning, match="flat keys .* ignored"):
            spec = RopeSpec.from_hf(ref.config, layer_type=lt)
        assert spec.scaling is None and spec.base == rp[lt]["rope_theta"]
        cos, _ = ref.model.rotary_emb(x, pos, layer_type=lt)  # the model's own tables: the entries', unscaled
        want = torch.cos(pos[0, :, None].double() * spec.frequencies()).float()
        torch.testing.assert_close(cos[0, :, : spec.n_bands], want, rtol=0, atol=2e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = ropekit.hf.patch(copy.deepcopy(ref))
    ids = torch.randint(3, 100, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = ref(input_ids=ids).logits, ours(input_ids=ids).logits
    assert float((a - b).abs().max()) <= 1e-5 * float(a.abs().max())
