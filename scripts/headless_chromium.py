"""Open a page in headless Chromium (Debian's `chromium` package) at a fixed window size, read the layout of named
elements at scroll 0 and take a screenshot: what the report's browser tests and scripts/report_screenshot.py see.

Driven over the DevTools protocol with the `websockets` client the project already depends on (no browser is
downloaded: `make test-tools` installs Debian's). `page_view(url)` returns each selector's bounding box in CSS
pixels relative to the viewport, the viewport's size, and the PNG.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FLAGS = [
    "--headless",
    "--no-sandbox",  # as root Chromium refuses to start with its sandbox; the pages opened are our own files
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-port=0",  # Chromium picks a free port and writes it to DevToolsActivePort
]


def find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass(frozen=True)
class PageView:
    width: int
    height: int
    boxes: dict[str, dict[str, float] | None]  # selector -> {top, bottom, left, right, height}, None if absent
    scroll_top: float  # of the page's scrolled container at the time the boxes were read (0: the top)
    png: bytes


class _Session:
    """One page's DevTools session over the browser's websocket (flattened target sessions)."""

    def __init__(self, socket: Any):
        self.socket = socket
        self.ids = itertools.count(1)
        self.session_id: str | None = None

    def call(self, method: str, timeout_s: float = 60, **params: Any) -> dict[str, Any]:
        message_id = next(self.ids)
        message: dict[str, Any] = {"id": message_id, "method": method, "params": params}
        if self.session_id:
            message["sessionId"] = self.session_id
        self.socket.send(json.dumps(message))
        deadline = time.monotonic() + timeout_s
        while True:
            reply = json.loads(self.socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("id") == message_id:
                if "error" in reply:
                    raise RuntimeError(f"DevTools {method} failed: {reply['error']}")
                return reply.get("result", {})

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")


@contextlib.contextmanager
def _browser(width: int, height: int) -> Iterator[_Session]:
    from websockets.sync.client import connect

    browser = find_chromium()
    if browser is None:
        raise RuntimeError("no chromium found: install Debian's package (make test-tools)")
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        process = start_browser(
            [browser, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"]
        )
        try:
            active = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + 60
            while not (active.exists() and len(active.read_text().splitlines()) >= 2):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"chromium did not open its DevTools port (exit status {process.poll()})")
                time.sleep(0.1)
            port, path = active.read_text().splitlines()[:2]
            with connect(f"ws://127.0.0.1:{port}{path}", max_size=None, open_timeout=30) as socket:
                session = _Session(socket)
                target = session.call("Target.createTarget", url="about:blank")["targetId"]
                session.session_id = session.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
                session.call(
                    "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False
                )
                yield session
        finally:
            stop_browser(process)


def start_browser(argv: list[str]) -> subprocess.Popen[bytes]:
    """The browser in a process group of its own, so that stop_browser reaches its helpers too."""
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def stop_browser(process: subprocess.Popen[bytes]) -> None:
    """Stop the browser and every helper process it started (zygote, renderers, crash handler): they outlive a
    stopped main process for a moment and write into its profile, whose removal then fails ("Directory not
    empty"). Its group is killed once the main process has ended (or failed to within 15 s)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


_BOXES = """
(() => {
  const out = {};
  for (const selector of %s) {
    const element = document.querySelector(selector);
    if (!element) { out[selector] = null; continue; }
    const r = element.getBoundingClientRect();
    out[selector] = {top: r.top, bottom: r.bottom, left: r.left, right: r.right, height: r.height};
  }
  const scrolled = [...document.querySelectorAll('*')].map(e => e.scrollTop).reduce((a, b) => Math.max(a, b), 0);
  return {boxes: out, scroll_top: Math.max(scrolled, window.scrollY)};
})()
"""


def _present(page: _Session, selector: str) -> bool:
    """Whether the page has `selector` yet; False while a navigation replaces the page's script context."""
    try:
        return bool(page.evaluate(f"document.querySelector({json.dumps(selector)}) !== null"))
    except RuntimeError as error:
        if "context" in str(error).lower():  # "Execution context was destroyed" / "Cannot find context"
            return False
        raise


def page_view(
    url: str, selectors: Sequence[str], *, width: int = 1400, height: int = 900, ready: str, timeout_s: float = 60
) -> PageView:
    """Load `url`, wait until the element `ready` (a CSS selector) exists, then read the boxes and screenshot."""
    with _browser(width, height) as page:
        page.call("Page.enable")
        page.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout_s
        while not _present(page, ready):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url}: no {ready} after {timeout_s:g} s")
            time.sleep(0.2)
        time.sleep(0.5)  # images decoded and laid out
        layout = page.evaluate(_BOXES % json.dumps(list(selectors)))
        png = base64.b64decode(page.call("Page.captureScreenshot", format="png")["data"])
    return PageView(width, height, layout["boxes"], float(layout["scroll_top"]), png)
