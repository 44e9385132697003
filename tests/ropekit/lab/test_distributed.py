"""Data-parallel training (torchrun, gloo on CPU, DDP) equals one process on the same global batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import ropekit
from ropekit.lab.data import train_batch
from ropekit.lab.model import LMConfig, TinyLM
from ropekit.lab.train import train

CFG = {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "ffn": 64}
WORKER = """
import json, sys
import pytest
import torch
from ropekit.lab.data import train_batch
from ropekit.lab.distributed import setup, teardown
from ropekit.lab.model import LMConfig, TinyLM
from ropekit.lab.train import train

rank, size = setup()
torch.set_num_threads(1)
data = torch.randint(0, 256, (4000,), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
torch.manual_seed(0)
model = TinyLM(LMConfig(**json.loads(sys.argv[2])))
res = train(model, lambda g: train_batch(data, 8, 24, g), steps=5, seed=3, desc="ddp")
if rank == 0:
    with open(sys.argv[1], "w") as f:
        json.dump({"size": size, "losses": res.losses,
                   "weights": {k: v.flatten().tolist() for k, v in model.state_dict().items()}}, f)
teardown()
"""


def test_two_gloo_processes_equal_one(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = tmp_path / "ddp.json"
    env = dict(
        os.environ,
        PYTHONPATH=str(Path(ropekit.__file__).parents[1]),
        GLOO_SOCKET_IFNAME="lo",
        OMP_NUM_THREADS="1",
    )
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(script),
        str(out),
        json.dumps(CFG),
    ]
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ddp = json.loads(out.read_text())
    assert ddp["size"] == 2

    data = torch.randint(0, 256, (4000,), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = TinyLM(LMConfig(**CFG))
    single = train(model, lambda g: train_batch(data, 8, 24, g), steps=5, seed=3, desc="single")
    torch.testing.assert_close(torch.tensor(ddp["losses"]), torch.tensor(single.losses), rtol=1e-5, atol=1e-6)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(torch.tensor(ddp["weights"][k]), v.flatten(), rtol=1e-4, atol=1e-6, msg=k)
    assert single.losses[-1] < single.losses[0]  # it trained


def test_a_gpu_machine_still_joins_with_gloo(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lab trains on the CPU: on a machine with CUDA, the process group must still be gloo (NCCL cannot reduce
    the CPU gradients; the GPU machine's suite failed here when setup chose NCCL whenever CUDA was available)."""
    import torch.distributed as dist

    from ropekit.lab import distributed

    joined: list[object] = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, *a, **kw: joined.append(backend))
    distributed.setup()
    assert joined == ["gloo"]
