# SPDX-License-Identifier: MIT
"""Data with no download: byte tokens from a real corpus on every machine, and synthetic retrieval tasks.

- :func:`load_corpus`: the running Python's own standard-library source (``*.py`` under ``sysconfig``'s stdlib,
  site-packages excluded), split into train and validation **by file**: a file goes to validation when
  crc32(relative path) % 10 == 0. Files are taken in the order of crc32(relative path) -- deterministic, and a
  spread over the whole library rather than its alphabetical start -- up to ``max_bytes``. Any text file or folder can be given instead (``path``).
- :func:`unigram_perplexity`: the corpus's unigram byte perplexity, the baseline every experiment prints;
- :func:`train_batch`: random windows of the concatenated files (sequence packing: windows run across file
  boundaries, no padding);
- :func:`passkey_batch`: a 5-digit pass key hidden at a chosen depth in repeated filler text; the model must
  produce the digits after "The pass key is " (Mohtashami & Jaggi 2023, "Landmark Attention", arXiv 2305.16300).
- :func:`recall_batch`: associative recall: "k1=v1 k2=v2 ... ?kj=" -> vj.

Shapes: b batch, L length; tokens are int64 bytes 0..255.
"""

from __future__ import annotations

import hashlib
import math
import sysconfig
import zlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "FILLER",
    "PASSKEY_MIN_LENGTH",
    "Corpus",
    "load_corpus",
    "passkey_batch",
    "passkey_training_batch",
    "recall_batch",
    "train_batch",
    "unigram_perplexity",
]

FILLER = b"The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "


@dataclass(frozen=True)
class Corpus:
    train: torch.Tensor  # [n] uint8
    valid: torch.Tensor
    source: str
    files: tuple[int, int]  # (train files, validation files)
    split: str = "split by file"  # how train and validation were separated (a single file: by position)

    @cached_property
    def identity(self) -> dict[str, Any]:
        """What identifies the bytes a model was trained and evaluated on (JSON): the path, the split, the files
        and bytes on each side, and the sha256 of the training bytes then the validation bytes (the token stream
        actually used, after the ``max_bytes`` cap)."""
        h = hashlib.sha256()
        for part in (self.train, self.valid):
            h.update(part.contiguous().numpy().tobytes())
        return {
            "source": self.source,
            "split": self.split,
            "files": list(self.files),
            "train_bytes": self.train.numel(),
            "valid_bytes": self.valid.numel(),
            "sha256": h.hexdigest(),
        }


def _files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return sorted(
        p for p in root.rglob("*.py") if "site-packages" not in p.parts and "dist-packages" not in p.parts
    )


