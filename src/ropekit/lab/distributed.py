# SPDX-License-Identifier: MIT
"""Data-parallel training for the lab on an existing engine: ``torch.distributed`` with DistributedDataParallel
and the gloo backend. The lab's models train on the CPU, so the process group is gloo on every machine, GPU ones
included (NCCL reduces CUDA tensors only: the CPU gradients' all-reduce would fail there). Launch any lab command
under torchrun, e.g.

    torchrun --nproc_per_node 2 -m ropekit.lab extrapolation --quick

Every rank draws the same global batch from the same seeded generator and trains on its contiguous share
(batch / world size rows); DDP averages the gradients, so with equal shares each step is the step of one process
on the global batch (loss curves equal within float rounding; ``tests/ropekit/lab/test_distributed.py``).
Only rank 0 prints progress and writes checkpoints and results.
"""

from __future__ import annotations

import os

import torch.distributed as dist

__all__ = ["is_main", "setup", "teardown", "world"]


def setup() -> tuple[int, int]:
    """Join the process group torchrun describes (``WORLD_SIZE`` > 1 in the environment); returns (rank, size)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size > 1 and not dist.is_initialized():
        dist.init_process_group("gloo")  # CPU tensors, whether or not the machine has a GPU
    return world()


def world() -> tuple[int, int]:
    """(rank, world size) of the initialised process group, (0, 1) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main() -> bool:
    return world()[0] == 0


def teardown() -> None:
    """Leave the process group together: a barrier, then ``destroy_process_group``. Rank 0 writes results after
    training while the others are done; a rank that destroyed its gloo context while a peer still held the
    connection could abort at exit ("terminate called without an active exception", seen in CI)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
