"""Render a report in headless Chromium (Debian's `chromium`) and check what a person would see:
the page loads with no console errors, every plot image is decoded with a non-zero size, the
screenshot is not blank, and a server string holding <script> shows as text, not as a node.

Driven over the DevTools protocol on a pipe (--remote-debugging-pipe: fd 3 in, fd 4 out,
NUL-terminated JSON messages), so the checks run from this test, not from a script in the page.
Skips when chromium is absent, except under CI=true, where a missing browser is a failure.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import struct
import subprocess
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from kneecap.report.render import render_report

HOSTILE = "<script>alert(1)</script>"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
TIMEOUT_S = 90.0  # generous: a loaded 2-core machine

if CHROMIUM is None and not IN_CI:
    pytestmark = pytest.mark.skip(
        reason="chromium is not on PATH (apt-get install -y chromium); set CI=true to make its absence a failure"
    )


class DevTools:
    """A minimal DevTools-protocol client over Chromium's --remote-debugging-pipe."""

    def __init__(self, user_data_dir: str, width: int = 1280):
        to_chrome_r, self._to_chrome_w = os.pipe()
        self._from_chrome_r, from_chrome_w = os.pipe()
        # the child must see our pipe ends as fds 3 (commands in) and 4 (replies out): move the child's
        # ends above 4 first so the dup2s below cannot clobber each other, then keep 3 and 4 open
        to_chrome_r, from_chrome_w = (self._above_4(to_chrome_r), self._above_4(from_chrome_w))

        def _wire() -> None:
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        # Popen's own error pipe must not land on fd 3 or 4 (the dup2s would clobber it): occupy them
        placeholders = []
        for fd in (3, 4):
            try:
                os.fstat(fd)
            except OSError:
                placeholders.append(os.open(os.devnull, os.O_RDONLY))
        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--remote-debugging-pipe",
                f"--user-data-dir={user_data_dir}",
                f"--window-size={width},2000",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_wire,
            pass_fds=(3, 4),
            close_fds=True,
        )
        for fd in (to_chrome_r, from_chrome_w, *placeholders):
            os.close(fd)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    @staticmethod
    def _above_4(fd: int) -> int:
        import fcntl

        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(fd)
        return high

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer in time")
            ready, _, _ = select.select([self._from_chrome_r], [], [], left)
            if ready:
                chunk = os.read(self._from_chrome_r, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"chromium closed the pipe (exit code {self.proc.poll()})")
                self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str) -> dict:
        deadline = time.monotonic() + TIMEOUT_S
        for i, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(i)
        while True:
            event = self._read_message(deadline)
            if event.get("method") == method:
                return event
            self.events.append(event)

    def close(self) -> None:
        try:
            os.write(self._to_chrome_w, json.dumps({"id": 10**6, "method": "Browser.close"}).encode() + b"\0")
            self.proc.wait(timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(timeout=15)
        finally:
            os.close(self._to_chrome_w)
            os.close(self._from_chrome_r)


class _Dom(HTMLParser):
    """Element names, <img> sources and text of a DOM dump."""

    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.img_srcs: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "img":
            self.img_srcs.append(dict(attrs).get("src") or "")

    def handle_data(self, data):
        self.text.append(data)


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def _screenshot_is_not_blank(png: bytes) -> float:
    """Fraction of pixels that differ from the most common colour (a blank page gives ~0)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image as mpimg
    import numpy as np

    pixels = (mpimg.imread(io.BytesIO(png), format="png")[..., :3] * 255).astype(np.uint8).reshape(-1, 3)
    colours, counts = np.unique(pixels, axis=0, return_counts=True)
    return 1.0 - counts.max() / len(pixels)


def _load_page(tmp_path: Path, html_path: Path, shot_path: Path, width: int = 1280, probe: str | None = None) -> dict:
    """Load the page at `width` CSS pixels; `probe` is a JavaScript expression returning a JSON string, evaluated
    by the test through the protocol (the page itself runs no script)."""
    user_data = tempfile.mkdtemp(prefix="kneecap-chromium-", dir=tmp_path)
    chrome = DevTools(user_data, width)
    try:
        targets = chrome.send("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        session = chrome.send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            chrome.send(f"{domain}.enable", session=session)
        chrome.send("Page.navigate", {"url": html_path.as_uri()}, session=session)
        chrome.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 2000, "deviceScaleFactor": 1, "mobile": False},
            session=session,
        )
        chrome.wait_event("Page.loadEventFired")
        # every image's decoded size, read by the test through the protocol (the page runs no script)
        images = chrome.send(
            "Runtime.evaluate",
            {
                "expression": "JSON.stringify(Array.from(document.images).map(i => "
                "[i.complete, i.naturalWidth, i.naturalHeight, i.getBoundingClientRect().width]))",
                "returnByValue": True,
            },
            session=session,
        )["result"]["value"]
        metrics = chrome.send("Page.getLayoutMetrics", session=session)
        height = int(min(metrics["cssContentSize"]["height"], 6000))
        shot = chrome.send(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
            },
            session=session,
        )
        shot_path.write_bytes(base64.b64decode(shot["data"]))
        dom = chrome.send(
            "Runtime.evaluate",
            {"expression": "document.documentElement.outerHTML", "returnByValue": True},
            session=session,
        )["result"]["value"]
        errors = [
            e
            for e in chrome.events
            if e.get("method") == "Runtime.exceptionThrown"
            or (e.get("method") == "Runtime.consoleAPICalled" and e["params"].get("type") in ("error", "assert"))
            or (e.get("method") == "Log.entryAdded" and e["params"]["entry"].get("level") == "error")
        ]
        probed = None
        if probe:
            probed = json.loads(
                chrome.send("Runtime.evaluate", {"expression": probe, "returnByValue": True}, session=session)[
                    "result"
                ]["value"]
            )
        return {"images": json.loads(images), "dom": dom, "errors": errors, "probe": probed}
    finally:
        chrome.close()


@pytest.mark.slow
@pytest.mark.parametrize("folder,min_images", [("bench_dir", 5), ("run_dir", 5)])
def test_report_renders_in_headless_chromium(request, tmp_path, folder, min_images):
    if CHROMIUM is None:
        pytest.fail("CI=true but chromium is not installed (apt-get install -y chromium)")
    html_path = next(p for p in render_report(request.getfixturevalue(folder)) if p.suffix == ".html")
    shot_path = tmp_path / "report.png"
    page = _load_page(tmp_path, html_path, shot_path)
    keep = os.environ.get("KNEECAP_REPORT_SCREENSHOT")  # e.g. /tmp/shot.png, to look at it
    if keep:
        shutil.copy(shot_path, keep.replace(".png", f"-{folder}.png"))

    assert page["errors"] == [], f"console errors: {page['errors']}"

    images = page["images"]
    assert len(images) >= min_images, images
    for complete, width, height, shown_width in images:
        assert complete and width > 0 and height > 0 and shown_width > 0, images

    dom = _Dom()
    dom.feed(page["dom"])
    assert "script" not in dom.tags, "a <script> element made it into the DOM"
    assert any(HOSTILE in t for t in dom.text), "the server string should appear as text"
    assert "b" not in dom.tags  # the model name '<b>bold</b>' stays text too
    assert len(dom.img_srcs) == len(images)
    for src in dom.img_srcs:
        assert src.startswith("data:image/png;base64,")
        w, h = _png_size(base64.b64decode(src.split(",", 1)[1]))
        assert w >= 400 and h >= 200

    shot = shot_path.read_bytes()
    w, h = _png_size(shot)
    assert w == 1280 and h > 1500
    assert _screenshot_is_not_blank(shot) > 0.05


# Every number token (digits with separators, decimals, exponents) in a table cell or grid value must sit
# on one line, and no table may be wider than its box: checked in the page by the test, over the protocol.
LAYOUT_PROBE = r"""JSON.stringify((() => {
  const overflow = [];
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth + 1) overflow.push(`page ${root.scrollWidth} > ${root.clientWidth}`);
  document.querySelectorAll('.table-wrap').forEach((wrap, i) => {
    if (wrap.scrollWidth > wrap.clientWidth + 1) {
      const cap = wrap.querySelector('caption');
      overflow.push(`table ${i} (${cap ? cap.textContent : ''}): ${wrap.scrollWidth} > ${wrap.clientWidth}`);
    }
  });
  const wrapped = [];
  const number = /[−+\-]?\d[\d,]*(?:\.\d+)?(?:e[+\-]?\d+)?/g;
  document.querySelectorAll('td, th, dd, dt').forEach(el => {
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.textContent.matchAll(number)) {
        if (m[0].length < 3) continue;
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set(Array.from(range.getClientRects()).filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (tops.size > 1) wrapped.push(`${m[0]} in "${el.textContent.trim().slice(0, 60)}"`);
      }
    }
  });
  const headers = Array.from(document.querySelectorAll('th')).map(th => {
    const r = th.getBoundingClientRect();
    return [th.textContent.trim(), r.left, r.right];
  });
  return {overflow, wrapped, headers, width: root.clientWidth};
})())"""


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["real_sim", "real_bench", "real_run", "real_plan"])
def test_real_reports_fit_1400_px_with_no_wrapped_numbers(request, tmp_path, folder):
    """At 1400 px every table fits its box (the SLO verdict is on screen) and no number wraps mid-digit."""
    if CHROMIUM is None:
        pytest.fail("CI=true but chromium is not installed (apt-get install -y chromium)")
    made = request.getfixturevalue(folder)
    target = made[0] if isinstance(made, tuple) else made
    html_path = next(p for p in render_report(target) if p.suffix == ".html")
    page = _load_page(tmp_path, html_path, tmp_path / "shot.png", width=1400, probe=LAYOUT_PROBE)
    keep = os.environ.get("KNEECAP_REPORT_SCREENSHOT")
    if keep:
        shutil.copy(tmp_path / "shot.png", keep.replace(".png", f"-{folder}-1400.png"))
    assert page["errors"] == [], page["errors"]
    probe = page["probe"]
    assert probe["overflow"] == [], probe["overflow"]
    assert probe["wrapped"] == [], probe["wrapped"]
    for name, left, right in probe["headers"]:
        if name == "SLO verdict":
            assert 0 <= left and right <= probe["width"], (name, left, right)
