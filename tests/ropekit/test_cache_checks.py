"""rerotate_keys / keys_stale: every argument checked before k is touched, exact phases at any int64 position, meta
tensors. Oracle: the float64 rotation written from the formula (``_rot``)."""

from __future__ import annotations

import pytest
import torch

from ropekit import RopeSpec
from ropekit.cache import keys_stale, rerotate_keys
from ropekit.scaling import DynamicNTK, Linear
from tests.ropekit.test_cache import L0, SPECS

# ---------------------------------------------------------------- argument validation (before k is touched)

LR = SPECS["longrope"]  # dynamic: without validation these calls would rotate k in place
S = 10


def _keys(s: int = S, spec: RopeSpec = LR, fmt: str = "bshd") -> torch.Tensor:
    """Keys rotated at positions 0..s-1 for length s (what a cache of s tokens holds)."""
    kr = _rot(torch.randn(1, s, 2, spec.head_dim, dtype=torch.float64), torch.arange(s), spec, s)
    return kr.transpose(1, 2).contiguous() if fmt == "bhsd" else kr


def _rot(x: torch.Tensor, pos: torch.Tensor, spec: RopeSpec, length: int) -> torch.Tensor:
    """x ("bshd") rotated at pos with the frequencies of ``length``."""
    from ropekit import apply_rope_tables, rope_tables

    cos, sin = rope_tables(pos, spec, seq_len=length, dtype=torch.float64)
    return apply_rope_tables(x, None, cos, sin, spec)[0]


def _refused(k: torch.Tensor, exc: type[Exception], match: str, *args: object, **kw: object) -> None:
    before = k.clone()
    with pytest.raises(exc, match=match):
        rerotate_keys(k, *args, **kw)  # type: ignore[arg-type]
    assert torch.equal(k.view(torch.int64), before.view(torch.int64))  # bit-identical


def test_valid_call_rerotates_to_the_frequencies_of_the_new_length() -> None:
    """Positive control for the refusals below: the same k, positions 0..from_len-1 (the largest valid one
    included), is rotated in place to what rotating the raw keys for to_len gives (oracle: rope_tables)."""
    raw = torch.randn(1, L0, 2, 16, dtype=torch.float64)
    pos = torch.arange(L0)
    k, want = _rot(raw, pos, LR, L0), _rot(raw, pos, LR, L0 + 1)
    assert (k - want).abs().max() > 1e-3  # stale: the call below must change k
    assert rerotate_keys(k, pos, LR, from_len=L0, to_len=L0 + 1) is k
    torch.testing.assert_close(k, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("fmt", "positions", "match"),
    [
        (
            "bshd",
            torch.arange(7),
            (
                r"positions must have shape \(10,\) or \(1, 10\) for k of shape \(1, 10, 2, 16\) "
                r"\(format='bshd'\), got \(7,\)"
            ),
        ),
        ("bshd", torch.arange(2 * S).view(2, S), r"positions must have shape .* got \(2, 10\)"),
        (
            "bhsd",
            torch.arange(2),
            (
                r"positions must have shape \(10,\) or \(1, 10\) for k of shape \(1, 2, 10, 16\) "
                r"\(format='bhsd'\), got \(2,\)"
            ),
        ),
        (
            "bshd",
            torch.arange(S, dtype=torch.float16),
            r"positions must have one of the dtypes int8, int16, int32, int64, uint8, float32, float64",
        ),
    ],
)
def test_positions_of_the_wrong_shape_or_dtype_are_refused_naming_positions(
    fmt: str, positions: torch.Tensor, match: str
) -> None:
    _refused(_keys(fmt=fmt), ValueError, match, positions, LR, from_len=S, to_len=L0 + 1, format=fmt)


