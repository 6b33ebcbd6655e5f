"""A small Chrome DevTools Protocol client for the web report's tests: Debian's
chromium, headless, driven over --remote-debugging-pipe (no WebSocket library,
no browser download), with every network path closed: a dead proxy, a resolver
that resolves nothing, and the page's network emulated offline.  Every request
the page makes is recorded, so a test can assert that none left it.

    with Browser(tmp_path) as b:
        page = b.open(path_to_html)
        page.eval("document.title")
        page.hover("#some .element")
        page.requests()            # URLs the page asked for
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

TIMEOUT_S = 60


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(Exception):
    pass


class Browser:
    def __init__(self, profile_dir: Path, width: int = 1400, height: int = 1000):
        exe = chromium()
        if exe is None:
            raise BrowserError("no chromium on PATH")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def pipes_at_3_and_4() -> None:  # where --remote-debugging-pipe expects them
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             f"--user-data-dir={profile_dir}", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-default-apps", "--disable-dev-shm-usage",
             "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
             "--host-resolver-rules=MAP * ~NOTFOUND", f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4), preexec_fn=pipes_at_3_and_4)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next_id = 0
        self._replies: dict[int, queue.Queue] = {}
        self._lock = threading.Lock()
        self.events: list[dict[str, Any]] = []
        self._event = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_browser,):
            try:
                os.close(fd)
            except OSError:
                pass

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buffer += chunk
            while b"\0" in buffer:
                message, buffer = buffer.split(b"\0", 1)
                data = json.loads(message)
                if "id" in data:
                    with self._lock:
                        q = self._replies.get(data["id"])
                    if q is not None:
                        q.put(data)
                else:
                    with self._event:
                        self.events.append(data)
                        self._event.notify_all()
        with self._event:
            self._event.notify_all()

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = TIMEOUT_S) -> dict[str, Any]:
        with self._lock:
            self._next_id += 1
            ident = self._next_id
            q: queue.Queue = queue.Queue()
            self._replies[ident] = q
        message = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        try:
            reply = q.get(timeout=timeout)
        except queue.Empty:
            raise BrowserError(f"no answer to {method} within {timeout} s") from None
        finally:
            with self._lock:
                self._replies.pop(ident, None)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, session: str | None, timeout: float = TIMEOUT_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._event:
            seen = 0
            while True:
                for e in self.events[seen:]:
                    if e.get("method") == method and (session is None or e.get("sessionId") == session):
                        return e
                seen = len(self.events)
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise BrowserError(f"no {method} within {timeout} s")
                self._event.wait(left)

    def open(self, path: Path) -> "Page":
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for method in ("Network.enable", "Page.enable", "Runtime.enable", "Log.enable"):
            self.send(method, {}, session)
        self.send("Network.emulateNetworkConditions", {"offline": True, "latency": 0, "downloadThroughput": -1,
                                                        "uploadThroughput": -1}, session)
        url = Path(path).resolve().as_uri()
        start = time.monotonic()
        self.send("Page.navigate", {"url": url}, session)
        self.wait_event("Page.loadEventFired", session)
        page = Page(self, session, url)
        page.load_seconds = time.monotonic() - start
        return page


class Page:
    def __init__(self, browser: Browser, session: str, url: str):
        self.browser = browser
        self.session = session
        self.url = url
        self.load_seconds = 0.0

    def eval(self, expression: str, timeout: float = TIMEOUT_S) -> Any:
        result = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                        "awaitPromise": True}, self.session, timeout=timeout)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise BrowserError(f"{expression[:200]!r} threw: "
                               f"{details.get('exception', {}).get('description') or details.get('text')}")
        return result["result"].get("value")

    def settle(self, timeout: float = TIMEOUT_S) -> None:
        """Wait until the page has filled every table it started."""
        self.eval("new Promise(function (done) { (function poll() {"
                  " if (window.pyrometer.pending() === 0) done(true); else setTimeout(poll, 10); })(); })",
                  timeout=timeout)

    def click(self, selector: str) -> None:
        self.eval(f"document.querySelector({json.dumps(selector)}).click()")

    def hover(self, selector: str) -> None:
        """A real mouse move onto the element's centre."""
        box = self.eval(f"(function () {{ var e = document.querySelector({json.dumps(selector)});"
                        " e.scrollIntoView({block: 'center'}); var r = e.getBoundingClientRect();"
                        " return [r.left + r.width / 2, r.top + r.height / 2]; })()")
        self.browser.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": box[0], "y": box[1]},
                          self.session)

    def requests(self) -> list[str]:
        """URLs the page asked for (the page itself included)."""
        return [e["params"]["request"]["url"] for e in self.browser.events
                if e.get("method") == "Network.requestWillBeSent" and e.get("sessionId") == self.session]

    def errors(self) -> list[str]:
        """Uncaught exceptions and console errors (a Content-Security-Policy refusal is one)."""
        out = []
        for e in self.browser.events:
            if e.get("sessionId") != self.session:
                continue
            if e.get("method") == "Runtime.exceptionThrown":
                d = e["params"]["exceptionDetails"]
                out.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
            elif e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error":
                out.append(e["params"]["entry"]["text"])
            elif e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] == "error":
                out.append(str(e["params"]["args"]))
        return out
