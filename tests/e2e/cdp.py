"""A small Chrome DevTools Protocol client over a standard-library WebSocket (no extra packages).

Enough to drive headless Chromium in the end-to-end tests: open a page, wait for it to load,
type into fields, click like a mouse, read the DOM, take full-page screenshots, and collect
console errors and Content-Security-Policy violations.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio", "--remote-debugging-port=0",
)


class CdpError(RuntimeError):
    """The browser answered a command with an error, or did not answer in time."""


# ---------------------------------------------------------------- WebSocket (RFC 6455, client side)


class WebSocket:
    """A blocking WebSocket client: text frames out (masked), frames in (fragmented or not)."""

    def __init__(self, url: str, timeout: float = 30.0):
        parts = urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port or 80), timeout=timeout)
        key = base64.b64encode(secrets.token_bytes(16)).decode()
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        request = (f"GET {path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise CdpError("the browser closed the DevTools connection during the handshake")
            head += chunk
        status, _, rest = head.partition(b"\r\n\r\n")
        if b" 101 " not in status.split(b"\r\n", 1)[0]:
            raise CdpError(f"DevTools WebSocket handshake failed: {status[:200]!r}")
        self.buffer = bytearray(rest)

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buffer)))
            if not chunk:
                raise CdpError("the browser closed the DevTools connection")
            self.buffer += chunk
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        return data

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        header = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = secrets.token_bytes(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def send(self, text: str) -> None:
        self._send_frame(0x1, text.encode("utf-8"))

    def recv(self) -> str:
        """The next complete text message (answers pings, joins fragments)."""
        message = b""
        while True:
            b1, b2 = self._read(2)
            opcode, fin = b1 & 0x0F, b1 & 0x80
            n = b2 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            mask = self._read(4) if b2 & 0x80 else None
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == 0x9:
                self._send_frame(0xA, payload)
                continue
            if opcode == 0x8:
                raise CdpError("the browser closed the DevTools connection")
            if opcode in (0x0, 0x1, 0x2):
                message += payload
                if fin:
                    return message.decode("utf-8")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._send_frame(0x8, b"")
        self.sock.close()


# ---------------------------------------------------------------- the browser


def find_chromium() -> str | None:
    """The Chromium (or Chrome) executable on PATH."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def install_chromium(log: Path) -> str | None:
    """Install Debian's chromium with apt-get when running as root; return its path or None."""
    if os.name != "posix" or os.geteuid() != 0 or not shutil.which("apt-get"):
        return None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        subprocess.run(["apt-get", "update"], stdout=out, stderr=out, env=env, timeout=900, check=False)
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "chromium"], stdout=out, stderr=out,
                       env=env, timeout=1800, check=False)
        # Chinese glyphs in the screenshots (best effort; the assertions do not need them)
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "fonts-noto-cjk"], stdout=out,
                       stderr=out, env=env, timeout=1800, check=False)
    return find_chromium()


