"""The production example: nginx (examples/nginx/dsdoctor.conf, as shipped) buffering in front of
`dsdoctor serve`, both on loopback. A diagnosis goes through the proxy; stalled uploads stay in
nginx and never reach gunicorn; nginx refuses a body over the limit. Needs Debian's nginx: the
test installs it when missing and running as root with apt-get, else it skips."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_api_serve import free_port, start_server, wait_healthy

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "examples" / "nginx" / "dsdoctor.conf"
CASE = ROOT / "seed_cases" / "only-rank-3-ooms-on-an-8-gpu-node-while-a-stale-process-holds-its-gpu"
STALLED = 20  #: more stalled uploads than one gunicorn worker has threads (8)


def _nginx() -> str:
    found = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
    if found:
        return found
    if os.name == "posix" and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=900, check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "nginx"], env=env,
                       capture_output=True, timeout=1800, check=False)
        found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
    if not found:
        pytest.skip("nginx is not installed and cannot be installed here (needs root and apt-get); "
                    "install it with: apt-get install -y --no-install-recommends nginx")
    return found


def _config(tmp: Path, listen: int, upstream: int) -> Path:
    """The shipped server block with only its two ports changed, inside a minimal nginx.conf."""
    shipped = CONF.read_text(encoding="utf-8")
    assert "listen 80;" in shipped and "server 127.0.0.1:8000;" in shipped, "the test edits these two lines"
    server = shipped.replace("listen 80;", f"listen 127.0.0.1:{listen};").replace(
        "server 127.0.0.1:8000;", f"server 127.0.0.1:{upstream};")
    (tmp / "dsdoctor.conf").write_text(server, encoding="utf-8")
    temp = "\n".join(f"  {kind}_temp_path {tmp / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    main = tmp / "nginx.conf"
    main.write_text(
        ("user root;\n" if os.geteuid() == 0 else "")  # the workers must write the temporary files here
        + f"worker_processes 1;\npid {tmp / 'nginx.pid'};\nerror_log {tmp / 'error.log'} warn;\n"
        f"events {{ worker_connections 256; }}\nhttp {{\n  access_log {tmp / 'access.log'};\n{temp}\n"
        f"  include {tmp / 'dsdoctor.conf'};\n}}\n", encoding="utf-8")
    return main


def _request(port: int, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
             timeout: float = 120.0) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def _wait_port(port: int, proc: subprocess.Popen, log: Path, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"nginx exited with {proc.returncode}: {log.read_text() if log.exists() else ''}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"nginx did not listen on {port} within {seconds} s")


def test_nginx_example_buffers_in_front_of_dsdoctor_serve(tmp_path) -> None:
    nginx = _nginx()
    home = tmp_path / "home"
    token = subprocess.run([sys.executable, "-m", "dsdoctor.api.cli", "token", "create", "--name", "proxy-test", "--scope",
                            "diagnose"], cwd=ROOT, env={**os.environ, "DSDOCTOR_HOME": str(home)},
                           capture_output=True, text=True, timeout=120, check=True).stdout.strip().splitlines()[-1]
    app_port, proxy_port = free_port(), free_port()
    server = start_server(home, app_port, "--workers", "1", "--host", "127.0.0.1")
    conf = _config(tmp_path, proxy_port, app_port)
    check = subprocess.run([nginx, "-t", "-p", str(tmp_path), "-c", str(conf), "-e", str(tmp_path / "error.log")],
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
    proxy = subprocess.Popen([nginx, "-p", str(tmp_path), "-c", str(conf), "-e", str(tmp_path / "error.log"),
                              "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stalled: list[socket.socket] = []
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    try:
        wait_healthy(app_port, server, seconds=60)
        _wait_port(proxy_port, proxy, tmp_path / "error.log")

        # a diagnosis through the proxy: 3 MB of healthy steps around the seed case's log, so
        # nginx spools the body to a temporary file before gunicorn reads it at once
        steps = "".join(f"[rank0] step {i} loss 2.{i % 97:02d} lr 1e-5\n" for i in range(70_000))
        text = (CASE / "torchrun.log").read_text(encoding="utf-8")
        evidence = {"logs": [{"source": "torchrun", "text": steps + text}],
                    "config": json.loads((CASE / "ds_config.json").read_text(encoding="utf-8"))}
        body = json.dumps(evidence).encode()
        assert len(body) > 2 * 1024 * 1024
        status, headers, answer = _request(proxy_port, "POST", "/v1/diagnoses", body, auth)
        assert status == 201, answer[:500]
        diagnosis = json.loads(answer)
        top = [c["id"] for c in diagnosis["causes"][:3]]
        assert "memory.foreign_process_on_gpu" in top, top
        assert re.fullmatch(r"[0-9a-f]{32}", headers.get("x-request-id", "")), "nginx's $request_id reached the app"
        status, _, answer = _request(proxy_port, "GET", f"/v1/diagnoses/{diagnosis['id']}", headers=auth)
        assert status == 200 and json.loads(answer)["id"] == diagnosis["id"]

        # uploads that stall halfway stay in nginx: the one gunicorn worker still answers at once
        for _ in range(STALLED):
            sock = socket.create_connection(("127.0.0.1", proxy_port))
            sock.sendall(b"POST /v1/diagnoses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Authorization: Bearer " + token.encode() + b"\r\nContent-Length: 100000\r\n\r\n"
                         b"{\"description\": \"")  # the body never ends
            stalled.append(sock)
        time.sleep(0.5)
        for _ in range(5):
            started = time.monotonic()
            assert _request(proxy_port, "GET", "/healthz", timeout=5)[0] == 200
            assert time.monotonic() - started < 1.0

        # a body over client_max_body_size (= DSDOCTOR_MAX_BODY_MB) is refused by nginx itself
        status, _, _ = _request(proxy_port, "POST", "/v1/diagnoses", b"x" * (33 * 1024 * 1024), auth)
        assert status == 413
    finally:
        for sock in stalled:
            sock.close()
        proxy.send_signal(signal.SIGQUIT)  # graceful stop
        try:
            proxy.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait(timeout=10)
        server.send_signal(signal.SIGTERM)
        try:
            out, _ = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            out, _ = server.communicate(timeout=10)
    access = [json.loads(line) for line in out.splitlines() if line.startswith("{") and '"path"' in line]
    posts = [a for a in access if a.get("path") == "/v1/diagnoses" and a.get("method") == "POST"]
    assert len(posts) == 1, f"only the complete upload reached gunicorn, not the {STALLED} stalled ones: {posts}"
