# SPDX-License-Identifier: MIT
"""Headless Chromium from Python's standard library: take a screenshot of a page or read its rendered DOM.

Used by the browser test and by ``make report-screenshot`` (``python -m ropekit.report.browser PAGE PNG``).
Each call gets a fresh profile folder and the flags that keep Chromium off the network.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["FLAGS", "dump_dom", "find_chromium", "screenshot"]

FLAGS: tuple[str, ...] = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def find_chromium() -> str | None:
    """Path of chromium (or chromium-browser, google-chrome) on PATH, else None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(args: list[str], timeout: float) -> str:
    browser = find_chromium()
    if browser is None:
        raise FileNotFoundError("headless Chromium not found (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="ropekit-chromium-") as profile:
        cmd = [browser, *FLAGS, f"--user-data-dir={profile}", *args]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {res.returncode}: {res.stderr[-2000:]}")
    return res.stdout


def screenshot(page: Path, png: Path, *, width: int = 1280, height: int = 2000, timeout: float = 180) -> Path:
    """Render ``page`` (a local HTML file) at ``width`` x ``height`` CSS pixels into ``png``."""
    png.parent.mkdir(parents=True, exist_ok=True)
    _run(
        [f"--screenshot={png.resolve()}", f"--window-size={width},{height}", page.resolve().as_uri()], timeout
    )
    return png


def dump_dom(page: Path, *, budget_ms: int = 10_000, timeout: float = 180) -> str:
    """The DOM of ``page`` after its load event (scripts run; ``budget_ms`` of virtual time)."""
    return _run([f"--virtual-time-budget={budget_ms}", "--dump-dom", page.resolve().as_uri()], timeout)


if __name__ == "__main__":  # python -m ropekit.report.browser PAGE PNG [WIDTH HEIGHT]
    if len(sys.argv) not in (3, 5):
        sys.exit("usage: python -m ropekit.report.browser PAGE.html OUT.png [WIDTH HEIGHT]")
    size = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) == 5 else (1280, 2000)
    print(screenshot(Path(sys.argv[1]), Path(sys.argv[2]), width=size[0], height=size[1]))
