"""DinoV3Rotary: DINOv3's RoPE against its formula (multiaxis.md 8.5), augmentations in training mode only."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from ropekit.dinov3 import DinoV3Rotary
from ropekit.positions.grid import normalized_grid

D, BASE = 16, 100.0


def _centres(n: int) -> np.ndarray:
    return (np.arange(n) + 0.5) / n * 2 - 1  # pixel centres in [-1, 1]


def _oracle(x: np.ndarray, rows: np.ndarray, cols: np.ndarray, n_prefix: int) -> np.ndarray:
    """float64 DINOv3 rotation of x [b, s, h, D]: slot k < D/4 turns by 2*pi*row/base^(4k/D), slot D/4 + k by
    2*pi*col/base^(4k/D); half-split pairs (j, j + D/2); the prefix tokens unrotated."""
    periods = BASE ** (4.0 * np.arange(D // 4) / D)
    ang = np.concatenate(
        [2 * math.pi * rows[:, None] / periods, 2 * math.pi * cols[:, None] / periods], axis=1
    )
    c, s = np.cos(ang)[None, :, None, :], np.sin(ang)[None, :, None, :]  # [1, HW, 1, D/2]
    out = x.copy()
    a, b = x[:, n_prefix:, :, : D // 2], x[:, n_prefix:, :, D // 2 :]
    out[:, n_prefix:, :, : D // 2] = a * c - b * s
    out[:, n_prefix:, :, D // 2 :] = b * c + a * s
    return out


def _q(h: int, w: int, n_prefix: int) -> torch.Tensor:
    return torch.randn(
        2, n_prefix + h * w, 3, D, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    )


def test_eval_mode_is_the_plain_normalised_grid_and_prefix_is_unrotated() -> None:
    h, w = 4, 6
    rope = DinoV3Rotary(D, shift=0.5, jitter=1.5, rescale=2.0, n_prefix=2).eval()
    q = _q(h, w, 2)
    got, none = rope(q, None, grid=(h, w))
    rows, cols = np.meshgrid(_centres(h), _centres(w), indexing="ij")
    ref = _oracle(q.numpy(), rows.ravel(), cols.ravel(), 2)
    assert none is None
    np.testing.assert_allclose(got.numpy(), ref, atol=1e-12)
    assert torch.equal(got[:, :2], q[:, :2])
    assert torch.equal(rope(q, None, grid=(h, w))[0], got)  # eval: deterministic, no draw
    assert rope.positions((4, 1))[0, 2:].tolist() == [-0.75, -0.25, 0.25, 0.75]  # multiaxis.md's example


def _fit(train: torch.Tensor, plain: torch.Tensor) -> tuple[float, float]:
    """train = m * (plain + s) on one axis: returns (m, s), checking the fit is exact."""
    x, y = plain.numpy(), train.numpy()
    m, c = np.polyfit(x, y, 1)
    np.testing.assert_allclose(m * x + c, y, atol=1e-12)
    return float(m), float(c / m)


def test_training_mode_shift_jitter_rescale_follow_the_formula() -> None:
    h, w, shift, jit, resc = 5, 7, 0.3, 1.4, 2.0
    ms: list[tuple[float, float]] = []
    for seed in range(40):
        rope = DinoV3Rotary(D, shift=shift, jitter=jit, rescale=resc, n_prefix=1, seed=seed).train()
        plain = rope.eval().positions((h, w))[:, 1:]
        pos = rope.train().positions((h, w))
        assert torch.equal(pos[:, 0], torch.zeros(2, dtype=torch.float64))  # class token at the identity
        (mr, sr), (mc, sc) = _fit(pos[0, 1:], plain[0]), _fit(pos[1, 1:], plain[1])
        for m, s in ((mr, sr), (mc, sc)):
            assert -shift <= s <= shift  # shift U(-s, s), applied before the scaling
            assert 1 / (jit * resc) <= m <= jit * resc  # jitter per axis times the shared rescale
        ms.append((mr, mc))
    ratios = [math.log(mr / mc) for mr, mc in ms]  # the shared rescale cancels: the per-axis jitters remain
    assert max(abs(r) for r in ratios) <= 2 * math.log(jit) + 1e-12 and len(set(ratios)) == len(ratios)


def test_rescale_alone_is_shared_by_both_axes_and_spans_its_range() -> None:
    rope = DinoV3Rotary(D, rescale=2.0, seed=1).train()
    plain = DinoV3Rotary(D).eval().positions((6, 6))[:, 1:]
    logs = []
    for _ in range(300):
        pos = rope.positions((6, 6))[:, 1:]
        ratio = pos / plain
        assert torch.allclose(ratio, ratio[0, 0].expand_as(ratio), rtol=1e-12)
        logs.append(math.log(float(ratio[0, 0])))
    lo, hi = min(logs), max(logs)
    assert -math.log(2) <= lo < -0.9 * math.log(2) and 0.9 * math.log(2) < hi <= math.log(2)  # logU[1/2, 2]
    assert abs(sum(logs) / len(logs)) < 0.1


def test_training_rotation_equals_the_oracle_at_the_drawn_coordinates_and_is_seeded() -> None:
    h, w = 3, 4
    q, k = _q(h, w, 1), _q(h, w, 1).flip(0)
    drawn = DinoV3Rotary(D, shift=0.2, rescale=1.5, seed=7).train().positions((h, w))  # the first draw
    rope = DinoV3Rotary(D, shift=0.2, rescale=1.5, seed=7).train()
    q1, k1 = rope(q, k, grid=(h, w))
    assert k1 is not None
    rows, cols = drawn[0, 1:].numpy(), drawn[1, 1:].numpy()
    np.testing.assert_allclose(q1.numpy(), _oracle(q.numpy(), rows, cols, 1), atol=1e-12)
    np.testing.assert_allclose(k1.numpy(), _oracle(k.numpy(), rows, cols, 1), atol=1e-12)
    q2, _ = rope(q, k, grid=(h, w))
    assert not torch.allclose(q1, q2)  # a new draw every training step
    rope.eval()
    q3, _ = rope(q, k, grid=(h, w))
    plain_rows, plain_cols = np.meshgrid(_centres(h), _centres(w), indexing="ij")
    np.testing.assert_allclose(
        q3.numpy(), _oracle(q.numpy(), plain_rows.ravel(), plain_cols.ravel(), 1), atol=1e-12
    )


def test_bhsd_and_grad() -> None:
    rope = DinoV3Rotary(D, format="bhsd", rescale=2.0).eval()
    q = _q(2, 3, 1).transpose(1, 2).contiguous().requires_grad_(True)
    out, _ = rope(q, None, grid=(2, 3))
    out.square().sum().backward()
    assert q.grad is not None
    torch.testing.assert_close(q.grad, 2 * q.detach())  # a rotation preserves norms: d|Rq|^2/dq = 2q


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"jitter": 0.5}, "jitter must be None or a finite number > 1"),
        ({"shift": -1.0}, "shift must be None or a finite number > 0"),
        ({"normalize": "mean"}, "normalize must be"),
        ({"n_prefix": -1}, "n_prefix must be a non-negative int"),
        ({"format": "thd"}, "format must be"),
        ({"head_dim": 18}, "head_dim must be a positive multiple of 4"),
    ],
)
def test_bad_arguments(kw: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"head_dim": D, **kw}
    with pytest.raises(ValueError, match=match):
        DinoV3Rotary(**args)  # type: ignore[arg-type]


def test_wrong_token_count_is_refused() -> None:
    with pytest.raises(ValueError, match="n_prefix \\+ H\\*W = 13 tokens"):
        DinoV3Rotary(D).eval()(torch.zeros(1, 12, 2, D), None, grid=(3, 4))


@pytest.mark.parametrize(
    ("q", "k", "error", "match"),
    [
        ([[0.0] * D], None, TypeError, "q must be a torch.Tensor, got list"),
        (torch.zeros(1, 2, 2, D), [0.0], TypeError, "k must be a torch.Tensor, got list"),
        (torch.zeros(2, D), None, ValueError, r"q must have shape .* got shape \(2, 16\)"),
        (
            torch.zeros(1, 2, 2, D),
            torch.zeros(1, 3, 2, D),
            ValueError,
            "k must match q in batch and sequence",
        ),
        (torch.zeros(1, 3, 2, D), None, ValueError, r"n_prefix \+ H\*W = 2 tokens"),
    ],
    ids=["q-list", "k-list", "q-2d", "k-tokens", "q-tokens"],
)
def test_bad_q_and_k_are_refused_before_the_draw(q: object, k: object, error: type, match: str) -> None:
    """Each named, and refused before the augmentations draw (rng_state unchanged); a list q was an
    AttributeError."""
    rope = DinoV3Rotary(D, rescale=2.0).train()
    state = rope.rng_state.clone()
    with pytest.raises(error, match=match):
        rope(q, k, grid=(1, 1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"grid must be \(H, W\)"):
        rope(torch.zeros(1, 2, 2, D), None, grid=(1,))  # type: ignore[arg-type]
    assert torch.equal(rope.rng_state, state)


@pytest.mark.parametrize("name", ["shift", "jitter", "rescale"])
@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_non_finite_augmentations_are_refused_at_construction(name: str, value: float) -> None:
    """DinoV3Rotary(64, shift=inf) constructed and failed at the first forward without naming shift."""
    with pytest.raises(ValueError, match=f"{name} must be None or a finite number"):
        DinoV3Rotary(D, **{name: value})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dinov3_spec: base must be a finite number > 1, got 0.0"):
        DinoV3Rotary(D, base=0.0)  # was a ZeroDivisionError


def test_draws_are_those_of_a_generator_seeded_with_seed() -> None:
    """The documented stream: step i of a training-mode module is normalized_grid's i-th draw from
    torch.Generator().manual_seed(seed) (the state lives in rng_state, a tensor, so that it compiles)."""
    kw: dict[str, float] = {"shift": 0.2, "jitter": 1.3, "rescale": 2.0}
    rope = DinoV3Rotary(D, n_prefix=1, seed=11, **kw).train()
    g = torch.Generator().manual_seed(11)
    for _ in range(3):
        want = normalized_grid(3, 5, generator=g, **kw)
        assert torch.equal(rope.positions((3, 5))[:, 1:], want)
    assert rope.state_dict() == {} and rope.rng_state.device.type == "cpu"
    twin = copy.deepcopy(rope)  # a copy continues the same stream independently
    assert torch.equal(twin.positions((3, 5)), rope.positions((3, 5)))
    rope.manual_seed(11)  # restart
    assert torch.equal(
        rope.positions((3, 5))[:, 1:],
        normalized_grid(3, 5, generator=torch.Generator().manual_seed(11), **kw),
    )
    rope.eval()
    state = rope.rng_state.clone()
    rope.positions((3, 5))
    assert torch.equal(rope.rng_state, state)  # eval mode draws nothing


def test_built_under_inference_mode_still_draws_outside_it() -> None:
    """rng_state is updated in place: an inference tensor could not be, outside inference mode."""
    with torch.inference_mode():
        rope = DinoV3Rotary(D, rescale=2.0, seed=4).train()
    want = normalized_grid(2, 3, rescale=2.0, generator=torch.Generator().manual_seed(4))
    assert torch.equal(rope.positions((2, 3))[:, 1:], want)
