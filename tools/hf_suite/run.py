"""Run transformers' common model tests (from its PyPI sdist) unpatched and with every model patched by ropekit.

    python tools/hf_suite/run.py [-k EXPR]

Downloads transformers==<installed version> sdist with pip into .cache/hf_suite, lays out a tests package there
(the sdist's tests/test_modeling_common.py, empty stand-ins for the two mixins the sdist lacks -- exporters and
generation, so those tests are not run -- and ropekit's tiny Llama tester), runs pytest twice and compares.
Exit status 1 when a test that passes unpatched fails patched. Nothing from transformers is committed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CACHE = ROOT / ".cache" / "hf_suite"


def _layout() -> Path:
    import transformers

    version = transformers.__version__
    sdist = CACHE / f"transformers-{version}.tar.gz"
    if not sdist.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"transformers=={version}",
                "-d",
                str(CACHE),
            ],
            check=True,
        )
    pkg = CACHE / "suite" / "tests"
    shutil.rmtree(pkg.parent, ignore_errors=True)
    (pkg / "exporters").mkdir(parents=True)
    (pkg / "generation").mkdir()
    with tarfile.open(sdist) as tar:
        member = tar.getmember(f"transformers-{version}/tests/test_modeling_common.py")
        (pkg / "test_modeling_common.py").write_bytes(tar.extractfile(member).read())  # type: ignore[union-attr]
    for p in (pkg, pkg / "exporters", pkg / "generation"):
        (p / "__init__.py").write_text("")
    (pkg / "exporters" / "test_export.py").write_text("class ExportTesterMixin:\n    pass\n")
    (pkg / "generation" / "test_utils.py").write_text("class GenerationTesterMixin:\n    pass\n")
    shutil.copy(HERE / "test_llama_ropekit.py", pkg / "test_llama_ropekit.py")
    shutil.copy(HERE / "conftest_ropekit.py", pkg.parent / "conftest_ropekit.py")
    return pkg


def _run(pkg: Path, patched: bool, k: str | None) -> dict[str, str]:
    env = {
        **os.environ,
        "ROPEKIT_PATCH": "1" if patched else "0",
        "PYTHONPATH": f"{ROOT / 'src'}:{pkg.parent}",
    }
    env["ROPEKIT_PATCH_LOG"] = str(CACHE / "patch_outcomes.json")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-rA",
        "-p",
        "conftest_ropekit",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        "--rootdir",
        str(pkg.parent),
        str(pkg / "test_llama_ropekit.py"),
    ]
    if k:
        cmd += ["-k", k]
    out = subprocess.run(cmd, check=False, env=env, cwd=pkg.parent, capture_output=True, text=True).stdout
    res = {}
    for line in out.splitlines():
        m = re.match(r"^SKIPPED \[(\d+)\] (\S+?):\d+", line)  # grouped skips: count them
        if m:
            for i in range(int(m.group(1))):
                res[f"{m.group(2)}#skip{len(res)}-{i}"] = "SKIPPED"
            continue
        m = re.match(r"^(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS) (\S+)", line)
        if m:
            res[m.group(2)] = m.group(1)
    return res


def _count(r: dict[str, str]) -> dict[str, int]:
    return {s: sum(v == s for v in r.values()) for s in sorted(set(r.values()))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", default=None, help="pytest -k expression (default: every common test)")
    args = ap.parse_args()
    pkg = _layout()
    base, ours = _run(pkg, False, args.k), _run(pkg, True, args.k)
    print(f"unpatched: {_count(base)}")
    print(f"patched:   {_count(ours)}")
    outcomes = CACHE / "patch_outcomes.json"
    if outcomes.exists():
        print(f"models built while patched: {json.loads(outcomes.read_text())}")
    broken = sorted(t for t, s in base.items() if s == "PASSED" and ours.get(t) != "PASSED")
    fixed = sorted(t for t, s in ours.items() if s == "PASSED" and base.get(t) != "PASSED")
    for t in broken:
        print(f"BROKEN BY THE PATCH: {t} ({ours.get(t)})")
    for t in fixed:
        print(f"passes only patched: {t}")
    for t in sorted(t for t, s in base.items() if s != "PASSED" and ours.get(t) == s):
        print(f"same outcome ({base[t]}) unpatched and patched: {t}")
    print("no test that passes unpatched fails patched" if not broken else f"{len(broken)} regressions")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
