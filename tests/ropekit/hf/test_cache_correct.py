"""patch(model, cache_correct=True): cached decoding of dynamic NTK / LongRoPE equals a full forward, any depth.

Oracle: the unpatched transformers model, freshly copied for each length, run over the whole sequence so far (a
full forward has no cache, so nothing in it is stale), and greedy decoding by such full forwards. The default patch
is transformers' own (stale-cache) generation: equal to unpatched generate, and far from the oracle once the
frequencies switch (so these tests can fail).

One-layer models take the re-rotation path (no extra forward); deeper ones rebuild the cache by running the cached
prefix again under the new frequencies (``rebuilds`` counts those extra forwards).
"""

from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).parent))
from tiny import SMALL as _SMALL

SMALL = {**_SMALL, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": None}  # no early stop

import ropekit.hf

L0 = 16  # frequencies switch once the sequence passes 16 tokens
PROMPT, NEW = 12, 10
LONGROPE = {
    "rope_type": "longrope",
    "short_factor": [1.0 + 0.05 * i for i in range(8)],
    "long_factor": [2.0 + 3 * i for i in range(8)],
    "original_max_position_embeddings": L0,
    "rope_theta": 1e4,
}
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama-dynamic": (
        "llama",
        {
            "max_position_embeddings": L0,
            "rope_parameters": {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 1e4},
        },
    ),
    "llama-longrope": ("llama", {"max_position_embeddings": 4 * L0, "rope_parameters": LONGROPE}),
    # Phi-3 drops its cache itself once the *padded* input passes L0 (its top-level original length wins over
    # rope_parameters'); with every row left-padded the positions pass L0 one step later, and transformers' Phi-3
    # then keeps its stale cache.
    "phi3-longrope": (
        "phi3",
        {
            "max_position_embeddings": 4 * L0,
            "original_max_position_embeddings": L0,
            "rope_parameters": LONGROPE,
        },
    ),
}

SLIDING = "mistral-sliding-dynamic"  # sliding-window cache layers (window 8) refilled by the rebuild
EXTRA = {
    SLIDING: (
        "mistral",
        {"sliding_window": 8, **CASES["llama-dynamic"][1]},
    )
}


def _model(name: str, layers: int) -> torch.nn.Module:
    model_type, kw = {**CASES, **EXTRA}[name]
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model(model_type, **{**SMALL, **kw, "num_hidden_layers": layers})
        return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()


