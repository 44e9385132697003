"""The note on a model folder's unread weights (pickle only) comes from :func:`ropekit.report.build_report` itself,
so a Python caller gets what ``ropekit report`` prints: ``data["weights_note"]`` and a weights section holding it."""

from __future__ import annotations

import json
from pathlib import Path

from ropekit.report.build import build_report
from ropekit.report.page import render_html
from ropekit.report.sources import resolve
from tests.ropekit.cli.test_report_bad_sources import _TINY_CONFIG


def _folder(tmp_path: Path, *weights: str) -> Path:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_TINY_CONFIG))
    for name in weights:
        (folder / name).write_bytes(b"\x80\x04N.")  # a pickle of None: its name alone makes it a weight file
    return folder


def test_build_report_carries_the_note_on_pickle_only_weights(tmp_path: Path) -> None:
    """Finding: the note was added by the CLI only; ``build_report`` called from Python gave a config-only report
    without a word on the weights it did not read."""
    report = build_report(resolve(str(_folder(tmp_path, "pytorch_model.bin"))))
    note = report.data["weights_note"]
    assert note.startswith(
        "weights section skipped: the folder's weights are only pytorch_model.bin, pickle files: ropekit never "
        "loads pickle files"
    )
    assert "weights" not in report.data and report.data["kind"] == "config"
    last = report.sections[-1]  # the weights section is the page's last, as in build._SECTIONS
    assert (last.key, last.title, last.figures, last.notes) == (
        "weights",
        "Weights: bands and positional heads",
        [],
        [note],
    )
    assert [s.key for s in report.sections].count("weights") == 1
    page = render_html(report)
    assert '<section id="weights">' in page and "weights section skipped" in page


def test_build_report_without_unread_weights_has_no_note(tmp_path: Path) -> None:
    """A configuration-only folder gets neither the note nor a weights section."""
    report = build_report(resolve(str(_folder(tmp_path))))
    assert "weights_note" not in report.data
    assert all(s.key != "weights" for s in report.sections)
