"""SOURCE resolution: presets (per layer type), config files, model folders and lab checkpoints; clear errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from ropekit.presets import get_preset
from ropekit.report.sources import resolve


def test_preset_with_layer_types_gives_one_spec_per_type() -> None:
    src = resolve("gemma-3-4b")
    assert src.kind == "preset" and src.context == 131072
    assert set(src.specs) == {"sliding_attention", "full_attention"}
    assert src.specs["sliding_attention"].base == 1e4 and src.specs["sliding_attention"].scaling is None
    assert src.specs["full_attention"].base == 1e6 and src.specs["full_attention"].scaling is not None


def test_single_spec_preset_and_config_file(tmp_path: Path) -> None:
    src = resolve("llama-2-7b")
    assert list(src.specs) == [""] and src.specs[""].head_dim == 128
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(get_preset("llama-3.1-8b").config))
    from_file = resolve(str(cfg))
    assert from_file.kind == "config" and from_file.specs[""] == resolve("llama-3.1-8b").specs[""]
    folder = tmp_path  # a folder with config.json and no weights: the config only
    assert resolve(str(folder)).kind == "config"


def _save_lab_checkpoint(path: Path, encoding: str = "rope") -> torch.nn.Module:
    from ropekit.lab.model import LMConfig, TinyLM
    from ropekit.lab.train import save_checkpoint

    torch.manual_seed(0)
    model = TinyLM(LMConfig(encoding=encoding, max_positions=32))
    opt = torch.optim.AdamW(model.parameters())
    meta = {"encoding": encoding, "train_len": 32, "tag": encoding, "steps": 1, "seed": 0}
    save_checkpoint(path, model, opt, 1, torch.Generator(), meta)
    return model


def test_lab_checkpoint_weights_match_a_direct_computation(tmp_path: Path) -> None:
    """Layer 0's per-band |q| equals hypot(x_i, y_i) of wq(attn_norm(embed(tokens))), pairs (i, i + n)."""
    ckpt = tmp_path / "rope.safetensors"
    model = _save_lab_checkpoint(ckpt)
    src = resolve(str(ckpt))
    assert src.kind == "lab-checkpoint" and src.context == 32 and src.weights is not None
    w = src.weights
    assert w.q_norms.shape == (4, 16) and w.previous.shape == (4, 4)
    tokens = torch.tensor(list(Path(json.__file__).read_bytes()[:64])).view(2, 32)
    with torch.no_grad():
        blk = model.blocks[0]
        q = blk.attn.wq(blk.attn_norm(model.embed(tokens))).view(2, 32, 4, 32).double()
    for band in (0, 7, 15):
        want = torch.hypot(q[..., band], q[..., band + 16]).mean().item()
        assert w.q_norms[0, band].item() == pytest.approx(want, rel=1e-5)
    assert ((w.previous >= 0) & (w.previous <= 1)).all() and ((w.diagonal >= 0) & (w.diagonal <= 1)).all()
    assert not math.isnan(float(w.k_norms.sum()))


def test_unknown_and_unsuitable_sources_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="SOURCE 'no-such-model' is not a preset"):
        resolve("no-such-model")
    ckpt = tmp_path / "alibi.safetensors"
    _save_lab_checkpoint(ckpt, "alibi")
    with pytest.raises(ValueError, match="encoding 'alibi'; only RoPE models have bands"):
        resolve(str(ckpt))
    bad = tmp_path / "list.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected a JSON object"):
        resolve(str(bad))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="is a folder without config.json"):
        resolve(str(empty))


def test_weights_the_config_has_no_place_for_are_refused_naming_them(tmp_path: Path) -> None:
    """A model folder whose safetensors hold more layers than its config.json: transformers would drop layer 1."""
    from tests.ropekit.cli.tiny_llama import tiny_llama

    tiny_llama(tmp_path / "m")  # 2 layers (skips without transformers)
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 1}))
    with pytest.raises(
        ValueError,
        match=r"SOURCE '.*m': its safetensors hold 9 weight\(s\) its config.json has no place for "
        r"\(model.layers.1.input_layernorm.weight, .* and 4 more\)",
    ):
        resolve(str(tmp_path / "m"))


def test_rotary_inv_freq_buffers_are_not_unexpected_weights() -> None:
    from ropekit.report.sources import _check_loaded

    _check_loaded(
        Path("m"), {"missing_keys": [], "unexpected_keys": ["model.layers.0.self_attn.rotary_emb.inv_freq"]}
    )
    with pytest.raises(ValueError, match=r"hold 1 weight\(s\) .*\(model.layers.2.mlp.up_proj.weight\)"):
        _check_loaded(Path("m"), {"unexpected_keys": ["model.layers.2.mlp.up_proj.weight"]})


def test_a_context_beyond_exact_float64_positions_is_refused() -> None:
    import dataclasses

    from ropekit.report.sources import MAX_CONTEXT

    src = resolve("llama-2-7b")
    assert dataclasses.replace(src, context=MAX_CONTEXT).context == 2**53
    for bad in (10**29, 2**53 + 1, 0, 4096.0):
        with pytest.raises(
            ValueError, match=rf"SOURCE 'llama-2-7b': context {bad!r} is out of range: .* 1..2\^53"
        ):
            dataclasses.replace(src, context=bad)
