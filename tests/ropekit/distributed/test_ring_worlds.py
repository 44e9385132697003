"""Sharded RoPE + ring attention (and Ulysses all-to-all) on 2 and 4 gloo processes equal one process.

One spawn per world size runs every case (tests/ropekit/distributed/_worlds.py); each test below checks one case of
that run. Oracle: float64 full softmax attention written from the definition with RoPE at global positions via
``ropekit.apply_rope``, on the unsharded sequence; gradients of q, k, v (before RoPE) from its autograd.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.ropekit.distributed import _worlds

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available() or sys.platform == "win32",
    reason="needs torch.distributed with gloo",
)

WORLDS = (2, 4)
LAYOUTS = ("contiguous", "zigzag", "stripe")
TOL = {"float64": 1e-10, "float32": 2e-5}
_cache: dict[int, dict[str, Any]] = {}


def results(world: int, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Spawn the world once (per pytest session) and return every case's errors; a failed spawn is not retried."""
    if world not in _cache:
        out = tmp_path_factory.mktemp(f"world{world}") / "errors.json"
        try:
            mp.spawn(_worlds.run, args=(world, _worlds.free_port(), str(out)), nprocs=world, join=True)
            _cache[world] = json.loads(Path(out).read_text())
        except (
            mp.ProcessRaisedException,
            mp.ProcessExitedException,
            OSError,
            ValueError,
        ) as e:  # crash, no file
            _cache[world] = {"__error__": f"{type(e).__name__}: {e}"}
    if "__error__" in _cache[world]:
        pytest.fail(f"the {world}-process world failed: {_cache[world]['__error__']}")
    return _cache[world]


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("kind", ["ring", "packed"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_ring_matches_single_process(
    world: int, kind: str, layout: str, dtype: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    res = results(world, tmp_path_factory)
    assert res[f"rows/{kind}/{layout}"], "shard_indices disagrees with the textbook layout formula"
    errs = res[f"{kind}/{layout}/{dtype}"]
    assert set(errs) == {"out", "dq", "dk", "dv"}
    assert max(errs.values()) <= TOL[dtype], errs


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("kind", ["ring", "packed"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_local_positions_are_wrong(
    world: int, kind: str, layout: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Negative control: rotating each shard with local positions 0..s-1 breaks the equality."""
    errs = results(world, tmp_path_factory)[f"negative/{kind}/{layout}"]
    assert errs["out"] > 1e-2, errs


@pytest.mark.parametrize("world", WORLDS)
def test_noncausal_packed_and_ulysses(world: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    res = results(world, tmp_path_factory)
    assert max(res["noncausal-packed/zigzag/float64"].values()) <= 1e-10, res[
        "noncausal-packed/zigzag/float64"
    ]
    assert max(res["ulysses/contiguous/float64"].values()) <= 1e-10, res["ulysses/contiguous/float64"]


@pytest.mark.parametrize("world", WORLDS)
def test_one_bad_rank_raises_everywhere(world: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The last rank passes a wrong positions length: it names the numbers, the others name that rank."""
    assert results(world, tmp_path_factory)["agreement"]
    for case in ("cu_seqlens", "packed-rope-ids", "ring-dtype", "ulysses-dtype", "ulysses-bad-rank"):
        assert results(world, tmp_path_factory)[f"disagree/{case}"], case


@pytest.mark.parametrize("world", WORLDS)
def test_double_backward(world: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Ulysses' all-to-alls are differentiable twice: dq and the gradients of sum(dq * q) equal the oracle's
    (they used to lose the second-order path silently); ring_attention refuses create_graph=True on every rank
    (its second-order gradients used to be silently wrong)."""
    res = results(world, tmp_path_factory)
    assert res["double-backward/ring"], "ring_attention did not refuse create_graph=True on every rank"
    errs = res["double-backward/ulysses"]
    assert set(errs) == {"dq", "hq", "hk", "hv"}
    assert max(errs.values()) <= 1e-10, errs


def test_non_member_of_group_is_refused(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Rank 0 of a 4-process world calls seq_to_heads, heads_to_seq and ring_attention with the group {1, 3}:
    ValueError naming group and this process, not torch's -100 placeholder or "chunk expects chunks > 0"."""
    assert results(4, tmp_path_factory)["subgroup/non-member"]


def test_ring_on_a_subgroup(tmp_path_factory: pytest.TempPathFactory) -> None:
    """group= with global ranks {1, 3} of a 4-process world: peers are mapped to global ranks."""
    errs = results(4, tmp_path_factory)["subgroup/zigzag/float64"]
    assert max(errs.values()) <= 1e-10, errs


def test_torch_context_parallel_order_is_zigzag(tmp_path_factory: pytest.TempPathFactory) -> None:
    """torch's public context_parallel (head-tail load balancer) shards exactly like layout="zigzag" (2 ranks;
    other world sizes: tests/ropekit/distributed/test_interop.py against its index generator)."""
    got = results(2, tmp_path_factory)["torch_cp"]
    if isinstance(got, str):
        pytest.skip(got)
    assert got == {"positions": 1.0, "shard": 1.0, "torch_unshard": 1.0, "ropekit_unshard": 1.0}