def test_k_of_the_wrong_head_dim_rank_or_dtype_is_refused_naming_k() -> None:
    pos = torch.arange(S)
    k = torch.randn(1, S, 2, 8, dtype=torch.float64)
    _refused(
        k,
        ValueError,
        r"k must have shape \(batch, seq, heads, head_dim\) with head_dim=16 for "
        r"format='bshd', got shape \(1, 10, 2, 8\)",
        pos,
        LR,
        from_len=S,
        to_len=L0 + 1,
    )
    k = torch.randn(S, 2, 16, dtype=torch.float64)
    _refused(
        k, ValueError, r"k must have shape .* got shape \(10, 2, 16\)", pos, LR, from_len=S, to_len=L0 + 1
    )
    k = torch.ones(1, S, 2, 16, dtype=torch.int64)
    _refused(
        k,
        ValueError,
        r"k must be float32, float64, bfloat16 or float16, got torch\.int64",
        pos,
        LR,
        from_len=S,
        to_len=L0 + 1,
    )
    with pytest.raises(TypeError, match=r"k must be a torch\.Tensor, got list"):
        rerotate_keys([0.0], pos, LR, from_len=S, to_len=L0 + 1)  # type: ignore[arg-type]


def test_the_user_trial_repro_names_k_and_positions() -> None:
    """The calls of the user trial (Phi-3 mini 128k: LongRoPE, head_dim 96), with fewer positions."""
    from ropekit.presets import preset_spec

    phi3 = preset_spec("phi-3-mini-128k")
    k = torch.randn(1, 64, 4, 96)
    kw = {"from_len": 4096, "to_len": 4097}
    _refused(
        k,
        ValueError,
        r"^positions must have shape \(64,\) or \(1, 64\) .* got \(100,\)$",
        torch.arange(100),
        phi3,
        **kw,
    )
    _refused(
        torch.randn(1, 10, 4, 64),
        ValueError,
        r"^k must have shape .*head_dim=96.* got shape \(1, 10, 4, 64\)$",
        torch.arange(10),
        phi3,
        **kw,
    )
    _refused(
        torch.ones(1, 10, 4, 96, dtype=torch.long),
        ValueError,
        r"^k must be .* got torch\.int64$",
        torch.arange(10),
        phi3,
        **kw,
    )
    _refused(
        k[:, :10].clone(),
        ValueError,
        r"^positions must lie in \[0, from_len\) = \[0, 4096\) .*"
        r"got values in \[5000, 5009\]$",
        torch.arange(5000, 5010),
        phi3,
        **kw,
    )


BAD_LENGTHS = [
    (-1, ValueError, r"must be an int >= 1 \(a sequence length\), got -1"),
    (0, ValueError, r"must be an int >= 1 \(a sequence length\), got 0"),
    (16.5, TypeError, r"must be an int >= 1 \(a sequence length\), got 16\.5"),
    (16.0, TypeError, r"must be an int >= 1 \(a sequence length\), got 16\.0"),
    (True, TypeError, r"must be an int >= 1 \(a sequence length\), got True"),
    (torch.tensor(16.0), TypeError, r"must be an int >= 1 \(a sequence length\), got tensor\(16\.\)"),
    ("16", TypeError, r"must be an int >= 1 \(a sequence length\), got '16'"),
]


@pytest.mark.parametrize("arg", ["from_len", "to_len"])
@pytest.mark.parametrize(("value", "exc", "match"), BAD_LENGTHS, ids=repr)
@pytest.mark.parametrize("spec", [LR, RopeSpec(16, scaling=Linear(4.0))], ids=["dynamic", "static"])
def test_rerotate_refuses_impossible_lengths(
    arg: str, value: object, exc: type[Exception], match: str, spec: RopeSpec
) -> None:
    kw: dict[str, object] = {"from_len": L0, "to_len": L0 + 1, arg: value}
    _refused(_keys(), exc, f"^{arg} {match}$", torch.arange(S), spec, **kw)