def load_corpus(path: str | None = None, *, max_bytes: int = 8_000_000) -> Corpus:
    """Bytes of a corpus split by file (see the module docstring). A single file is split 90/10 by position.
    ValueError naming the path when it does not exist, or holds too little data for both sides of the split (an
    empty file included)."""
    root = Path(path) if path else Path(sysconfig.get_paths()["stdlib"])
    if not root.exists():
        raise ValueError(f"corpus path {str(root)!r} does not exist")
    if root.is_file():
        data = root.read_bytes()[:max_bytes]
        cut = int(len(data) * 0.9)
        t, v = data[:cut], data[cut:]
        if not t or not v:
            what = "is empty" if not data else f"holds {len(data)} byte(s), too little for a 90/10 split"
            raise ValueError(f"corpus file {str(root)!r} {what}")
        return Corpus(
            torch.frombuffer(bytearray(t), dtype=torch.uint8),
            torch.frombuffer(bytearray(v), dtype=torch.uint8),
            str(root),
            (1, 1),
            "one file, split 90/10 by position",
        )
    files = _files(root) if path is None else sorted(p for p in root.rglob("*") if p.is_file())
    files.sort(key=lambda f: (zlib.crc32(str(f.relative_to(root)).encode()) // 10, str(f)))
    train, valid, nt, nv, total = bytearray(), bytearray(), 0, 0, 0
    for f in files:
        try:
            data = f.read_bytes()
        except OSError:
            continue
        if total + len(data) > max_bytes:  # skip what does not fit; stop once the budget is nearly used
            if max_bytes - total < 4096:
                break
            continue
        total += len(data)
        rel = str(f.relative_to(root)).encode()
        if zlib.crc32(rel) % 10 == 0:
            valid += data + b"\n"
            nv += 1
        else:
            train += data + b"\n"
            nt += 1
    if not train or not valid:
        raise ValueError(f"corpus {str(root)!r} has too little data for a train/validation split")
    return Corpus(
        torch.frombuffer(train, dtype=torch.uint8).clone(),
        torch.frombuffer(valid, dtype=torch.uint8).clone(),
        str(root),
        (nt, nv),
    )


def unigram_perplexity(train: torch.Tensor, valid: torch.Tensor) -> float:
    """Perplexity on ``valid`` of the byte unigram model of ``train`` (add-one smoothed counts): the baseline a
    language model must beat by far to have learned anything beyond byte frequencies."""
    counts = torch.bincount(train.long(), minlength=256).double() + 1.0
    logp = (counts / counts.sum()).log()
    return math.exp(-float(logp[valid.long()].mean()))


def train_batch(
    data: torch.Tensor, batch: int, length: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows: inputs [b, L] and next-byte targets [b, L]. ValueError when ``data`` holds fewer than
    ``length + 2`` bytes (one window of ``length + 1`` and a choice of start)."""
    if data.numel() < length + 2:
        raise ValueError(f"{data.numel()} bytes of data hold no training window of {length} + 1 bytes")
    starts = torch.randint(0, data.numel() - length - 1, (batch,), generator=gen)
    idx = starts.unsqueeze(1) + torch.arange(length + 1)
    w = data[idx].long()
    return w[:, :-1], w[:, 1:]


_QUESTION = b" What is the pass key? The pass key is "
_CUE, _MIDDLE, _END = b" The pass key is ", b". Remember it. ", b" is the pass key. "
#: the shortest passkey sequence: the needle (cue, key, middle, key, end), the question and the 5-digit answer
PASSKEY_MIN_LENGTH = len(_CUE) + 5 + len(_MIDDLE) + 5 + len(_END) + len(_QUESTION) + 5


def _passkey_rows(
    batch: int, length: int, gen: torch.Generator, depth: float | None
) -> list[tuple[bytes, bytes, int]]:
    """(sequence, key, index of the needle) per row; see :func:`passkey_batch`."""
    out = []
    for _ in range(batch):
        key = b"%05d" % int(torch.randint(0, 100000, (1,), generator=gen))
        needle = _CUE + key + _MIDDLE + key + _END
        room = length - PASSKEY_MIN_LENGTH
        if room < 0:
            raise ValueError(
                f"length {length} is too short for the passkey task (needs >= {PASSKEY_MIN_LENGTH})"
            )
        d = float(torch.rand(1, generator=gen)) if depth is None else depth
        filler = (FILLER * (room // len(FILLER) + 2))[:room]
        at = round(d * room)
        out.append((filler[:at] + needle + filler[at:] + _QUESTION + key, key, at))
    return out


def passkey_batch(
    batch: int, length: int, gen: torch.Generator, depth: float | None = None
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Sequences of ``length`` bytes ending in "The pass key is " + 5 digits.

    Returns (tokens [b, L], digits [b, 5] bytes, answer start index). With ``depth`` (0..1) the key sits at that
    relative depth of the filler; else at a random depth per sequence.
    """
    rows = _passkey_rows(batch, length, gen, depth)
    return (
        torch.tensor([list(r) for r, _, _ in rows]),
        torch.tensor([list(k) for _, k, _ in rows]),
        length - 5,
    )


def passkey_training_batch(
    batch: int, length: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs [b, L] and next-byte targets [b, L] of passkey sequences (length L + 1, random depth) whose targets
    are -100 (ignored by ``cross_entropy``) except at the key's two copies: the repeat inside the needle and the
    answer. The rest is unlearnable (the key's first occurrence is random) or carries no signal about retrieval
    (the filler is one fixed text), and with every byte in the loss the 10 copied digits are 8% of it: tiny models
    then never learn to copy (every encoding at 0% in-distribution after 800 steps)."""
    rows = _passkey_rows(batch, length + 1, gen, None)
    tokens = torch.tensor([list(r) for r, _, _ in rows])
    targets = torch.full((batch, length), -100, dtype=torch.int64)
    for i, (_, _, at) in enumerate(rows):
        repeat = at + len(_CUE) + 5 + len(_MIDDLE)
        for start in (repeat, length + 1 - 5):  # token index of each copy's first digit in the sequence
            targets[i, start - 1 : start + 4] = tokens[i, start : start + 5]  # target t predicts token t + 1
    return tokens[:, :-1], targets


def recall_batch(batch: int, pairs: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Associative recall: "ab=c ... ?ab=" with the answer byte as target (tokens [b, 4*pairs + 4], answer [b])."""
    letters = torch.arange(ord("a"), ord("z") + 1)
    rows, answers = [], []
    for _ in range(batch):
        keys = torch.randperm(26 * 26, generator=gen)[:pairs]
        vals = torch.randint(ord("0"), ord("9") + 1, (pairs,), generator=gen)
        seq = []
        for kk, vv in zip(keys.tolist(), vals.tolist()):
            seq += [int(letters[kk // 26]), int(letters[kk % 26]), ord("="), vv]
        j = int(torch.randint(0, pairs, (1,), generator=gen))
        kj = int(keys[j])
        seq += [ord("?"), int(letters[kj // 26]), int(letters[kj % 26]), ord("=")]
        rows.append(seq)
        answers.append(int(vals[j]))
    return torch.tensor(rows), torch.tensor(answers)
