"""Corpus split, synthetic tasks, and safetensors checkpoints that resume exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ropekit.lab.data import load_corpus, passkey_batch, recall_batch, train_batch
from ropekit.lab.model import LMConfig, TinyLM
from ropekit.lab.train import load_checkpoint, train


def test_stdlib_corpus_split_is_deterministic_and_by_file() -> None:
    a = load_corpus(max_bytes=300_000)
    b = load_corpus(max_bytes=300_000)
    assert torch.equal(a.train, b.train) and torch.equal(a.valid, b.valid)
    assert a.files[0] > 0 and a.files[1] > 0 and a.train.dtype == torch.uint8


def test_text_file_corpus_and_bad_path(tmp_path: Path) -> None:
    f = tmp_path / "t.txt"
    f.write_bytes(b"hello world " * 1000)
    c = load_corpus(str(f))
    assert c.train.numel() == 10_800 and c.valid.numel() == 1_200
    with pytest.raises(ValueError, match="does not exist"):
        load_corpus(str(tmp_path / "missing"))


def test_tasks() -> None:
    g = torch.Generator().manual_seed(0)
    tokens, key, start = passkey_batch(3, 200, g, depth=0.5)
    assert tokens.shape == (3, 200) and torch.equal(tokens[:, start:], key)
    text = bytes(tokens[0].tolist())
    assert text.count(bytes(key[0].tolist())) == 3  # stated twice in the needle, then the answer
    assert text[:start].endswith(b"The pass key is ")
    with pytest.raises(ValueError, match="too short"):
        passkey_batch(1, 50, g)
    x, y = recall_batch(2, 5, g)
    assert x.shape == (2, 24) and y.shape == (2,)
    xb, yb = train_batch(torch.arange(100, dtype=torch.uint8), 2, 10, g)
    assert torch.equal(xb[:, 1:], yb[:, :-1])


def test_resumed_training_equals_uninterrupted(tmp_path: Path) -> None:
    data = torch.randint(0, 256, (5000,), dtype=torch.uint8)
    cfg = LMConfig(d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn=64)

    def batcher(g: torch.Generator):  # noqa: ANN202
        return train_batch(data, 4, 16, g)

    torch.manual_seed(0)
    straight = TinyLM(cfg)
    train(straight, batcher, steps=6, seed=3, desc="straight")
    torch.manual_seed(0)
    part = TinyLM(cfg)
    ckpt = tmp_path / "c.safetensors"
    train(part, batcher, steps=6, seed=3, desc="part", ckpt=ckpt, ckpt_every=3)
    torch.manual_seed(0)
    resumed = TinyLM(cfg)
    step, meta = load_checkpoint(ckpt, resumed, None, None)
    assert step == 6 and meta["steps"] == 6
    # interrupt after 3 steps: rebuild from the step-3 checkpoint and finish
    torch.manual_seed(0)
    first = TinyLM(cfg)
    ck3 = tmp_path / "c3.safetensors"
    train(first, batcher, steps=6, seed=3, desc="first", ckpt=ck3, ckpt_every=3)
    torch.manual_seed(0)
    again = TinyLM(cfg)
    res = train(again, batcher, steps=6, seed=3, desc="again", ckpt=ck3)
    assert res.resumed_from == 6
    for (n, a), (_, b) in zip(straight.state_dict().items(), part.state_dict().items()):
        assert torch.equal(a, b), n
    assert open(ckpt, "rb").read(8)  # a safetensors file (header length), never a pickle
