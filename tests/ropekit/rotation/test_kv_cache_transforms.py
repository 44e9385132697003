"""The fused KV-cache writes under forward-mode AD and torch.func, with out-of-range index ints, and under
``torch.compile(dynamic=True)``.

- A dual k (``forward_ad.make_dual``) was written by the kernel without its tangent (silently), and under
  torch.func (vmap, jvp, grad) the write failed on "Cannot access data pointer". The write is inference-only (as
  for reverse-mode autograd): a ValueError names the argument, before anything is written.
- ``offsets=2**70`` (or ``slots=2**70``) raised torch's bare OverflowError; now a ValueError naming the argument,
  its value and the valid range. A numpy integer is an int (as everywhere in ropekit).
- Traced checks formatted a symbolic size into their device-assert message: one graph per new-token count
  (offsets) or per cache size (slots). ``off + S`` could also wrap past int64 and pass the check.

Oracle: RoFormer's rotation in float64 (tests/ropekit/rotation/kv_oracle.py) indexed into a copy of the cache.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwAD

from ropekit.rotation.kv_cache import rope_cache_write, rope_paged_cache_write
from ropekit.spec import RopeSpec
from tests.ropekit.rotation.kv_oracle import BASE, close, rope64

SPEC = RopeSpec(16, base=BASE)


def _contig() -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    return {
        "k": torch.randn(2, 3, 2, 16, generator=g),
        "v": torch.randn(2, 3, 2, 16, generator=g),
        "cache_k": torch.randn(2, 2, 8, 16, generator=g),  # bhsd
        "cache_v": torch.randn(2, 2, 8, 16, generator=g),
        "offsets": torch.tensor([0, 4]),
        "q": torch.randn(2, 3, 4, 16, generator=g),
    }


def _paged() -> dict[str, Any]:
    g = torch.Generator().manual_seed(1)
    return {
        "k": torch.randn(3, 2, 16, generator=g),
        "v": torch.randn(3, 2, 16, generator=g),
        "cache_k": torch.randn(4, 4, 2, 16, generator=g),
        "cache_v": torch.randn(4, 4, 2, 16, generator=g),
        "slots": torch.tensor([1, 6, 13]),
        "q": torch.randn(3, 4, 16, generator=g),
        "positions": torch.tensor([4, 9, 2]),
    }


def _write(paged: bool, a: dict[str, Any]) -> None:
    if paged:
        rope_paged_cache_write(
            a["k"], a["v"], a["cache_k"], a["cache_v"], a["slots"], SPEC, positions=a["positions"], q=a["q"]
        )
    else:
        rope_cache_write(a["k"], a["v"], a["cache_k"], a["cache_v"], a["offsets"], SPEC, q=a["q"])


def _copies(a: dict[str, Any]) -> dict[str, Any]:
    return {n: x.clone() for n, x in a.items()}


@pytest.mark.parametrize("name", ["k", "v", "q", "cache_k", "cache_v"])
@pytest.mark.parametrize("paged", [False, True])
def test_a_dual_tensor_is_refused_before_anything_is_written(backend: str, paged: bool, name: str) -> None:
    """After a plain call of the same geometry (its prepared plan stored), a dual argument: a ValueError naming it;
    the caches and q unchanged."""
    a = _paged() if paged else _contig()
    _write(paged, _copies(a)), _write(paged, _copies(a))  # the geometry's plan
    b = _copies(a)
    before = _copies(b)
    with fwAD.dual_level():
        b[name] = fwAD.make_dual(b[name], torch.ones_like(b[name]))
        with pytest.raises(ValueError, match=rf"^{name} carries a forward-mode AD tangent .* inference-only"):
            _write(paged, b)
    for n in ("cache_k", "cache_v", "q"):
        assert torch.equal(fwAD.unpack_dual(b[n]).primal, before[n]), f"{n} was written"


@pytest.mark.parametrize("paged", [False, True])
def test_dual_tables_are_refused(paged: bool) -> None:
    from ropekit import rope_tables

    a = _paged() if paged else _contig()
    pos = a.pop("positions") if paged else a["offsets"][:, None] + torch.arange(3)
    cos, sin = rope_tables(pos, SPEC)
    idx = a["slots"] if paged else a["offsets"]
    write = rope_paged_cache_write if paged else rope_cache_write
    before = a["cache_k"].clone()
    with fwAD.dual_level():
        tables = (cos, fwAD.make_dual(sin, torch.ones_like(sin)))
        with pytest.raises(ValueError, match=r"^tables\[1\] \(sin\) carries a forward-mode AD tangent"):
            write(a["k"], a["v"], a["cache_k"], a["cache_v"], idx, SPEC, tables=tables)
    assert torch.equal(a["cache_k"], before)


@pytest.mark.parametrize("paged", [False, True])
def test_an_open_dual_level_without_dual_tensors_writes_as_usual(backend: str, paged: bool) -> None:
    """Only dual tensors are refused: inside ``fwAD.dual_level()`` plain tensors are written, exactly."""
    a = _paged() if paged else _contig()
    b = _copies(a)
    with fwAD.dual_level():
        _write(paged, b)
    if paged:
        want_k = a["cache_k"].double().reshape(16, 2, 16)
        want_k[a["slots"]] = rope64(a["k"], a["positions"], 16, "half")
        close(b["cache_k"].reshape(16, 2, 16), want_k)
        close(b["q"], rope64(a["q"], a["positions"], 16, "half"))
    else:
        pos = a["offsets"][:, None] + torch.arange(3)
        want_k = a["cache_k"].double().transpose(1, 2).clone()  # [B, S_max, H, D]
        rk = rope64(a["k"], pos, 16, "half")
        for i in range(2):
            want_k[i, pos[i]] = rk[i]
        close(b["cache_k"].transpose(1, 2), want_k)
        close(b["q"], rope64(a["q"], pos, 16, "half"))


_TRANSFORMS: dict[str, Callable[[Callable[[torch.Tensor], torch.Tensor], torch.Tensor], object]] = {
    "vmap": lambda f, k: torch.func.vmap(f)(torch.stack([k, k])),
    "jvp": lambda f, k: torch.func.jvp(f, (k,), (k,)),
    "grad": lambda f, k: torch.func.grad(lambda x: f(x).sum())(k),
}


@pytest.mark.parametrize("transform", sorted(_TRANSFORMS))
@pytest.mark.parametrize("paged", [False, True])
def test_torch_func_transforms_are_refused(paged: bool, transform: str) -> None:
    a = _paged() if paged else _contig()
    _write(paged, _copies(a)), _write(paged, _copies(a))  # the geometry's plan
    b = _copies(a)

    def f(k: torch.Tensor) -> torch.Tensor:
        _write(paged, {**b, "k": k})
        return b["cache_k"] * 1.0

    with pytest.raises(ValueError, match=r"^k is a tensor of a torch.func transform .* inference-only"):
        _TRANSFORMS[transform](f, b["k"])
    assert torch.equal(b["cache_k"], a["cache_k"]) and torch.equal(b["q"], a["q"])
    # a write inside a transform whose own tensors are all plain: refused too (its kernel, its scratch tensors)
    with pytest.raises(ValueError, match=r"cannot run under a torch.func transform"):
        torch.func.vmap(lambda x: (_write(paged, b), x)[1])(torch.zeros(2))
    assert torch.equal(b["cache_k"], a["cache_k"])


# ---------------------------------------------------------------- index ints beyond int64


@pytest.mark.parametrize("value", [2**70, -(2**70), 2**63, -(2**63) - 1])
def test_an_offsets_int_beyond_int64_is_a_value_error_naming_the_range(backend: str, value: int) -> None:
    a = _contig()
    before = a["cache_k"].clone()
    shown = str(value)[:9]  # integers.shown keeps the first digits of a long value
    with pytest.raises(
        ValueError, match=rf"^offsets = {shown}.* out of range: need 0 <= offset <= 5 \(3 new"
    ):
        rope_cache_write(a["k"], a["v"], a["cache_k"], a["cache_v"], value, SPEC)
    assert torch.equal(a["cache_k"], before)


def test_offsets_beyond_int64_with_more_tokens_than_rows_says_so() -> None:
    a = _contig()
    k = torch.randn(2, 9, 2, 16)
    with pytest.raises(
        ValueError, match=r"^offsets = .* out of range: no offset fits 9 new tokens in a cache of 8"
    ):
        rope_cache_write(k, k, a["cache_k"], a["cache_v"], 2**70, SPEC)


@pytest.mark.parametrize("value", [2**70, -(2**80)])
def test_a_slots_int_beyond_int64_is_a_value_error_naming_the_range(backend: str, value: int) -> None:
    a = _paged()
    with pytest.raises(ValueError, match=r"^slots = .* out of range: need 0 <= slot < 16 \(num_blocks"):
        rope_paged_cache_write(
            a["k"][:1], a["v"][:1], a["cache_k"], a["cache_v"], value, SPEC, positions=torch.tensor([0])
        )


def test_a_numpy_int_offset_is_an_int(backend: str) -> None:
    a, b = _contig(), _contig()
    rope_cache_write(a["k"], a["v"], a["cache_k"], a["cache_v"], np.int64(2), SPEC)
    pos = 2 + torch.arange(3)
    want = b["cache_k"].double().transpose(1, 2).clone()
    want[:, 2:5] = rope64(b["k"], pos, 16, "half")
    close(a["cache_k"].transpose(1, 2), want)


# ---------------------------------------------------------------- torch.compile with dynamic sizes


def _one_graph(fn: Callable[..., Any], make: Callable[[int], tuple[torch.Tensor, ...]], oracle: Any) -> int:
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("eager")
    compiled = torch.compile(fn, fullgraph=True, dynamic=True, backend=counter)
    with torch.no_grad():
        for n in range(5, 10):
            args = make(n)
            oracle(n, args, compiled(*[x.clone() for x in args]))
    return int(counter.frame_count)


def test_contiguous_write_one_graph_for_every_length_and_cache_size() -> None:
    """New-token count S and cache rows S_max both dynamic: one graph (the offsets message formatted S)."""

    def fn(k: torch.Tensor, ck: torch.Tensor, cv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rope_cache_write(k, k, ck, cv, torch.tensor([1, 2]), SPEC)
        return ck, cv

    def make(n: int) -> tuple[torch.Tensor, ...]:
        return torch.randn(2, n, 2, 16), torch.zeros(2, 2, n + 3, 16), torch.zeros(2, 2, n + 3, 16)

    def oracle(n: int, args: tuple[torch.Tensor, ...], out: tuple[torch.Tensor, ...]) -> None:
        pos = torch.tensor([[1], [2]]) + torch.arange(n)
        rk = rope64(args[0], pos, 16, "half")
        for i in range(2):
            close(out[0][i, :, pos[i]].transpose(0, 1), rk[i])

    assert _one_graph(fn, make, oracle) == 1


def test_paged_write_one_graph_for_every_token_count_and_block_count() -> None:
    """T tokens and num_blocks both dynamic: one graph (the slots message formatted num_blocks * block_size)."""

    def fn(k: torch.Tensor, ck: torch.Tensor, cv: torch.Tensor, sl: torch.Tensor) -> tuple[torch.Tensor, ...]:
        rope_paged_cache_write(k, k, ck, cv, sl, SPEC, positions=sl + 3)
        return ck, cv

    def make(n: int) -> tuple[torch.Tensor, ...]:
        return torch.randn(n, 2, 16), torch.zeros(n, 4, 2, 16), torch.zeros(n, 4, 2, 16), torch.arange(n) * 3

    def oracle(n: int, args: tuple[torch.Tensor, ...], out: tuple[torch.Tensor, ...]) -> None:
        sl = args[3]
        close(out[0].reshape(4 * n, 2, 16)[sl], rope64(args[0], sl + 3, 16, "half"))

    assert _one_graph(fn, make, oracle) == 1


def test_traced_offsets_check_does_not_wrap_past_int64() -> None:
    """``offsets + S`` wrapped to a negative number for an offset near 2**63 and passed the traced check."""
    a = _contig()
    write = torch.compile(rope_cache_write, fullgraph=True, backend="eager")
    with pytest.raises(RuntimeError, match="offsets must fit the new tokens in the cache"):
        write(a["k"], a["v"], a["cache_k"], a["cache_v"], torch.tensor([0, 2**63 - 2]), SPEC)


def test_eager_offsets_check_does_not_wrap_past_int64(backend: str) -> None:
    """The same in eager calls (the PyTorch check, as without a compiler, and the C check)."""
    a = _contig()
    before = a["cache_k"].clone()
    with pytest.raises(ValueError, match=r"offsets\[1\] = 9223372036854775806 does not fit 3 new tokens"):
        rope_cache_write(a["k"], a["v"], a["cache_k"], a["cache_v"], torch.tensor([0, 2**63 - 2]), SPEC)
    assert torch.equal(a["cache_k"], before)


def test_an_int_offset_stays_symbolic_under_dynamic_compile() -> None:
    """An int ``offsets`` argument of a function compiled with dynamic=True is a SymInt (dynamo reports its type as
    int): checked by comparisons, never converted to a Python int (which would pin it: a graph per offset)."""

    def fn(k: torch.Tensor, ck: torch.Tensor, cv: torch.Tensor, off: int) -> torch.Tensor:
        rope_cache_write(k, k, ck, cv, off, SPEC)
        return ck

    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("eager")
    compiled = torch.compile(fn, fullgraph=True, dynamic=True, backend=counter)
    k = torch.randn(2, 3, 2, 16)
    for off in (1, 2, 4):
        ck = compiled(k, torch.zeros(2, 2, 8, 16), torch.zeros(2, 2, 8, 16), off)
        close(ck[:, :, off : off + 3].transpose(1, 2), rope64(k, off + torch.arange(3), 16, "half"))
    assert counter.frame_count == 1
