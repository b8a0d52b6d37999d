"""Fixtures of the browser tests: Chromium (installed when missing), `dsdoctor serve`, screenshots."""

from __future__ import annotations

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

from tests.e2e.cdp import Browser, find_chromium, install_chromium

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "tests" / "output"
SCREENSHOTS = OUTPUT / "screenshots"
INSTALL_HINT = "apt-get update && apt-get install -y --no-install-recommends chromium"


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
    return [sys.executable, "-c", "import sys; from api.cli import main; sys.exit(main())"]


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


@pytest.fixture(scope="session")
def browser(chromium: str):
    instance = Browser(chromium)
    yield instance
    instance.close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
