"""Lab checkpoints: the optimizer and generator state are checked against the live optimizer / generator before
anything is loaded (trial finding: unknown keys gave a raw KeyError, wrong shapes loaded and crashed at the next
step, a wrong-size gen_state gave torch's RuntimeError, and a checkpoint without optimizer or generator state
resumed silently with fresh AdamW moments / another data order)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ropekit.lab.model import LMConfig, TinyLM
from ropekit.lab.train import checkpoint_info, load_checkpoint, train

CFG = LMConfig(d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn=64, max_positions=16)


def _batcher(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randint(0, 256, (2, 17), generator=g)
    return x[:, :-1], x[:, 1:]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors and metadata of a checkpoint that train() wrote after 2 steps."""
    ckpt = tmp_path_factory.mktemp("ckpt") / "run.safetensors"
    torch.manual_seed(0)
    train(TinyLM(CFG), _batcher, steps=2, seed=3, ckpt=ckpt, desc="train")
    with safe_open(str(ckpt), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata())  # noqa: SIM118


def _write(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> Path:
    save_file(tensors, str(path), metadata=metadata)
    return path


def _live() -> tuple[TinyLM, torch.optim.AdamW, torch.Generator]:
    torch.manual_seed(1)
    model = TinyLM(CFG)
    return model, torch.optim.AdamW(model.parameters()), torch.Generator().manual_seed(7)


def _exp_avg_key(tensors: dict[str, torch.Tensor]) -> str:
    return next(k for k in tensors if k.endswith(".exp_avg"))


def _cases(t: dict[str, torch.Tensor]) -> dict[str, tuple[dict[str, torch.Tensor], str]]:
    k = _exp_avg_key(t)
    no_opt = {n: v for n, v in t.items() if not n.startswith("opt.")}
    return {
        "unknown parameter": (
            {**t, "opt.nonexistent.exp_avg": torch.zeros(3)},
            r"no state of this optimizer: opt\.nonexistent\.exp_avg",
        ),
        "unknown state key": (
            {**t, k.replace(".exp_avg", ".momentum"): torch.zeros(3)},
            rf"no state of this optimizer: {re.escape(k.replace('.exp_avg', '.momentum'))}",
        ),
        "wrong shape": (
            {**t, k: torch.zeros(3)},
            rf"another shape or dtype: {re.escape(k)} \[3\] float32 \(expected \[\d+(, \d+)*\] float32\)",
        ),
        "wrong dtype": ({**t, k: t[k].double()}, rf"{re.escape(k)} \[[\d, ]+\] float64"),
        "a state key missing": (
            {n: v for n, v in t.items() if n != k},
            rf"lacks 1 optimizer tensor\(s\): {re.escape(k)}",
        ),
        "a parameter without state": (
            {n: v for n, v in t.items() if not n.startswith(k.rsplit(".", 1)[0] + ".")},
            rf"no optimizer state for 1 parameter\(s\): {re.escape(k[4:].rsplit('.', 1)[0])}",
        ),
        "no optimizer state after 2 steps": (no_opt, r"holds no optimizer state after 2 step\(s\)"),
        "gen_state of wrong size": (
            {**t, "gen_state": torch.zeros(3, dtype=torch.uint8)},
            r"tensor 'gen_state' \(\[3\] uint8\) is not the state of a cpu torch.Generator \(expected \[5056\]",
        ),
        "gen_state of wrong dtype": (
            {**t, "gen_state": t["gen_state"].float()},
            r"tensor 'gen_state' \(\[5056\] float32\) is not the state",
        ),
        "no gen_state": ({n: v for n, v in t.items() if n != "gen_state"}, r"has no 'gen_state'"),
        "a stray tensor": ({**t, "extra": torch.zeros(1)}, r"neither the model's .* extra"),
    }


CASES = [
    "unknown parameter",
    "unknown state key",
    "wrong shape",
    "wrong dtype",
    "a state key missing",
    "a parameter without state",
    "no optimizer state after 2 steps",
    "gen_state of wrong size",
    "gen_state of wrong dtype",
    "no gen_state",
    "a stray tensor",
]


@pytest.mark.parametrize("case", CASES)
def test_bad_optimizer_or_generator_state_is_refused_before_anything_changes(
    tmp_path: Path, trained: tuple[dict[str, torch.Tensor], dict[str, str]], case: str
) -> None:
    tensors, md = trained
    assert set(_cases(tensors)) == set(CASES)
    bad, error = _cases(tensors)[case]
    path = _write(tmp_path / "bad.safetensors", bad, md)
    model, opt, gen = _live()
    before_model = {k: v.clone() for k, v in model.state_dict().items()}
    before_gen = gen.get_state().clone()
    with pytest.raises(ValueError, match=rf"lab checkpoint '{re.escape(str(path))}'.*{error}"):
        load_checkpoint(path, model, opt, gen)
    for k, v in model.state_dict().items():  # nothing was loaded: the refusal comes before any change
        assert torch.equal(v, before_model[k]), k
    assert len(opt.state) == 0
    assert torch.equal(gen.get_state(), before_gen)


def test_an_intact_checkpoint_restores_the_files_state(
    tmp_path: Path, trained: tuple[dict[str, torch.Tensor], dict[str, str]]
) -> None:
    """Every optimizer tensor and the generator state equal the file's tensors (read back with safe_open)."""
    tensors, md = trained
    path = _write(tmp_path / "ok.safetensors", tensors, md)
    model, opt, gen = _live()
    step, _ = load_checkpoint(path, model, opt, gen)
    assert step == 2
    names = {id(p): n for n, p in model.named_parameters()}
    restored = {f"opt.{names[id(p)]}.{key}": v for p, state in opt.state.items() for key, v in state.items()}
    assert set(restored) == {k for k in tensors if k.startswith("opt.")}
    for k, v in restored.items():
        assert torch.equal(v, tensors[k]), k
    assert torch.equal(gen.get_state(), tensors["gen_state"])
    for k, v in model.state_dict().items():
        assert torch.equal(v, tensors[f"model.{k}"]), k


@pytest.mark.parametrize("case", ["no optimizer state after 2 steps", "no gen_state", "unknown parameter"])
def test_weights_only_reads_neither_optimizer_nor_generator_state(
    tmp_path: Path, trained: tuple[dict[str, torch.Tensor], dict[str, str]], case: str
) -> None:
    """opt=None, gen=None is the explicit weights-only load: the model tensors are what it checks and loads."""
    tensors, md = trained
    path = _write(tmp_path / "w.safetensors", _cases(tensors)[case][0], md)
    model = TinyLM(CFG)
    assert load_checkpoint(path, model, None, None)[0] == 2
    for k, v in model.state_dict().items():
        assert torch.equal(v, tensors[f"model.{k}"]), k


def test_a_step_0_checkpoint_resumes_with_a_fresh_optimizer(
    tmp_path: Path, trained: tuple[dict[str, torch.Tensor], dict[str, str]]
) -> None:
    """Before the first step AdamW has no state: a checkpoint at step 0 without any is complete."""
    tensors, md = trained
    path = _write(
        tmp_path / "s0.safetensors",
        {k: v for k, v in tensors.items() if not k.startswith("opt.")},
        {**md, "step": "0"},
    )
    model, opt, gen = _live()
    assert load_checkpoint(path, model, opt, gen)[0] == 0 and len(opt.state) == 0


@pytest.mark.parametrize("step", ["-5", "-1", "two"])
def test_a_negative_or_non_int_step_is_refused(
    tmp_path: Path, trained: tuple[dict[str, torch.Tensor], dict[str, str]], step: str
) -> None:
    tensors, md = trained
    path = _write(tmp_path / "neg.safetensors", tensors, {**md, "step": step})
    with pytest.raises(
        ValueError, match=rf"neg\.safetensors': metadata 'step' must be an int >= 0.*'{step}'"
    ):
        checkpoint_info(path)
    with pytest.raises(ValueError, match=r"metadata 'step' must be an int >= 0"):
        load_checkpoint(path, TinyLM(CFG), None, None)


def test_train_refuses_a_checkpoint_past_its_steps(
    tmp_path: Path, trained: tuple[dict[str, torch.Tensor], dict[str, str]]
) -> None:
    """The checkpoint is otherwise this run's (same meta and config), but records step 5 of a 2-step run."""
    tensors, md = trained
    path = _write(tmp_path / "run.safetensors", tensors, {**md, "step": "5"})
    model = TinyLM(CFG)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"run\.safetensors' records step 5, past this run's steps=2"):
        train(model, _batcher, steps=2, seed=3, ckpt=path, desc="train")
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_an_optimizer_other_than_adam_is_refused(
    tmp_path: Path, trained: tuple[dict[str, torch.Tensor], dict[str, str]]
) -> None:
    tensors, md = trained
    path = _write(tmp_path / "ok.safetensors", tensors, md)
    model = TinyLM(CFG)
    with pytest.raises(TypeError, match=r"opt must be a torch.optim.Adam or AdamW .*got SGD"):
        load_checkpoint(path, model, torch.optim.SGD(model.parameters(), lr=0.1), torch.Generator())
