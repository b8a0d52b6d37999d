"""Fixtures of the browser tests: Debian's Chromium (installed when missing) driven by Playwright,
`dsdoctor serve`, screenshots. Playwright never downloads a browser here: it launches the system
Chromium through ``executable_path``."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "tests" / "output"
SCREENSHOTS = OUTPUT / "screenshots"
INSTALL_HINT = "apt-get update && apt-get install -y --no-install-recommends chromium"
#: a laptop and a phone (iPhone 12-15 CSS width)
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


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


@pytest.fixture(scope="session")
def chromium() -> str:
    """Chromium's path; installed with apt-get when missing and running as root, else the tests skip."""
    path = find_chromium()
    if path is None:
        path = install_chromium(OUTPUT / "chromium-install.log")
    if path is None:
        pytest.skip(f"Chromium is not installed and cannot be installed here (needs root and apt-get); install it "
                    f"with: {INSTALL_HINT}")
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _dsdoctor_command() -> list[str]:
    script = Path(sys.executable).with_name("dsdoctor")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from dsdoctor.api.cli import main; sys.exit(main())"]


def _get(url: str, timeout: float = 5.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture(scope="session")
def server() -> str:
    """`dsdoctor serve` on a free loopback port with a fresh DSDOCTOR_HOME; yields its base URL."""
    home = Path(tempfile.mkdtemp(prefix="dsdoctor-e2e-"))
    port = _free_port()
    env = {**os.environ, "DSDOCTOR_HOME": str(home)}
    env.pop("DSDOCTOR_KB_PATH", None)
    log = (OUTPUT / "e2e-server.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    out = log.open("w")
    process = subprocess.Popen([*_dsdoctor_command(), "serve", "--host", "127.0.0.1", "--port", str(port),
                                "--workers", "1"], env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                pytest.fail(f"dsdoctor serve exited with {process.returncode}; see {log}")
            try:
                if _get(f"{base}/healthz", 2) == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"dsdoctor serve did not answer /healthz within 90 s; see {log}")
            time.sleep(0.3)
        if _get(f"{base}/", 30) == 404:
            pytest.fail("the web pages are not served: create_app must call register_web(app) (api/web)")
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        out.close()
        shutil.rmtree(home, ignore_errors=True)


class Console(list):
    """Console errors and warnings, uncaught exceptions and CSP reports of the pages of one context."""

    def watch(self, page) -> None:
        page.on("console", lambda m: self.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda exc: self.append(f"Uncaught {exc}"))


@pytest.fixture(scope="session")
def browser(chromium: str):
    """Headless Chromium (the system one) under Playwright."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="the test extra installs playwright")
    with sync_api.sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=chromium, headless=True,
                                              args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        try:
            yield instance
        finally:
            with contextlib.suppress(Exception):
                instance.close()


@pytest.fixture
def console() -> Console:
    return Console()


@pytest.fixture
def page(browser, console):
    """A laptop-sized page; its console messages go to ``console``."""
    context = browser.new_context(viewport=DESKTOP)
    context.set_default_timeout(120_000)
    tab = context.new_page()
    console.watch(tab)
    yield tab
    context.close()


@pytest.fixture
def new_page(browser, console):
    """Open more pages with other options (a phone, no JavaScript); closed after the test."""
    contexts = []

    def open_page(**options):
        context = browser.new_context(**options)
        context.set_default_timeout(120_000)
        contexts.append(context)
        tab = context.new_page()
        console.watch(tab)
        return tab

    yield open_page
    for context in contexts:
        context.close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
