"""The report in a real browser: headless Chromium renders index.html from file://, a screenshot is not blank,
every image loaded (naturalWidth > 0) and every figure's caption is on the page.

Chromium comes from the OS packages (``make test`` installs it on CI). Where it is missing the test is skipped
with a message -- except under CI=true, where it fails.
"""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

import pytest

from ropekit.report.browser import dump_dom, find_chromium, screenshot

PROBE = """<script>
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var caps = Array.prototype.slice.call(document.querySelectorAll("figcaption"));
  var out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify({
    widths: imgs.map(function (i) { return i.complete ? i.naturalWidth : 0; }),
    captions: caps.map(function (c) { return c.textContent; })
  });
  document.body.appendChild(out);
});
</script>"""


@pytest.fixture
def chromium() -> None:
    if find_chromium() is None:
        msg = "headless Chromium not found (Debian: apt-get install chromium); `make test` installs it on CI"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {msg}")
        pytest.skip(msg)


def _probe(page: Path, marker_dir: Path) -> dict[str, list]:
    """Image widths and captions as the browser sees them (a copy of the page with a probe script)."""
    probe = marker_dir / "probe.html"  # same folder as the page: same relative resources
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    dom = dump_dom(probe)
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.DOTALL)
    assert found is not None, "the probe script did not run: " + dom[-500:]
    return json.loads(html.unescape(found.group(1)))


@pytest.mark.usefixtures("chromium")
def test_report_renders_in_chromium(preset_report: Path, tmp_path: Path) -> None:
    index = preset_report / "index.html"
    expected = [html.unescape(c) for c in re.findall(r"<figcaption>(.*?)</figcaption>", index.read_text())]
    assert len(expected) == 9  # 2 layer types x 5 sections, less the sliding layers' scaling comparison

    seen = _probe(index, preset_report)
    assert len(seen["widths"]) == len(expected) and all(w > 0 for w in seen["widths"]), seen["widths"]
    assert seen["captions"] == expected

    shot = screenshot(index, tmp_path / "shot.png", width=1280, height=2000)
    import matplotlib.image

    img = matplotlib.image.imread(str(shot))[..., :3]
    assert img.shape[:2] == (2000, 1280)
    differs = (abs(img - img[-1, -1]).sum(-1) > 0.1).mean()  # against the bottom-right background pixel
    assert differs > 0.1, f"only {differs:.1%} of the screenshot differs from the background: blank page?"


@pytest.mark.usefixtures("chromium")
def test_the_probe_sees_a_broken_image(tmp_path: Path) -> None:
    """Negative control: an undecodable image reads as naturalWidth 0."""
    page = tmp_path / "broken.html"
    page.write_text(
        '<html><body><figure><img src="data:image/png;base64,AAAA" alt="x">'
        "<figcaption>broken</figcaption></figure></body></html>"
    )
    seen = _probe(page, tmp_path)
    assert seen == {"widths": [0], "captions": ["broken"]}