def _generate(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> Any:
    kw = {"max_new_tokens": NEW, "do_sample": False, "output_logits": True, "return_dict_in_generate": True}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.generate(ids, attention_mask=mask, pad_token_id=0, **kw)  # type: ignore[operator]


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """The position ids generate gives a left-padded batch (padding slots at 0)."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def _full(ref: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Last-token logits of a full forward of a fresh copy (no cache, no dynamic state carried over)."""
    full_mask = torch.cat(
        [mask, torch.ones(mask.shape[0], ids.shape[1] - mask.shape[1], dtype=mask.dtype)], 1
    )
    with torch.no_grad():
        out = copy.deepcopy(ref)(input_ids=ids, attention_mask=full_mask, position_ids=_positions(full_mask))
    return out.logits[:, -1]  # type: ignore[no-any-return]


def _errors(ref: torch.nn.Module, out: Any, mask: torch.Tensor) -> list[float]:
    """Per generated length: max |cached logits - full-forward logits| relative to the largest full-forward logit."""
    errs = []
    for j, step in enumerate(out.logits):
        full = _full(ref, out.sequences[:, : PROMPT + j], mask)
        errs.append(float((step - full).abs().max() / full.abs().max()))
    return errs


def _greedy_by_full_forwards(ref: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    for _ in range(NEW):
        ids = torch.cat([ids, _full(ref, ids, mask).argmax(-1, keepdim=True)], dim=1)
    return ids


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(3, 128, (2, PROMPT), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :1] = 0  # both rows left-padded
    mask[1, :3] = 0
    return ids, mask


def _state(model: torch.nn.Module) -> Any:
    rot = next(m for n, m in model.named_modules() if n.endswith("rotary_emb"))
    return rot._ropekit_cache_state


@pytest.mark.parametrize("layers", [2, 3])
@pytest.mark.parametrize("name", sorted(CASES))
def test_cached_generation_equals_full_forward_at_every_length(name: str, layers: int) -> None:
    ref = _model(name, layers)
    ids, mask = _inputs()
    ours = ropekit.hf.patch(copy.deepcopy(ref), cache_correct=True)
    out = _generate(ours, ids, mask)
    errs = _errors(ref, out, mask)
    assert max(errs) <= 1e-4, errs
    assert torch.equal(out.sequences, _greedy_by_full_forwards(ref, ids, mask))
    state = _state(ours)
    assert state.rerotations == 0
    # the longest row holds 11 tokens: the steps at lengths 17..20 see new frequencies (dynamic: each of them)
    assert state.rebuilds == (4 if name.endswith("dynamic") else 1)

    # default: transformers' own behaviour -- equal to unpatched generate, stale cache and all
    out_hf = _generate(copy.deepcopy(ref), ids, mask)
    out_d = _generate(ropekit.hf.patch(copy.deepcopy(ref)), ids, mask)
    for a, b in zip(out_d.logits, out_hf.logits):
        assert float((a - b).abs().max() / b.abs().max()) < 1e-4
    assert max(_errors(ref, out_hf, mask)) > 1e-2  # ... which drifts from the full forward


def test_sliding_window_cache_is_rebuilt_exactly() -> None:
    ref = _model(SLIDING, 2)
    ids, mask = _inputs()
    ours = ropekit.hf.patch(copy.deepcopy(ref), cache_correct=True)
    out = _generate(ours, ids, mask)
    assert {type(layer).__name__ for layer in out.past_key_values.layers} == {"DynamicSlidingWindowLayer"}
    assert max(_errors(ref, out, mask)) <= 1e-4
    assert _state(ours).rebuilds == 4
    assert max(_errors(ref, _generate(copy.deepcopy(ref), ids, mask), mask)) > 1e-2  # transformers drifts


def test_prompt_given_as_embeddings_is_rebuilt_from_them() -> None:
    ref = _model("llama-longrope", 2)
    ids, mask = _inputs()
    ours = ropekit.hf.patch(copy.deepcopy(ref), cache_correct=True)
    kw = {"max_new_tokens": NEW, "do_sample": False, "output_logits": True, "return_dict_in_generate": True}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        embeds = ours.get_input_embeddings()(ids)  # type: ignore[operator]
        out = ours.generate(inputs_embeds=embeds, attention_mask=mask, pad_token_id=0, **kw)  # type: ignore[operator]
    seqs = torch.cat([ids, out.sequences], dim=1)  # generate from embeddings returns the new tokens only
    errs = [
        float((step - (full := _full(ref, seqs[:, : PROMPT + j], mask))).abs().max() / full.abs().max())
        for j, step in enumerate(out.logits)
    ]
    assert max(errs) <= 1e-4, errs
    assert _state(ours).rebuilds == 1


@pytest.mark.parametrize("name", ["llama-dynamic", "llama-longrope"])
def test_one_layer_model_rerotates_without_extra_forwards(name: str) -> None:
    ref = _model(name, layers=1)
    ids, mask = _inputs()
    ours = ropekit.hf.patch(copy.deepcopy(ref), cache_correct=True)
    errs = _errors(ref, _generate(ours, ids, mask), mask)
    assert max(errs) <= 1e-4, errs
    state = _state(ours)
    assert state.rerotations > 0 and state.rebuilds == 0
    assert max(_errors(ref, _generate(copy.deepcopy(ref), ids, mask), mask)) > 1e-3  # transformers drifts


def test_a_cache_it_did_not_fill_is_refused_by_name() -> None:
    model = ropekit.hf.patch(_model("llama-longrope", 2), cache_correct=True)
    ids, mask = _inputs()
    with torch.no_grad():
        cache = model(input_ids=ids, attention_mask=mask, use_cache=True).past_key_values
        cache.crop(-2)  # the cache lost two tokens behind the patch's back
        with pytest.raises(ValueError, match="cache holds 10 tokens but 12 were fed"):
            model(input_ids=ids[:, :1], past_key_values=cache, use_cache=True)


def test_cache_correct_is_refused_where_it_cannot_work() -> None:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model(
            "gemma3_text", **{**SMALL, "head_dim": 16, "layer_types": ["sliding_attention", "full_attention"]}
        )
        model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    cls = type(model.model.rotary_emb)
    with pytest.raises(ValueError, match="per-layer-type rotaries are not supported by cache_correct"):
        ropekit.hf.patch(model, cache_correct=True)
    assert type(model.model.rotary_emb) is cls


@pytest.mark.parametrize("name", ["cache", "past_key_values"])
def test_hooks_find_the_cache_under_either_argument_name(name: str) -> None:
    """transformers 5.24 renamed the forwards' ``past_key_values`` to ``cache``: the hooks read the cache under the
    name the call used and the rebuild passes it under the name the owner's forward declares (5.23 is what the
    suite pins, so this is checked on stand-in modules written like each version's)."""
    from ropekit.hf.cache_correct import CacheState, cache_argument, install_hooks

    seen: list[object] = []
    state = CacheState()

    class Owner(torch.nn.Module):  # its forward: one of the two signatures below
        pass

    def fwd_new(self: Any, input_ids: Any = None, attention_mask: Any = None, cache: Any = None, **kw: Any) -> None:
        seen.append((state.cache, state.pending, cache))

    def fwd_old(
        self: Any, input_ids: Any = None, attention_mask: Any = None, past_key_values: Any = None, **kw: Any
    ) -> None:
        seen.append((state.cache, state.pending, past_key_values))

    Owner.forward = fwd_new if name == "cache" else fwd_old  # type: ignore[method-assign, assignment]
    owner, marker, ids = Owner(), object(), torch.ones(1, 2, dtype=torch.long)
    install_hooks(owner, state)
    assert state.cache_name == name
    owner(input_ids=ids, **{name: marker})
    assert seen[-1][0] is marker and seen[-1][2] is marker and state.cache is None  # cleared after the call
    assert cache_argument({name: marker}) is marker and cache_argument({"other": marker}) is None


def _beams(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, **kw: Any) -> torch.Tensor:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model.generate(  # type: ignore[operator]
            ids, attention_mask=mask, pad_token_id=0, max_new_tokens=NEW, do_sample=False, num_beams=3,
            num_return_sequences=3, **kw,
        )  # fmt: skip
    return out  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", ["llama-dynamic", "llama-longrope"])
def test_beam_search_rebuilds_each_beam_from_its_own_tokens(name: str) -> None:
    """Beam search reorders the cache's rows every step (``reorder_cache``): the rebuild must follow them (the user
    trial: each row was rebuilt from another row's tokens). Oracle: beam search without a cache (every step a full
    forward), which the unpatched cached search does not match."""
    ref = _model(name, 2)
    ids, mask = _inputs()
    oracle = _beams(copy.deepcopy(ref), ids, mask, use_cache=False)
    assert not torch.equal(_beams(copy.deepcopy(ref), ids, mask), oracle)  # transformers' stale cache drifts
    ours = ropekit.hf.patch(copy.deepcopy(ref), cache_correct=True)
    assert torch.equal(_beams(ours, ids, mask), oracle)
    assert _state(ours).rebuilds > 0


def test_two_live_caches_are_each_rebuilt_from_their_own_tokens() -> None:
    """Two conversations served alternately by one model, each with its own cache of the same length: crossing L0
    in one rebuilds it from its tokens, not from the other's (the record lives on each cache)."""
    from transformers import DynamicCache

    ref = _model("llama-dynamic", 2)
    model = ropekit.hf.patch(copy.deepcopy(ref), cache_correct=True)
    gen = torch.Generator().manual_seed(1)
    a, b, new = (torch.randint(3, 128, (1, n), generator=gen) for n in (15, 15, 2))
    ca, cb = DynamicCache(config=model.config), DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=a, past_key_values=ca)
        model(input_ids=b, past_key_values=cb)
        got = model(input_ids=new, past_key_values=ca).logits[:, -1]  # 17 tokens: the frequencies switch
    want = _full(ref, torch.cat([a, new], 1), torch.ones_like(a))
    assert float((got - want).abs().max() / want.abs().max()) <= 1e-4


def test_a_static_cache_is_refused_at_its_first_call() -> None:
    """A static cache cannot be rebuilt: refused by name on the first forward (it used to fail only once the
    frequencies switched, mid-generation, with an unrelated message), before anything is written to it."""
    from transformers import StaticCache

    model = ropekit.hf.patch(_model("llama-dynamic", 2), cache_correct=True)
    ids, mask = _inputs()
    cache = StaticCache(config=model.config, max_cache_len=32)
    with torch.no_grad(), pytest.raises(ValueError, match=r"got StaticCache with StaticLayer layers .* use a DynamicCache"):
        model(input_ids=ids, attention_mask=mask, past_key_values=cache)
    assert int(cache.get_seq_length()) == 0
