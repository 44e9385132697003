"""Run transformers' own model tests unpatched and with every model patched by ropekit; report what the patch breaks.

    python tools/hf_suite/run.py --tests /path/to/transformers/tests [--families llama,mistral] [--timeout 900]
                                 [--docs docs/hf.md]
    python tools/hf_suite/run.py [-k EXPR]      # no transformers checkout: the sdist's common tests, tiny Llama

With ``--tests`` (a transformers source checkout's tests/ directory; the PyPI sdist has no tests/models), each
family's ``tests/models/<family>/test_modeling_<family>.py`` runs twice under pytest -- ROPEKIT_PATCH=0 and
ROPEKIT_PATCH=1 (the plugin ``conftest_ropekit`` patches every model the tests build) -- with a per-file timeout.
Per family it prints passed/failed/skipped in each mode and every test that passes unpatched but not patched, and
keeps the result in .cache/hf_suite/results/<family>.json, so families can be run a few at a time; ``--docs``
rewrites the matrix of every stored result between the markers in that file. Exit status 1 when a test that
passes unpatched fails patched.

Without ``--tests``: downloads the transformers==<installed> sdist, lays out its tests/test_modeling_common.py with
empty stand-ins for the mixins the sdist lacks and ropekit's tiny Llama tester, and compares the two modes the
same way. Nothing from transformers is committed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CACHE = ROOT / ".cache" / "hf_suite"
RESULTS = CACHE / "results"
BEGIN, END = "<!-- hf-suite-matrix:begin -->", "<!-- hf-suite-matrix:end -->"
ROTARY_FAMILIES = [
    *("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3", "gpt_neox", "cohere", "glm"),
    *("deepseek_v3", "gpt_oss", "olmo2", "granite", "starcoder2", "stablelm", "persimmon", "gptj", "phi"),
]
DEFAULT_K = "not compil"
_LINE = re.compile(r"^(\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b")
_SUMMARY = re.compile(r"^(FAILED|ERROR) (\S+::\S+)(?: - (.*))?$")


def parse(out: str) -> tuple[dict[str, str], dict[str, str]]:
    """pytest -v -rfE output -> ({test id: outcome}, {test id: first line of its failure})."""
    res: dict[str, str] = {}
    why: dict[str, str] = {}
    for line in out.splitlines():
        m = _LINE.match(line)
        if m:
            res[m.group(1)] = m.group(2)
            continue
        m = _SUMMARY.match(line)
        if m:
            res.setdefault(m.group(2), m.group(1))
            why[m.group(2)] = (m.group(3) or "")[:200]
    return res, why


def count(r: dict[str, str]) -> dict[str, int]:
    return {s: sum(v == s for v in r.values()) for s in sorted(set(r.values()))}


def regressions(base: dict[str, str], ours: dict[str, str]) -> list[str]:
    """Tests that pass unpatched and ran patched without passing."""
    return sorted(t for t, s in base.items() if s == "PASSED" and ours.get(t, "PASSED") != "PASSED")


def not_reached(base: dict[str, str], ours: dict[str, str]) -> list[str]:
    """Tests that pass unpatched and never ran patched (the patched run timed out or died before them)."""
    return sorted(t for t, s in base.items() if s == "PASSED" and t not in ours)


def _pytest(
    tests: Path, target: str, patched: bool, timeout: float, k: str | None
) -> tuple[dict[str, str], ...]:
    log = CACHE / f"patch_outcomes_{Path(target).stem}.json"
    env = {
        **os.environ,
        "ROPEKIT_PATCH": "1" if patched else "0",
        "ROPEKIT_PATCH_LOG": str(log),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(HERE), str(tests.parent)]),
    }
    cmd = [sys.executable, "-m", "pytest", "-v", "-rfE", "-p", "conftest_ropekit", "-p", "no:cacheprovider"]
    cmd += ["-o", "addopts=", "--rootdir", str(tests.parent), target] + (["-k", k] if k else [])
    mode = "patched" if patched else "unpatched"
    (CACHE / "logs").mkdir(parents=True, exist_ok=True)
    out_path = CACHE / "logs" / f"{Path(target).stem}-{mode}.log"  # streamed: follow a long run with tail -f
    status = ""
    with open(out_path, "w") as f:
        proc = subprocess.Popen(
            cmd, env=env, cwd=tests.parent, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the pytest process group this call started
            proc.wait()
            status = f"timeout after {timeout:.0f} s"
    out = out_path.read_text(errors="replace")
    res, why = parse(out)
    if not res:
        tail = " | ".join(out.strip().splitlines()[-3:])[:300]
        status = status or f"nothing ran: {tail}"
    meta = {"status": status}
    if patched and log.exists():
        models = json.loads(log.read_text())
        meta["refusals"] = models.pop("_refusals", {})  # full message -> ids of the tests it refused in
        meta["models"] = models
        log.unlink()
    return res, why, meta


def run_family(tests: Path, fam: str, timeout: float, k: str | None) -> dict[str, object]:
    target = f"{tests.name}/models/{fam}/test_modeling_{fam}.py"
    if not (tests.parent / target).exists():
        return {"family": fam, "status": f"no {target}"}
    t0 = time.time()
    base, _, meta_b = _pytest(tests, target, False, timeout, k)
    ours, why, meta_o = _pytest(tests, target, True, timeout, k)
    broken = regressions(base, ours)
    return {
        "family": fam,
        "unpatched": count(base),
        "patched": count(ours),
        "unpatched_status": meta_b["status"],
        "patched_status": meta_o["status"],
        "models": meta_o.get("models", {}),
        "refusals": meta_o.get("refusals", {}),
        "broken": {t: f"{ours[t]}: {why.get(t, '')}" for t in broken},
        "not_reached": not_reached(base, ours),
        "passes_only_patched": sorted(
            t for t, s in ours.items() if s == "PASSED" and base.get(t) != "PASSED"
        ),
        "seconds": round(time.time() - t0),
    }


def _fmt(c: object) -> str:
    d = c if isinstance(c, dict) else {}
    return " / ".join(str(d.get(s, 0)) for s in ("PASSED", "FAILED", "SKIPPED")) + (
        f" (+{d['ERROR']} err)" if d.get("ERROR") else ""
    )


def matrix(results: list[dict[str, object]], source: str) -> str:
    """Markdown table of stored results (passed / failed / skipped per mode)."""
    lines = [
        f"transformers tests from: {source}; installed transformers {_installed()}; by `tools/hf_suite/run.py`.",
        "",
        "| family | unpatched pass / fail / skip | patched pass / fail / skip | broken by the patch | models |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        if "unpatched" not in r:
            lines.append(f"| {r['family']} | {r.get('status')} | | | |")
            continue
        raw: dict[str, str] = r.get("broken") or {}  # type: ignore[assignment]
        broken = [
            t for t, w in raw.items() if not w.startswith("not run")
        ]  # older results: unreached as broken
        lost = len(r.get("not_reached") or []) + len(raw) - len(broken)  # type: ignore[arg-type]
        notes = [str(s) for s in (r.get("unpatched_status"), r.get("patched_status")) if s]
        notes += [f"{lost} tests passing unpatched not reached patched"] if lost else []
        models = r.get("models") or {}
        refused = sum(v for k, v in models.items() if k.startswith("refused"))  # type: ignore[union-attr]
        kept = {k: v for k, v in models.items() if not k.startswith("refused")}  # type: ignore[union-attr]
        mtxt = ", ".join(f"{k} {v}" for k, v in kept.items()) + (f", refused {refused}" if refused else "")
        lines.append(
            f"| {r['family']} | {_fmt(r['unpatched'])} | {_fmt(r['patched'])} | "
            f"{len(broken)}{' (' + '; '.join(notes) + ')' if notes else ''} | {mtxt[:200]} |"  # type: ignore[arg-type]
        )
    return "\n".join(lines)


def _installed() -> str:
    try:
        import transformers

        return str(transformers.__version__)
    except ImportError:
        return "(not installed)"


def _source(tests: Path) -> str:
    """Where the tests come from: a SOURCE note beside them, else the git commit of their checkout."""
    for p in (tests / "SOURCE", tests.parent / "SOURCE"):
        if p.exists():
            return p.read_text().strip()
    cmd = ["git", "-C", str(tests.parent), "rev-parse", "HEAD"]
    git = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return f"transformers checkout at {git.stdout.strip()}" if git.returncode == 0 else str(tests)


EARLIER = "†"
_EARLIER_NOTE = (
    f"{EARLIER} from an earlier run whose per-test results are not stored in .cache/hf_suite/results/."
)


def _rows(table: str) -> dict[str, str]:
    """family -> its row, for the family rows of a matrix (header and separator skipped)."""
    out = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] not in ("family", "") and not cells[0].startswith("---"):
            out[cells[0].rstrip(EARLIER).strip()] = line
    return out


def merge_rows(old: str, new: str) -> str:
    """``new`` with the rows of ``old`` whose family it lacks kept (marked as earlier), all sorted by family."""
    fresh, before = _rows(new), _rows(old)
    kept = {}
    for fam, line in before.items():
        if fam not in fresh:
            kept[fam] = (
                line
                if EARLIER in line.split("|")[1]
                else line.replace(f"| {fam} |", f"| {fam} {EARLIER} |", 1)
            )
    if not kept:
        return new
    rows = {**fresh, **kept}
    lines = [ln for ln in new.splitlines() if ln not in fresh.values()]
    at = next(i for i, ln in enumerate(lines) if ln.startswith("|---")) + 1
    lines[at:at] = [rows[f] for f in sorted(rows)]
    return "\n".join(lines) + f"\n\n{_EARLIER_NOTE}"


def write_docs(path: Path, table: str) -> None:
    """Put ``table`` between the markers of ``path``; rows of families it lacks are kept from the old table."""
    text = path.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path} has no {BEGIN} ... {END} markers to write the matrix between")
    head, rest = text.split(BEGIN, 1)
    old, tail = rest.split(END, 1)
    table = merge_rows(old, table)
    path.write_text(head + BEGIN + "\n" + table + "\n" + END + tail)


def result_name(fam: str, k: str | None) -> str:
    """The stored result's file stem: the family for the default selection, else the family and the ``-k``."""
    if k == DEFAULT_K:
        return fam
    return f"{fam}@" + (re.sub(r"[^A-Za-z0-9]+", "_", k).strip("_") if k else "all")