class Browser:
    """One headless Chromium with one page, driven over CDP."""

    def __init__(self, executable: str, width: int = 1280, height: int = 900):
        self.profile = tempfile.mkdtemp(prefix="dsdoctor-chromium-")
        self.process = subprocess.Popen(
            [executable, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        self.ws = WebSocket(self._devtools_url())
        self.next_id = 0
        self.events: deque[dict[str, Any]] = deque()
        self.console: list[str] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)
        self.set_viewport(width, height)

    def _devtools_url(self, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        assert self.process.stderr is not None
        seen = []
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                if self.process.poll() is not None:
                    break
                continue
            seen.append(line)
            found = re.search(r"DevTools listening on (ws://\S+)", line)
            if found:
                return found.group(1)
        self.process.kill()
        raise CdpError("Chromium did not start its DevTools endpoint:\n" + "".join(seen[-20:]))

    # -------------------------------------------------------------- protocol

    def call(self, method: str, params: dict[str, Any] | None = None, *, session: bool = False,
             timeout: float = 60.0) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        self.ws.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise CdpError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._note(reply)
            self.events.append(reply)
        raise CdpError(f"{method}: no answer within {timeout:g} s")

    def _note(self, event: dict[str, Any]) -> None:
        method = event.get("method", "")
        params = event.get("params", {})
        if method == "Log.entryAdded" and params.get("entry", {}).get("level") in ("error", "warning"):
            self.console.append(params["entry"].get("text", ""))
        elif method == "Runtime.exceptionThrown":
            self.console.append(json.dumps(params.get("exceptionDetails", {}))[:500])
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning"):
            self.console.append(" ".join(str(a.get("value", "")) for a in params.get("args", [])))

    def wait_event(self, name: str, timeout: float = 60.0) -> dict[str, Any]:
        """The next event ``name`` of the page (events seen earlier are dropped)."""
        while self.events:
            event = self.events.popleft()
            if event.get("method") == name and event.get("sessionId") == self.session:
                return event
        deadline = time.monotonic() + timeout
        self.ws.sock.settimeout(timeout)
        while time.monotonic() < deadline:
            event = json.loads(self.ws.recv())
            self._note(event)
            if event.get("method") == name and event.get("sessionId") == self.session:
                return event
        raise CdpError(f"no {name} within {timeout:g} s")

    # -------------------------------------------------------------- page actions

    def set_viewport(self, width: int, height: int, mobile: bool = False) -> None:
        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                         "deviceScaleFactor": 1, "mobile": mobile}, session=True)

    def goto(self, url: str) -> None:
        """Open ``url`` and wait until it has loaded."""
        self.events.clear()
        result = self.call("Page.navigate", {"url": url}, session=True)
        if result.get("errorText"):
            raise CdpError(f"navigation to {url} failed: {result['errorText']}")
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, session=True)
        if "exceptionDetails" in result:
            raise CdpError(f"script failed: {result['exceptionDetails'].get('text')}: {expression[:200]}")
        return result.get("result", {}).get("value")

    def fill(self, selector: str, text: str) -> None:
        """Put ``text`` into an input or textarea, as typing would (input and change events)."""
        ok = self.evaluate(
            f"(() => {{ const el = document.querySelector({json.dumps(selector)}); if (!el) return false;"
            f" el.focus(); el.value = {json.dumps(text)};"
            " el.dispatchEvent(new Event('input', {bubbles: true}));"
            " el.dispatchEvent(new Event('change', {bubbles: true})); return true; })()")
        if not ok:
            raise CdpError(f"no element matches {selector!r}")

    def set_files(self, selector: str, paths: list[Path]) -> None:
        """Choose files in an ``<input type=file>`` as a person would in the file dialog."""
        root = self.call("DOM.getDocument", {"depth": 0}, session=True)["root"]["nodeId"]
        node = self.call("DOM.querySelector", {"nodeId": root, "selector": selector}, session=True)["nodeId"]
        if not node:
            raise CdpError(f"no element matches {selector!r}")
        self.call("DOM.setFileInputFiles", {"nodeId": node, "files": [str(p) for p in paths]}, session=True)

    def click(self, selector: str, *, navigates: bool = True, timeout: float = 120.0) -> None:
        """Click the centre of the element with the mouse; wait for the next page when it navigates."""
        box = self.evaluate(
            f"(() => {{ const el = document.querySelector({json.dumps(selector)}); if (!el) return null;"
            " el.scrollIntoView({block: 'center'}); const r = el.getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()")
        if not box:
            raise CdpError(f"no element matches {selector!r}")
        self.events.clear()
        x, y = box
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1},
                      session=True)
        if navigates:
            self.wait_event("Page.loadEventFired", timeout=timeout)

    def text(self, selector: str = "body") -> str:
        return self.evaluate(f"(document.querySelector({json.dumps(selector)}) || {{}}).innerText || ''")

    def url(self) -> str:
        return self.evaluate("location.href")

    def screenshot(self, path: Path, *, width: int | None = None) -> Path:
        """A full-page PNG of the current page."""
        metrics = self.call("Page.getLayoutMetrics", session=True)
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        clip = {"x": 0, "y": 0, "width": width or size["width"], "height": min(size["height"], 12000), "scale": 1}
        data = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip},
                         session=True)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.call("Browser.close", timeout=5)
        with contextlib.suppress(Exception):
            self.ws.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        shutil.rmtree(self.profile, ignore_errors=True)
