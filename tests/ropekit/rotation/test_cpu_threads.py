"""The fused CPU kernel's threads: how many (work size, torch's setting), whose (torch's OpenMP team where it can
be shared, else the kernel's own pool: ``ropekit.kernels.cpu_build``), and that every split, fork and concurrent
caller still gets the PyTorch backend's result bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from ropekit import RopeSpec, apply_rope, apply_rope_tables, rope_tables
from ropekit.kernels import cpu_build
from ropekit.rotation import cpu_backend

pytestmark = pytest.mark.skipif(
    cpu_build.load() is None, reason="no C compiler: the fused CPU kernel is unavailable"
)


def _x(fmt: str, b: int, s: int, h: int) -> torch.Tensor:
    shape = {"bshd": (b, s, h, 128), "bhsd": (b, h, s, 128)}[fmt]
    return torch.rand(shape, dtype=torch.float64).to(torch.float32) * 2 - 1


def test_thread_count_from_work_size_and_torch_setting() -> None:
    """One thread per grain of work (2^18 elements; 2^16 for 16-bit storage on torch's OpenMP team, whose rotation
    is bound by its conversions), never more than torch's setting."""
    n = torch.get_num_threads()
    openmp = cpu_build.build_info().threads == "openmp"
    for dt, g in (
        (torch.float32, cpu_backend.GRAIN),
        (torch.bfloat16, cpu_backend.GRAIN_16BIT_OPENMP if openmp else cpu_backend.GRAIN),
        (torch.float16, cpu_backend.GRAIN_16BIT_OPENMP if openmp else cpu_backend.GRAIN),
    ):
        assert cpu_backend.grain(dt) == g
        try:
            torch.set_num_threads(2)
            assert (
                cpu_backend.threads_for(g - 1, dt) == 1
            )  # a few decoding sequences: the calling thread alone
            assert cpu_backend.threads_for(2 * g, dt) == 2
            assert cpu_backend.threads_for(g * 64, dt) == 2  # prefill: torch's setting, never more
            torch.set_num_threads(1)
            assert cpu_backend.threads_for(g * 64, dt) == 1
        finally:
            torch.set_num_threads(n)
    assert cpu_backend.threads_for(32 * 40 * 128) == 1  # float32 decode of 32 sequences: one thread


def _tasks() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc to count threads")
def test_multithreaded_split_is_exact_and_never_oversubscribes() -> None:
    """Work large enough for several threads, row counts that do not divide into chunks evenly: the result is the
    PyTorch backend's bit for bit (every row done exactly once), and the kernel never runs more threads than
    torch.get_num_threads() (its pool holds at most that many minus the caller). bhsd with 11 heads runs as head
    groups of 8 and 3 (units of one token's group), split into chunks that start inside a sequence."""
    n = torch.get_num_threads()
    spec = RopeSpec(128, base=500_000.0)
    cos, sin = rope_tables(torch.arange(331), spec)
    try:
        for fmt, heads in (("bshd", 7), ("bhsd", 11)):
            q = _x(fmt, 3, 331, heads)  # 890k / 1.4M elements: above 2 * GRAIN
            for threads in sorted({1, 2, n}):
                torch.set_num_threads(threads)
                before = _tasks()
                got = apply_rope_tables(q, None, cos, sin, spec, format=fmt, backend="cpu")[0]
                ref = apply_rope_tables(q, None, cos, sin, spec, format=fmt, backend="torch")[0]
                assert torch.equal(got, ref), (fmt, threads)
                if threads == 1:
                    assert _tasks() == before  # one thread: the caller alone, no pool thread started
    finally:
        torch.set_num_threads(n)


_THREADS_PROBE = (
    "import json, os, torch; torch.set_num_threads(2)\n"
    "from ropekit import RopeSpec, rope_tables, apply_rope_tables\n"
    "from ropekit.kernels import cpu_build\n"
    "spec = RopeSpec(128); q = torch.randn(1, 2048, 8, 128); c, s = rope_tables(torch.arange(2048), spec)\n"
    "q.mul_(1.0)  # torch's own OpenMP team exists before counting\n"
    "info = cpu_build.build_info()\n"
    "t0 = len(os.listdir('/proc/self/task'))\n"
    "ok = True\n"
    "for _ in range(20):\n"
    "    ref = apply_rope_tables(q, None, c, s, spec, backend='torch')[0]\n"
    "    got = apply_rope_tables(q, None, c, s, spec, backend='cpu')[0]\n"
    "    ok = ok and torch.equal(got, ref)\n"
    "maps = [line.split()[-1] for line in open('/proc/self/maps') if '/lib' in line and '.so' in line]\n"
    "omp = sorted({m for m in maps if os.path.basename(m).startswith(('libgomp', 'libomp', 'libiomp'))})\n"
    "print(json.dumps({'threads': info.threads, 'new_tasks': len(os.listdir('/proc/self/task')) - t0, 'exact': ok,\n"
    "                  'runtimes': omp}))\n"
)


