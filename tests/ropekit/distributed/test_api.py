"""The public surface of ropekit.distributed is exactly the API issue 16 names."""

from __future__ import annotations

import inspect
import subprocess
import sys

import ropekit.distributed as rd


def _params(fn: object) -> list[tuple[str, str, object]]:
    sig = inspect.signature(fn)  # type: ignore[arg-type]
    return [(p.name, p.kind.name, p.default) for p in sig.parameters.values()]


def test_all_names_resolve() -> None:
    for name in rd.__all__:
        assert getattr(rd, name) is not None, name
    assert {"shard_positions", "shard", "unshard", "ring_attention"} <= set(rd.__all__)


def test_signatures_as_named_in_the_issue() -> None:
    e = inspect.Parameter.empty
    assert _params(rd.shard_positions) == [
        ("seq_len", "POSITIONAL_OR_KEYWORD", e),
        ("world_size", "POSITIONAL_OR_KEYWORD", e),
        ("rank", "POSITIONAL_OR_KEYWORD", e),
        ("layout", "POSITIONAL_OR_KEYWORD", "zigzag"),
        ("cu_seqlens", "KEYWORD_ONLY", None),
    ]
    assert _params(rd.shard) == [
        ("x", "POSITIONAL_OR_KEYWORD", e),
        ("world_size", "POSITIONAL_OR_KEYWORD", e),
        ("rank", "POSITIONAL_OR_KEYWORD", e),
        ("layout", "POSITIONAL_OR_KEYWORD", "zigzag"),
        ("dim", "KEYWORD_ONLY", 1),
        ("cu_seqlens", "KEYWORD_ONLY", None),
    ]
    assert _params(rd.unshard) == [
        ("parts", "POSITIONAL_OR_KEYWORD", e),
        ("layout", "POSITIONAL_OR_KEYWORD", "zigzag"),
        ("dim", "KEYWORD_ONLY", 1),
        ("cu_seqlens", "KEYWORD_ONLY", None),
    ]
    assert _params(rd.ring_attention) == [
        ("q", "POSITIONAL_OR_KEYWORD", e),
        ("k", "POSITIONAL_OR_KEYWORD", e),
        ("v", "POSITIONAL_OR_KEYWORD", e),
        ("positions", "KEYWORD_ONLY", e),
        ("group", "KEYWORD_ONLY", None),
        ("causal", "KEYWORD_ONLY", True),
        ("scale", "KEYWORD_ONLY", None),
        ("cu_seqlens", "KEYWORD_ONLY", None),
    ]


def test_import_ropekit_does_not_load_distributed() -> None:
    code = "import sys, ropekit; print('ropekit.distributed' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