def per_family(args: argparse.Namespace) -> int:
    tests = Path(args.tests).resolve()
    if not (tests / "test_modeling_common.py").exists():
        raise SystemExit(
            f"--tests {tests}: expected transformers' tests/ directory (with test_modeling_common.py)"
        )
    fams = [] if args.report else args.families.split(",") if args.families else list(ROTARY_FAMILIES)
    RESULTS.mkdir(parents=True, exist_ok=True)
    bad = 0
    for fam in fams:
        r = run_family(tests, fam, args.timeout, args.k)
        if args.k != DEFAULT_K:  # another selection: its own row and file, beside the default run's
            r["family"] = f"{fam} (-k {args.k!r})"
        r["k"] = args.k
        (RESULTS / f"{result_name(fam, args.k)}.json").write_text(json.dumps(r, indent=1))
        print(
            f"{fam}: unpatched {r.get('unpatched', r.get('status'))}, patched {r.get('patched', '')} "
            f"({r.get('seconds', 0)} s) {r.get('unpatched_status', '')} {r.get('patched_status', '')}"
        )
        for t, why in (r.get("broken") or {}).items():  # type: ignore[union-attr]
            print(f"  BROKEN BY THE PATCH: {t} ({why})")
        for why, where in (r.get("refusals") or {}).items():  # type: ignore[union-attr]
            print(f"  refused in {len(where)} tests ({', '.join(where[:3])}...): {why}")
        if r.get("not_reached"):
            print(f"  {len(r['not_reached'])} tests passing unpatched were not reached patched")  # type: ignore[arg-type]
        bad += len(r.get("broken") or {})  # type: ignore[arg-type]
    stored = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))]
    table = matrix(stored, _source(tests))
    print(table)
    if args.docs:
        write_docs(Path(args.docs), f"{table}\n\nRows without a `-k` in their name ran `-k {DEFAULT_K!r}`.")
    print("no test that passes unpatched fails patched" if not bad else f"{bad} regressions")
    return 1 if bad else 0