def _run(code: str, env: dict[str, str]) -> str:
    """The last line ``code`` prints in a fresh interpreter with ``env`` (ROPEKIT_CPU_THREADS only as given)."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env={**{k: v for k, v in os.environ.items() if k != "ROPEKIT_CPU_THREADS"}, **env},
    )
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc to count threads")
@pytest.mark.parametrize("mode", ["", "openmp", "pool"])
def test_threads_share_torch_openmp_or_own_bounded_pool(mode: str) -> None:
    """A fresh process with torch limited to 2 threads, 20 large calls (two threads' work each), bit for bit the
    PyTorch backend's result. Where torch runs on GNU OpenMP (its Linux wheels), the default and "openmp" run the
    kernel on torch's own team: no thread is started and exactly one OpenMP runtime is loaded (the kernel's
    libgomp.so.1 resolved to torch's). "pool": the kernel's own pool, at most one thread beside the caller."""
    res = json.loads(_run(_THREADS_PROBE, {"ROPEKIT_CPU_THREADS": mode} if mode else {}))
    assert res["exact"]
    # shareable: GNU's runtime under its own soname (torch 2.4-2.6's CUDA wheels load a renamed
    # libgomp-<hash>.so.1, which a -fopenmp build cannot resolve to: the kernel then runs on its own pool)
    shareable = torch.backends.openmp.is_available() and any(
        os.path.basename(r).startswith("libgomp.so.1") for r in res["runtimes"]
    )
    if mode == "pool" or not shareable:
        assert res["threads"] == "pool" and res["new_tasks"] <= 1
    else:
        assert res["threads"] == "openmp"
        assert res["new_tasks"] == 0
        assert len(res["runtimes"]) == 1


def test_threads_setting_is_checked() -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import torch, ropekit\n"
                "ropekit.apply_rope(torch.randn(1, 4, 2, 16), None, torch.arange(4), ropekit.RopeSpec(16))"
            ),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "ROPEKIT_CPU_THREADS": "tbb"},
        check=False,
    )
    assert r.returncode != 0 and "ROPEKIT_CPU_THREADS='tbb'" in r.stderr and "'openmp' or 'pool'" in r.stderr


_FORK_PROBE = """
import os, sys, time, torch
torch.set_num_threads(2)
from ropekit import RopeSpec, rope_tables, apply_rope_tables
spec = RopeSpec(128); q = torch.randn(1, 2048, 8, 128); c, s = rope_tables(torch.arange(2048), spec)
ref = apply_rope_tables(q, None, c, s, spec, backend='cpu')[0]  # two threads' work: the parent ran a team
q.mul_(1.0)
pid = os.fork()
if pid == 0:
    out = apply_rope_tables(q, None, c, s, spec, backend='cpu')[0]
    torch.set_num_threads(1)  # torch's own parallel ops would hang in this child (GNU OpenMP)
    os._exit(0 if torch.equal(out, ref) else 3)
t0 = time.time()
while time.time() - t0 < 60:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print(os.waitstatus_to_exitcode(status)); sys.exit(0)
    time.sleep(0.05)
os.kill(pid, 9); os.waitpid(pid, 0); print('hang')
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("mode", ["openmp", "pool"])
def test_forked_child_rotates_on_its_calling_thread(mode: str) -> None:
    """A child forked after the parent ran the kernel on two threads: the kernel's large call still completes in
    the child with the parent's result (OpenMP build: on the calling thread; pool: on workers of its own). Without the OpenMP build's fork handler the child
    hangs in the OpenMP region, as torch's own ops do there."""
    assert _run(_FORK_PROBE, {"ROPEKIT_CPU_THREADS": mode}) == "0"


_FORK_THREADS_PROBE = """
import json, os, sys, torch
torch.set_num_threads(2)
from ropekit import RopeSpec, rope_tables, apply_rope_tables
from ropekit.kernels import cpu_build
spec = RopeSpec(128); q = torch.randn(1, 2048, 8, 128); c, s = rope_tables(torch.arange(2048), spec)
ref = apply_rope_tables(q, None, c, s, spec, backend='cpu')[0]  # two threads' work: the parent ran in parallel
pid = os.fork()
if pid == 0:
    before = len(os.listdir('/proc/self/task'))
    out = apply_rope_tables(q, None, c, s, spec, backend='cpu')[0]
    after = len(os.listdir('/proc/self/task'))
    torch.set_num_threads(1)  # torch's own parallel ops would hang in this child (GNU OpenMP)
    print(json.dumps({'threads': cpu_build.build_info().threads, 'before': before, 'after': after,
                      'exact': torch.equal(out, ref)}), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


@pytest.mark.skipif(
    not hasattr(os, "fork") or not os.path.isdir("/proc/self/task"), reason="needs fork and /proc"
)
@pytest.mark.parametrize("mode", ["openmp", "pool"])
def test_what_a_forked_child_runs_its_parallel_calls_on(mode: str) -> None:
    """What docs/kernels.md says about fork (finding 8): a child of the OpenMP build runs its calls on its calling
    thread (no thread started); a child of the pool build has none of the parent's workers and starts one of its
    own at its first parallel call. Both compute the parent's result."""
    res = json.loads(_run(_FORK_THREADS_PROBE, {"ROPEKIT_CPU_THREADS": mode}))
    assert res["exact"]
    if res["threads"] == "openmp":
        assert res["after"] == res["before"]
    else:
        assert res["threads"] == "pool" and res["after"] == res["before"] + 1


def test_concurrent_python_threads_each_get_their_own_exact_result() -> None:
    """Four Python threads rotating large tensors at once (each call split over the kernel's threads: OpenMP teams
    of their own, or the pool's jobs one after another): every result is the PyTorch backend's, bit for bit."""
    import threading

    spec = RopeSpec(128)
    results: list[bool] = []

    def work(seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        q = torch.randn(1, 2048, 8, 128, generator=g)
        pos = torch.randint(0, 100_000, (2048,), generator=g)
        cos, sin = rope_tables(pos, spec)
        ref = apply_rope_tables(q, None, cos, sin, spec, backend="torch")[0]
        for _ in range(5):
            got = apply_rope_tables(q, None, cos, sin, spec, backend="cpu")[0]
            results.append(torch.equal(got, ref) and torch.equal(apply_rope(q, None, pos, spec)[0], ref))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 20 and all(results)
