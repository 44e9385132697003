"""Corpus split, synthetic tasks, and safetensors checkpoints that resume exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ropekit.lab.data import load_corpus, passkey_batch, passkey_training_batch, recall_batch, train_batch
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


@pytest.mark.parametrize(
    ("content", "error"), [(b"", "is empty"), (b"x", "holds 1 byte.*too little for a 90/10 split")]
)
def test_empty_or_one_byte_corpus_file_is_refused_naming_it(
    tmp_path: Path, content: bytes, error: str
) -> None:
    f = tmp_path / "c.txt"
    f.write_bytes(content)
    with pytest.raises(ValueError, match=f"corpus file '{f}' {error}"):
        load_corpus(str(f))


def test_single_file_corpus_says_how_it_was_split_and_identifies_its_bytes(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_bytes(bytes(range(256)) * 10)
    c = load_corpus(str(f))
    ident = c.identity
    assert ident["split"] == "one file, split 90/10 by position" and ident["source"] == str(f)
    assert (ident["train_bytes"], ident["valid_bytes"]) == (2304, 256)
    assert ident["sha256"] == load_corpus(str(f)).identity["sha256"]
    f.write_bytes(bytes(range(256)) * 9 + bytes(reversed(range(256))))  # same size, other bytes
    assert load_corpus(str(f)).identity["sha256"] != ident["sha256"]


def test_windows_longer_than_the_data_are_refused() -> None:
    from ropekit.lab.evaluate import chunk_losses

    data = torch.zeros(17, dtype=torch.uint8)
    with pytest.raises(ValueError, match="17 bytes of data hold no training window of 16 \\+ 1 bytes"):
        train_batch(data, 2, 16, torch.Generator())
    train_batch(data, 2, 15, torch.Generator())  # 17 = 15 + 2: one start
    model = TinyLM(LMConfig(d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn=64))
    with pytest.raises(ValueError, match="17 tokens of evaluation data hold no window of 32 \\+ 1 tokens"):
        chunk_losses(model, data, 32)


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


def test_passkey_training_targets_are_the_key_copies_only() -> None:
    """Oracle: the key's occurrences found by searching the text; the targets kept are the digits of the second
    (the repeat in the needle) and third (the answer) occurrence, each predicted from the byte before it."""
    g = torch.Generator().manual_seed(3)
    x, y = passkey_training_batch(8, 128, g)
    assert x.shape == y.shape == (8, 128)
    for i in range(8):
        kept = (y[i] != -100).nonzero().flatten().tolist()
        text = bytes(x[i].tolist()) + bytes([int(y[i, -1])])  # the sequence: inputs plus the last target
        key = text[-5:]
        first = text.index(key)
        second = text.index(key, first + 5)
        third = text.index(key, second + 5)
        assert third == 128 + 1 - 5 and text.count(key) == 3
        assert kept == [t - 1 for t in range(second, second + 5)] + [t - 1 for t in range(third, third + 5)]
        assert bytes(y[i, kept].tolist()) == key + key
        assert torch.equal(y[i, kept[:5]], x[i, second : second + 5])  # next-byte targets


def test_resumed_training_equals_uninterrupted(tmp_path: Path) -> None:
    """Interrupt a run after 3 of 6 steps, resume from the safetensors checkpoint: the same weights as straight."""
    data = torch.randint(0, 256, (5000,), dtype=torch.uint8)
    cfg = LMConfig(d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn=64)

    def batcher(g: torch.Generator):
        return train_batch(data, 4, 16, g)

    torch.manual_seed(0)
    straight = TinyLM(cfg)
    train(straight, batcher, steps=6, seed=3, desc="straight")

    calls = {"n": 0}

    def interrupted(g: torch.Generator):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt  # the process dies during step 4
        return batcher(g)

    ckpt = tmp_path / "run.safetensors"
    torch.manual_seed(0)
    with pytest.raises(KeyboardInterrupt):
        train(TinyLM(cfg), interrupted, steps=6, seed=3, desc="interrupted", ckpt=ckpt, ckpt_every=3)
    step, meta = load_checkpoint(ckpt, TinyLM(cfg), None, None)
    assert step == 3 and meta["steps"] == 6
    assert ckpt.read_bytes()[8:9] == b"{"  # safetensors: an 8-byte length, then a JSON header (not a pickle)

    torch.manual_seed(1)  # a different init: everything must come from the checkpoint
    resumed = TinyLM(cfg)
    res = train(resumed, batcher, steps=6, seed=3, desc="resumed", ckpt=ckpt)
    assert res.resumed_from == 3
    for (n, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), n


def test_folder_corpus_is_split_by_file(tmp_path: Path) -> None:
    """--corpus FOLDER: every file under it (any extension), whole files to train or validation by crc32."""
    import zlib

    texts = {}
    for i in range(40):
        sub = tmp_path / f"d{i % 3}"
        sub.mkdir(exist_ok=True)
        f = sub / f"part{i}.txt"
        texts[f] = (f"document {i} " * (50 + i)).encode()
        f.write_bytes(texts[f])
    c = load_corpus(str(tmp_path))
    valid = [f for f in texts if zlib.crc32(str(f.relative_to(tmp_path)).encode()) % 10 == 0]
    assert c.files == (40 - len(valid), len(valid)) and len(valid) > 0
    assert c.valid.numel() == sum(len(texts[f]) + 1 for f in valid)  # each file plus a newline
    assert c.train.numel() + c.valid.numel() == sum(len(t) + 1 for t in texts.values())
    for f in valid:
        assert texts[f] in bytes(c.valid.tolist())


def test_unigram_perplexity_matches_counts() -> None:
    import collections
    import math

    from ropekit.lab.data import unigram_perplexity

    train, valid = b"abracadabra" * 3, b"abcabd"
    counts = collections.Counter(train)
    total = len(train) + 256  # add-one over 256 byte values
    nll = -sum(math.log((counts[b] + 1) / total) for b in valid) / len(valid)
    t = torch.frombuffer(bytearray(train), dtype=torch.uint8)
    v = torch.frombuffer(bytearray(valid), dtype=torch.uint8)
    assert unigram_perplexity(t, v) == pytest.approx(math.exp(nll), rel=1e-12)


def test_passkey_accuracy_at_the_training_length_sees_the_training_sequences() -> None:
    """The first answer digit is predicted after the same prompt length in evaluation as in training (an
    off-by-one here made models that had learned to copy miss by one digit at 1x)."""
    from ropekit.lab.experiments.passkey import accuracy

    class Recorder:
        def __init__(self) -> None:
            self.prompts: list[int] = []

        def generate(self, tokens: torch.Tensor, n: int) -> torch.Tensor:
            self.prompts.append(tokens.shape[1])
            return torch.zeros(1, n, dtype=torch.int64)

    rec = Recorder()
    accuracy(rec, 128, 3, 0)  # type: ignore[arg-type]
    _, y = passkey_training_batch(4, 128, torch.Generator().manual_seed(0))
    answer_at = [
        int((row != -100).nonzero()[-5]) for row in y
    ]  # position predicting the answer's first digit
    assert set(rec.prompts) == {answer_at[0] + 1} == {a + 1 for a in answer_at}