@pytest.mark.parametrize("arg", ["cached_len", "new_len"])
@pytest.mark.parametrize(("value", "exc", "match"), BAD_LENGTHS, ids=repr)
def test_keys_stale_refuses_impossible_lengths(
    arg: str, value: object, exc: type[Exception], match: str
) -> None:

    kw: dict[str, object] = {"cached_len": L0, "new_len": L0 + 1}
    assert LR.keys_stale(**kw) and keys_stale(LR, **kw)  # type: ignore[arg-type]  # valid: True
    kw[arg] = value
    for spec in (LR, RopeSpec(16, scaling=Linear(4.0))):
        with pytest.raises(exc, match=f"^{arg} {match}$"):
            spec.keys_stale(**kw)  # type: ignore[arg-type]
        with pytest.raises(exc, match=f"^{arg} {match}$"):
            keys_stale(spec, **kw)  # type: ignore[arg-type]


def test_keys_stale_refuses_a_negative_cached_length_it_used_to_call_fresh() -> None:
    """The user trial: phi3.keys_stale(-5, 3) returned False."""
    from ropekit.presets import preset_spec

    with pytest.raises(ValueError, match=r"^cached_len must be an int >= 1 \(a sequence length\), got -5$"):
        preset_spec("phi-3-mini-128k").keys_stale(-5, 3)


@pytest.mark.parametrize(
    ("positions", "got"),
    [
        (torch.arange(S) + 1, r"\[1, 10\]"),  # max == from_len: one past the last position of length 10
        (torch.arange(S) - 1, r"\[-1, 8\]"),
        (torch.arange(5000, 5000 + S), r"\[5000, 5009\]"),
        (torch.arange(S, dtype=torch.float64) + 0.5, r"\[0\.5, 9\.5\]"),  # 9.5 < 10: this one is fine ...
    ],
)
def test_positions_outside_the_cached_length_are_refused(positions: torch.Tensor, got: str) -> None:
    k = _keys()
    kw = {"from_len": S, "to_len": L0 + 1}
    if float(positions.max()) < S and float(positions.min()) >= 0:  # ... accepted, and k is rotated
        before = k.clone()
        rerotate_keys(k, positions, LR, **kw)  # type: ignore[arg-type]
        assert not torch.equal(k, before)
        return
    _refused(
        k,
        ValueError,
        rf"^positions must lie in \[0, from_len\) = \[0, 10\) .* got values in {got}$",
        positions,
        LR,
        **kw,
    )


def test_batched_positions_are_checked_over_every_row() -> None:
    k = torch.cat([_keys(), _keys()])
    pos = torch.stack([torch.arange(S), torch.arange(S) + 3])  # row 1 reaches 12 >= from_len = 10
    _refused(
        k,
        ValueError,
        r"positions must lie in \[0, from_len\) = \[0, 10\) .* got values in \[0, 12\]",
        pos,
        LR,
        from_len=S,
        to_len=L0 + 1,
    )


def test_an_expanded_k_is_refused_naming_k_and_left_alone() -> None:
    k = _keys(1).expand(1, S, 2, 16)
    _refused(
        k,
        ValueError,
        r"inplace=True but k has overlapping memory",
        torch.arange(S),
        LR,
        from_len=S,
        to_len=L0 + 1,
    )


def test_bad_spec_format_and_inplace_are_refused_naming_them() -> None:
    pos = torch.arange(S)
    kw: dict[str, object] = {"from_len": S, "to_len": L0 + 1}
    _refused(_keys(), TypeError, r"^spec must be a ropekit\.RopeSpec, got dict$", pos, {}, **kw)
    _refused(_keys(), ValueError, r"^format must be one of .* got 'bsdh'$", pos, LR, format="bsdh", **kw)
    _refused(_keys(), TypeError, r"^inplace must be a bool, got 1$", pos, LR, inplace=1, **kw)


def test_out_of_place_always_returns_a_tensor_of_its_own() -> None:
    """inplace=False promises a new tensor: also when nothing moves (a static spec, or a dynamic one whose keys are
    not stale), so that writing to the result never changes the cache (it returned k itself there before)."""
    k = torch.randn(1, 4, 2, 16)
    pos = torch.arange(4)
    static = RopeSpec(head_dim=16)
    dynamic = RopeSpec(head_dim=16, scaling=DynamicNTK(factor=2.0, max_position_embeddings=16))
    for spec, lens in ((static, (4, 8)), (dynamic, (4, 8)), (dynamic, (20, 30))):
        out = rerotate_keys(k, pos, spec, from_len=lens[0], to_len=lens[1], inplace=False)
        assert out.data_ptr() != k.data_ptr()
        if not spec.keys_stale(*lens):
            assert torch.equal(out, k)