# ---------------------------------------------------------------- no checkout: the sdist's common tests
def _layout() -> Path:
    import transformers

    version = transformers.__version__
    sdist = CACHE / f"transformers-{version}.tar.gz"
    if not sdist.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
        subprocess.run(pip + [f"transformers=={version}", "-d", str(CACHE)], check=True)
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
    return pkg


def sdist_common(args: argparse.Namespace) -> int:
    pkg = _layout()
    target = f"{pkg.name}/test_llama_ropekit.py"
    (base, _, _), (ours, why, meta) = (_pytest(pkg, target, p, args.timeout, args.k) for p in (False, True))
    print(f"unpatched: {count(base)}")
    print(f"patched:   {count(ours)}")
    print(f"models built while patched: {meta.get('models', {})}")
    broken = regressions(base, ours)
    for t in broken:
        print(f"BROKEN BY THE PATCH: {t} ({ours.get(t)}: {why.get(t, '')})")
    print("no test that passes unpatched fails patched" if not broken else f"{len(broken)} regressions")
    return 1 if broken else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument(
        "--tests", default=os.environ.get("TRANSFORMERS_TESTS") or None, help="transformers tests/"
    )
    ap.add_argument(
        "--families", default=None, help=f"comma-separated (default: {','.join(ROTARY_FAMILIES)})"
    )
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per test file and mode")
    ap.add_argument("--docs", default=None, help="markdown file whose matrix markers receive the table")
    ap.add_argument(
        "--report", action="store_true", help="run nothing: print (and --docs) the stored results"
    )
    ap.add_argument(
        "-k",
        default=None,
        help=f"pytest -k expression (with --tests default {DEFAULT_K!r}: torch.compile tests take minutes each on "
        "CPU; pass -k '' for every test)",
    )
    args = ap.parse_args()
    if args.tests and args.k is None:
        args.k = DEFAULT_K
    args.k = args.k or None
    return per_family(args) if args.tests else sdist_common(args)


if __name__ == "__main__":
    sys.exit(main())
