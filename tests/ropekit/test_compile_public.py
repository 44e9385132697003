"""Every public callable of ``ropekit`` under ``torch.compile(fullgraph=True)``: no graph break, the eager values.

The list is enumerated from ``ropekit.__all__``: a new public function or module without an example here fails
``test_every_public_callable_has_an_example``. Found by writing it: ``apply_rope_axes`` / ``axis_tables``
(``dataclasses.replace`` in the trace), ``apply_rope_varlen`` / ``positions_from_cu_seqlens`` /
``positions_from_mask`` (value checks with host syncs), the KV-cache writes (the C kernel's load lock, ctypes
checks) and multi-axis ``Rotary`` broke the graph. Traced, value checks run on the device
(``torch._assert_async``); ``test_traced_checks_still_refuse_bad_values`` shows they still refuse.

Oracle: the same call in eager mode (itself tested against float64 references elsewhere). Backend "eager":
dynamo's tracing is what breaks; inductor's code generation is covered by tests/ropekit/rotation/test_compile.py.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
import torch

import ropekit
from ropekit import AxisMap, RopeSpec

S = RopeSpec(16, base=1e4)
M = RopeSpec(16, base=1e4, axes=AxisMap.contiguous((2, 3, 3)))
#: not called: value types (validated at construction, no tensors), the version string, the schemes' module
NOT_CALLABLES = {
    "AxisMap": "frozen dataclass",
    "RopeSpec": "frozen dataclass",
    "__version__": "str",
    "scaling": "module",
}


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


#: inputs made outside the traced functions (a generator cannot be created inside a graph)
_QS = {
    (seed, heads): torch.randn(2, 5, heads, 16, generator=_g(seed))
    for seed, heads in ((5, 4), (6, 2), (6, 4), (7, 4), (8, 2))
}
_K1, _K2, _Q3 = (
    torch.randn(*shape, generator=_g(i))
    for i, shape in ((1, (2, 3, 2, 16)), (2, (5, 2, 16)), (3, (5, 4, 16)))
)


def _pos3(n: int, shift: int) -> torch.Tensor:
    t = torch.arange(n) + shift
    return torch.stack([t, t // 2, t % 3])[:, None, :].expand(3, 2, n).contiguous()


def _cache_write(shift: int) -> tuple[torch.Tensor, ...]:
    k = _K1
    ck, cv = torch.zeros(2, 2, 16, 16), torch.zeros(2, 2, 16, 16)
    ropekit.rope_cache_write(k, k, ck, cv, torch.tensor([shift, 3 + shift]), S)
    return ck, cv


def _paged_write(shift: int) -> tuple[torch.Tensor, ...]:
    k, q = _K2, _Q3.clone()
    ck, cv = torch.zeros(4, 4, 2, 16), torch.zeros(4, 4, 2, 16)
    slots = torch.tensor([0, 5, 6, 9, 14]) + shift
    ropekit.rope_paged_cache_write(k, k, ck, cv, slots, S, positions=torch.arange(5) + 7 * shift, q=q)
    return ck, cv, q


_ROTARY = ropekit.Rotary(S)
_ROTARY_AXES = ropekit.Rotary(M)
_MIXED = ropekit.MixedRotary(16, 4, generator=_g(4))
_DINO = ropekit.DinoV3Rotary(16)


def _q(seed: int, heads: int = 4) -> torch.Tensor:
    return _QS[(seed, heads)]


#: name -> f(shift): two calls (shift 0, then 1) must run the same graph shape with other values
EXAMPLES: dict[str, Callable[[int], Any]] = {
    "apply_rope": lambda s: ropekit.apply_rope(_q(5), _q(6, 2), torch.arange(5).expand(2, 5) + s, S),
    "apply_rope_tables": lambda s: ropekit.apply_rope_tables(
        _q(5), _q(6, 2), *ropekit.rope_tables(torch.arange(5) + s, S), S
    ),
    "apply_rope_axes": lambda s: ropekit.apply_rope_axes(_q(5), _q(6, 2), _pos3(5, s), M),
    "apply_rope_varlen": lambda s: ropekit.apply_rope_varlen(
        _q(7)[0], _q(8, 2)[0], torch.tensor([0, 2, 5]), S, offsets=torch.tensor([3, 9]) + s
    ),
    "axis_tables": lambda s: ropekit.axis_tables(_pos3(5, s), M),
    "rope_tables": lambda s: ropekit.rope_tables(torch.arange(6) + s, S),
    "positions_from_cu_seqlens": lambda s: ropekit.positions_from_cu_seqlens(
        torch.tensor([0, 2 + s, 5]), total=5
    ),
    "positions_from_mask": lambda s: ropekit.positions_from_mask(torch.tensor([[0, s, 1, 1], [1, 1, 1, 1]])),
    "positions_with_offset": lambda s: ropekit.positions_with_offset(5, torch.tensor([3, 7]) + s),
    "rope_cache_write": _cache_write,
    "rope_paged_cache_write": _paged_write,
    "Rotary": lambda s: (
        _ROTARY(_q(5), _q(6, 2), positions=torch.arange(5) + s),
        _ROTARY_AXES(_q(5), _q(6, 2), positions=_pos3(5, s)),
    ),
    "MixedRotary": lambda s: _MIXED(
        _q(5), _q(6), positions=torch.stack([torch.arange(5.0) + s, torch.arange(5.0)])
    ),
    "DinoV3Rotary": lambda s: _DINO(_q(5)[:, :5], None, grid=(2, 2)),
}


def _flat(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for item in x for t in _flat(item)]
    return []


def test_every_public_callable_has_an_example() -> None:
    public = set(ropekit.__all__) - set(NOT_CALLABLES)
    assert public == set(EXAMPLES), (
        f"public names without a compile example: {sorted(public - set(EXAMPLES))}"
    )
    for name in NOT_CALLABLES:
        obj = getattr(ropekit, name)
        assert inspect.ismodule(obj) or isinstance(obj, str) or inspect.isclass(obj)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_public_callable_compiles_fullgraph_with_eager_values(name: str) -> None:
    fn = EXAMPLES[name]
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend="eager")  # a graph break raises
    for shift in (0, 1):
        want, got = _flat(fn(shift)), _flat(compiled(shift))
        assert len(want) == len(got) > 0
        for a, b in zip(want, got, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)


def test_traced_checks_still_refuse_bad_values() -> None:
    """Value checks moved to the device in a trace: bad values still raise (RuntimeError naming the rule)."""
    torch._dynamo.reset()
    mask = torch.compile(ropekit.positions_from_mask, fullgraph=True, backend="eager")
    with pytest.raises(RuntimeError, match="only 0 and 1"):
        mask(torch.tensor([[0, 2, 1]]))
    cu = torch.compile(
        lambda c: ropekit.positions_from_cu_seqlens(c, total=5), fullgraph=True, backend="eager"
    )
    with pytest.raises(RuntimeError, match="non-decreasing"):
        cu(torch.tensor([0, 3, 2, 5]))
    with pytest.raises(RuntimeError, match="end at total"):
        cu(torch.tensor([0, 2, 4]))
    with pytest.raises(Exception, match="total="):  # no total: the output length would be data
        torch.compile(ropekit.positions_from_cu_seqlens, fullgraph=True, backend="eager")(
            torch.tensor([0, 5])
        )
    paged = torch.compile(_paged_write, fullgraph=True, backend="eager")
    with pytest.raises(RuntimeError, match="distinct and inside the cache"):
        paged(2)  # slots 2 .. 16: 16 is outside the 16-slot cache
    k = torch.randn(1, 3, 2, 16)
    ck = torch.zeros(1, 2, 4, 16)
    write = torch.compile(ropekit.rope_cache_write, fullgraph=True, backend="eager")
    # no sizes in the traced message: formatting a symbolic size would specialise it (one graph per length)
    with pytest.raises(RuntimeError, match="offsets must fit the new tokens in the cache"):
        write(k, k, ck, ck.clone(), torch.tensor([2]), S)  # 2 + 3 > 4 rows


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), 2.0**63])
@pytest.mark.parametrize("entry", ["apply_rope", "Rotary", "rope_tables"])
def test_compiled_float_positions_are_checked_on_the_device(entry: str, bad: float) -> None:
    """Eager calls refuse non-finite / too large float positions; traced ones must not return NaN silently."""
    from ropekit import RopeSpec, Rotary, apply_rope, rope_tables

    spec, q = RopeSpec(8), torch.randn(1, 4, 2, 8)
    rope = Rotary(spec)
    calls = {
        "apply_rope": lambda p: apply_rope(q, None, p, spec)[0],
        "Rotary": lambda p: rope(q, positions=p)[0],
        "rope_tables": lambda p: rope_tables(p, spec)[0],
    }
    f = torch.compile(calls[entry], fullgraph=True, backend="aot_eager")
    good = torch.tensor([0.0, 1.0, 2.5, 3.0])
    torch.testing.assert_close(f(good), calls[entry](good), rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="positions must be finite with magnitude below 2\\*\\*63"):
        f(torch.tensor([0.0, bad, 1.0, 2.0]))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_dinov3_training_augmentations_compile_fullgraph_with_the_seeded_draws(backend: str) -> None:
    """DinoV3Rotary in training mode with shift / jitter / rescale: torch.rand(generator=...) broke the graph
    ("Failed to convert args/kwargs to proxy"). The generator's state is now a tensor advanced by the custom op
    ``ropekit::dinov3_draw``: compiled with fullgraph, every step draws exactly what an eager module of the same
    seed draws, the coordinates lie in the documented ranges, and eval mode is the plain grid."""
    kw: dict[str, Any] = {"shift": 0.2, "jitter": 1.3, "rescale": 2.0, "n_prefix": 1, "seed": 3}
    q, k = _q(5)[:, :1].expand(2, 7, 4, 16).contiguous(), _q(6, 2)[:, :1].expand(2, 7, 2, 16).contiguous()
    q = q + torch.arange(7.0)[None, :, None, None]  # tokens differ
    torch._dynamo.reset()
    eager, traced = ropekit.DinoV3Rotary(16, **kw), ropekit.DinoV3Rotary(16, **kw)
    rotate = torch.compile(lambda q, k: traced(q, k, grid=(2, 3)), fullgraph=True, backend=backend)
    coords = torch.compile(lambda: traced.positions((2, 3)), fullgraph=True, backend=backend)
    plain = ropekit.DinoV3Rotary(16, n_prefix=1).eval().positions((2, 3))[:, 1:]
    seen = []
    for _ in range(3):
        want, got = eager(q, k, grid=(2, 3)), rotate(q, k)
        for a, b in zip(_flat(want), _flat(got), strict=True):
            torch.testing.assert_close(b, a, rtol=0, atol=0)
        pos, want_pos = coords(), eager.positions((2, 3))
        torch.testing.assert_close(pos, want_pos, rtol=0, atol=0)
        assert torch.equal(pos[:, 0], torch.zeros(2, dtype=torch.float64))  # the class token: identity
        for axis in range(
            2
        ):  # pos = m * (plain + s): |s| <= shift, m in [1/(jitter*rescale), jitter*rescale]
            x, y = plain[axis], pos[axis, 1:]
            m = float((y[-1] - y[0]) / (x[-1] - x[0]))
            s = float(y[0] / m - x[0])
            torch.testing.assert_close(y, m * (x + s), rtol=0, atol=1e-12)
            assert abs(s) <= 0.2 and 1 / 2.6 <= m <= 2.6
        seen.append(pos)
    assert not torch.equal(seen[0], seen[1])  # a new draw every step
    eager.eval(), traced.eval()
    torch.testing.assert_close(rotate(q, k)[0], eager(q, k, grid=(2, 3))[0], rtol=0, atol=0)
    torch.testing.assert_close(coords()[:, 1:], plain, rtol=0, atol=0)


# ---------------------------------------------------------------- dynamic shapes (training trial F1, F2, F3)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_public_callable_compiles_with_dynamic_true(name: str) -> None:
    """``torch.compile(dynamic=True)``: every float dynamo reads from an object becomes a symbolic input, so the
    spec's floats (base, p, a scaling's factor) reached the constant-folded phase constants as SymFloats and every
    entry point failed ("Unsupported hasattr call" in phases._plain). Oracle: the eager call."""
    fn = EXAMPLES[name]
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, dynamic=True, backend="eager")
    for shift in (0, 1):
        want, got = _flat(fn(shift)), _flat(compiled(shift))
        assert len(want) == len(got) > 0
        for a, b in zip(want, got, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)


def _rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=_g(sum(shape)))


def _pos3_of(q: torch.Tensor) -> torch.Tensor:
    """[3, b, s] positions built in the graph from q's (dynamic) sequence length."""
    t = torch.arange(q.shape[1])
    return torch.stack([t, t // 2, t % 3])[:, None, :].expand(3, q.shape[0], q.shape[1])


def _readme_attention_layer() -> torch.nn.Module:
    from tests.ropekit.rotation.test_compile import _readme_attention

    torch.manual_seed(0)
    return _readme_attention()(dim=32, n_heads=4, n_kv_heads=2, spec=S)


_ATTENTION = _readme_attention_layer()
_ROTARY_BHSD = ropekit.Rotary(S, format="bhsd")

#: name -> (inputs for a sequence length n, the call): one compiled function must serve every length
BY_LENGTH: dict[str, tuple[Callable[[int], tuple[Any, ...]], Callable[..., Any]]] = {
    "apply_rope": (
        lambda n: (_rand(2, n, 4, 16), _rand(2, n, 2, 16)),
        lambda q, k: ropekit.apply_rope(q, k, torch.arange(q.shape[1]), S),
    ),
    "apply_rope_tables": (
        lambda n: (_rand(2, n, 4, 16), _rand(2, n, 2, 16)),
        lambda q, k: ropekit.apply_rope_tables(q, k, *ropekit.rope_tables(torch.arange(q.shape[1]), S), S),
    ),
    "apply_rope_axes": (
        lambda n: (_rand(2, n, 4, 16), _rand(2, n, 2, 16)),
        lambda q, k: ropekit.apply_rope_axes(q, k, _pos3_of(q), M),
    ),
    "apply_rope_varlen": (
        lambda n: (_rand(n, 4, 16), torch.tensor([0, 2, n])),
        lambda q, cu: ropekit.apply_rope_varlen(q, None, cu, S, offsets=torch.tensor([3, 9])),
    ),
    "axis_tables": (lambda n: (_rand(2, n, 4, 16),), lambda q: ropekit.axis_tables(_pos3_of(q), M)),
    "rope_tables": (lambda n: (torch.arange(n) * 3,), lambda p: ropekit.rope_tables(p, S)),
    "positions_from_cu_seqlens": (
        lambda n: (_rand(n, 4, 16), torch.tensor([0, 2, n])),
        lambda q, cu: ropekit.positions_from_cu_seqlens(cu, total=q.shape[0]),
    ),
    "positions_from_mask": (
        lambda n: ((torch.arange(n)[None] >= torch.tensor([[1], [0]])).long(),),
        ropekit.positions_from_mask,
    ),
    "positions_with_offset": (
        lambda n: (_rand(2, n, 4, 16),),
        lambda q: (
            ropekit.positions_with_offset(q.shape[1], 7),
            ropekit.positions_with_offset(q.shape[1], torch.tensor([3, 7])),
        ),
    ),
    "rope_cache_write": (lambda n: (_rand(2, n, 2, 16),), lambda k: _cache_write_n(k)),
    "rope_paged_cache_write": (
        lambda n: (_rand(n, 2, 16), _rand(n, 4, 16)),
        lambda k, q: _paged_write_n(k, q),
    ),
    "Rotary": (
        lambda n: (_rand(2, n, 4, 16), _rand(2, n, 2, 16)),
        lambda q, k: (
            _ROTARY(q, k, positions=torch.arange(q.shape[1])),
            _ROTARY_AXES(q, k, positions=_pos3_of(q)),
            _ROTARY_BHSD(q.transpose(1, 2), k.transpose(1, 2), positions=torch.arange(q.shape[1])),
        ),
    ),
    "MixedRotary": (
        lambda n: (_rand(2, n, 4, 16),),
        lambda q: _MIXED(
            q, q, positions=torch.stack([torch.arange(q.shape[1]) * 0.5, torch.arange(q.shape[1]) * 1.0])
        ),
    ),
    # the README's attention layer (Rotary inside), variable-length batches as in training
    "README Attention": (lambda n: (_rand(2, n, 32),), lambda x: _ATTENTION(x, torch.arange(x.shape[1]))),
}
#: public callables whose sequence length is not a tensor dimension
NOT_BY_LENGTH = {
    "DinoV3Rotary": "its token count comes from grid=(h, w), Python ints: a new grid is a new graph"
}


def _cache_write_n(k: torch.Tensor) -> tuple[torch.Tensor, ...]:
    ck, cv = torch.zeros(2, 2, 32, 16), torch.zeros(2, 2, 32, 16)
    ropekit.rope_cache_write(k, k, ck, cv, torch.tensor([1, 3]), S)
    return ck, cv


def _paged_write_n(k: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, ...]:
    ck, cv = torch.zeros(4, 4, 2, 16), torch.zeros(4, 4, 2, 16)
    slots = torch.arange(k.shape[0]) + 1
    q = q.clone()
    ropekit.rope_paged_cache_write(k, k, ck, cv, slots, S, positions=torch.arange(k.shape[0]) + 7, q=q)
    return ck, cv, q


def test_every_public_callable_has_a_variable_length_example() -> None:
    assert set(BY_LENGTH) - {"README Attention"} | set(NOT_BY_LENGTH) == set(EXAMPLES)


@pytest.mark.parametrize("name", sorted(BY_LENGTH))
def test_one_graph_serves_every_sequence_length(name: str) -> None:
    """A training loop changes the sequence length every batch. With fullgraph=True the second length failed in
    apply_rope_tables' table-shape check (symbolic sizes compared with ``in``: Rotary, rope_tables +
    apply_rope_tables, apply_rope_axes, the README attention layer; F1), and apply_rope_varlen /
    positions_with_offset(q.shape[1]) specialised the length in ``check_int`` (one graph per length, then the
    recompile limit; F3). Ten lengths: at most two graphs (the first static, then one dynamic), eager values."""
    from torch._dynamo.testing import CompileCounterWithBackend

    make, fn = BY_LENGTH[name]
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("eager")
    compiled = torch.compile(fn, fullgraph=True, backend=counter)
    with torch.no_grad():
        for n in range(5, 15):
            args = make(n)
            want, got = _flat(fn(*args)), _flat(compiled(*args))
            assert len(want) == len(got) > 0
            for a, b in zip(want, got, strict=True):
                torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)
    assert counter.frame_count <= 2, f"{counter.frame_count} graphs for 10 lengths"


@pytest.mark.parametrize("entry", ["README Attention", "Rotary", "apply_rope_tables"])
def test_training_steps_at_changing_lengths_one_graph_eager_gradients(entry: str) -> None:
    """Forward and backward (aot_eager: the custom ops' autograd rules) at ten sequence lengths, fullgraph: at most
    two graphs, and the gradients of every input and parameter equal eager autograd's."""
    from torch._dynamo.testing import CompileCounterWithBackend

    make, fn = BY_LENGTH[entry]
    params = list(_ATTENTION.parameters()) if entry == "README Attention" else []
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(fn, fullgraph=True, backend=counter)
    for n in range(5, 15):
        args = [a.requires_grad_() for a in make(n)]
        grads = []
        for f in (fn, compiled):
            out = _flat(f(*args))
            loss = sum((o * torch.linspace(-1, 1, o.numel()).view(o.shape)).sum() for o in out)
            grads.append(torch.autograd.grad(loss, [*args, *params]))
        for a, b in zip(*grads, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    assert counter.frame_count <= 2, f"{counter.frame_count} graphs for 10 lengths"