# ---------------------------------------------------------------- exact phases at any int64 position


@pytest.mark.parametrize(
    ("from_len", "to_len", "positions"),
    [
        (
            2**62 + 2**61,
            2**62 + 2**61 + 2**40,
            [2**60, 2**60 + 100, 2**62 + 12345, 2**53 + 1, 2**62 + 2**61 - 1, 7, 0],
        ),
        # lengths far apart: theta_new - theta_old is not exact in float64 (its rounding times p ~ 2**58 is 1e-13)
        (2**58, 2**62, [2**58 - 1, 2**57 + 12345, 2**53 + 1, 7]),
    ],
)
def test_rerotation_is_exact_at_int64_positions_past_2_53(
    from_len: int, to_len: int, positions: list[int]
) -> None:
    """Oracle (mpmath, 60 digits, shares no code with ropekit): band i of a key at position p turns by
    p * theta_new_i - p * theta_old_i (mod 2 pi), theta the spec's float64 frequencies at each length. Positions past
    2**53 used to be rounded to float64 first (2**60 and 2**60 + 100 re-rotated identically, 0.0116 rad apart) and
    the angle formed from the float64 difference theta_new - theta_old (its rounding times p is a large angle)."""
    import mpmath

    mpmath.mp.dps = 60
    spec = RopeSpec(16, scaling=DynamicNTK(2.0, 64))
    assert spec.keys_stale(from_len, to_len)
    old, new = spec.frequencies(from_len).tolist(), spec.frequencies(to_len).tolist()
    k = torch.randn(1, len(positions), 2, 16, dtype=torch.float64)
    got = rerotate_keys(k.clone(), torch.tensor(positions), spec, from_len=from_len, to_len=to_len)
    n, two_pi = 8, 2 * mpmath.pi
    want = torch.empty_like(k)
    for s, p in enumerate(positions):
        for i in range(n):
            a = mpmath.mpf(p) * (mpmath.mpf(new[i]) - mpmath.mpf(old[i]))
            a -= two_pi * mpmath.nint(a / two_pi)
            c, sn = float(mpmath.cos(a)), float(mpmath.sin(a))
            x, y = k[0, s, :, i], k[0, s, :, i + n]
            want[0, s, :, i], want[0, s, :, i + n] = x * c - y * sn, y * c + x * sn
    assert (got - want).abs().max().item() < 2e-14
    if positions[1] == positions[0] + 100:
        assert (got[0, 0] - got[0, 1]).abs().max() > 1e-3  # 2**60 and 2**60 + 100 are different positions


def test_meta_positions_for_real_keys_are_refused_naming_positions() -> None:
    """It used to fail inside torch (NotImplementedError: Cannot copy out of meta tensor)."""
    _refused(
        _keys(),
        ValueError,
        r"^positions are on the meta device \(no values\) but k is on cpu",
        torch.arange(S, device="meta"),
        LR,
        from_len=L0,
        to_len=L0 + 1,
    )


@pytest.mark.parametrize("inplace", [True, False])
def test_meta_keys_give_meta_keys_of_the_same_shape(inplace: bool) -> None:
    """Keys of a model built on meta: nothing to compute; the result is a meta tensor of k's shape (k itself in
    place), as rope_tables on meta (it used to fail in torch.autocast: 'unsupported scalarType')."""
    k = torch.empty(1, S, 2, 16, dtype=torch.float64, device="meta")
    for pos in (torch.arange(S, device="meta"), torch.arange(S)):
        out = rerotate_keys(k, pos, LR, from_len=L0, to_len=L0 + 1, inplace=inplace)
        assert out.device.type == "meta" and out.shape == k.shape and (out is k) == inplace
