"""`dsdoctor serve`: gunicorn with several workers answers /healthz within 15 s and stops on SIGTERM."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsdoctor.api.server import curl_example, is_loopback

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port: int, path: str, timeout: float = 15.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def start_server(home: Path, port: int, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "DSDOCTOR_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    return subprocess.Popen([sys.executable, "-m", "dsdoctor.api.cli", "serve", "--port", str(port), *extra], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_healthy(port: int, proc: subprocess.Popen, seconds: float = 15.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if proc.poll() is not None:
            pytest.fail(f"server exited early:\n{proc.stdout.read()}")
        try:
            if get(port, "/healthz", timeout=2.0)[0] == 200:
                return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.1)
    pytest.fail(f"/healthz did not answer within {seconds} s")


@pytest.mark.slow
def test_serve_two_workers_health_metrics_and_sigterm(tmp_path) -> None:
    port = free_port()
    proc = start_server(tmp_path / "home", port, "--workers", "2")
    try:
        wait_healthy(port, proc)
        status, body = get(port, "/healthz")
        assert status == 200 and json.loads(body)["status"] == "ok"
        for _ in range(6):
            get(port, "/healthz")
        status, body = get(port, "/metrics")
        assert status == 200
        counted = [line for line in body.decode().splitlines()
                   if line.startswith('dsdoctor_http_requests_total{method="GET",route="/healthz",status="200"}')]
        assert counted and float(counted[0].split()[-1]) >= 7  # summed over both workers
        status, body = get(port, "/v1/nothing")
        assert status == 404 and json.loads(body)["status"] == 404
        assert (tmp_path / "home" / "prometheus").is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0, out
    assert f"listening on http://127.0.0.1:{port}" in out
    assert "authentication: OFF" in out
    assert "try: curl -s -X POST" in out
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    access = [a for a in lines if a.get("logger") == "gunicorn.access"]
    assert any(a["path"] == "/healthz" and a["status"] == 200 and len(a["request_id"]) == 32 for a in access)
    server_logs = [a for a in lines if a.get("logger") == "gunicorn.error"]
    assert server_logs and any("Booting worker" in a["message"] for a in server_logs)  # gunicorn's own, as JSON
    for line in lines:  # one format for all
        assert {"time", "level", "logger", "message", "request_id", "pid"} <= set(line), line


def test_refuses_open_api_on_a_public_address(tmp_path) -> None:
    proc = start_server(tmp_path / "home", free_port(), "--host", "0.0.0.0", "--workers", "1")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "refusing to serve on 0.0.0.0" in out and "--insecure" in out


def test_bad_body_limit_setting_is_refused(tmp_path) -> None:
    env = {**os.environ, "DSDOCTOR_HOME": str(tmp_path), "DSDOCTOR_MAX_BODY_MB": "huge"}
    proc = subprocess.run([sys.executable, "-m", "dsdoctor.api.cli", "serve", "--port", str(free_port())], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "DSDOCTOR_MAX_BODY_MB" in proc.stderr


@pytest.mark.parametrize(("host", "loopback"), [("127.0.0.1", True), ("localhost", True), ("::1", True),
                                                ("0.0.0.0", False), ("10.1.2.3", False)])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_curl_example_is_valid_shell_and_json() -> None:
    import shlex

    words = shlex.split(curl_example("0.0.0.0", 8000, with_token=True))
    assert words[:4] == ["curl", "-s", "-X", "POST"] and "http://127.0.0.1:8000/v1/diagnoses" in words
    assert "Authorization: Bearer $DSDOCTOR_TOKEN" in words
    evidence = json.loads(words[words.index("-d") + 1])
    assert evidence["logs"][0]["text"].startswith("[rank3]")


@pytest.mark.slow
def test_issue14_idle_clients_do_not_starve_the_workers(tmp_path) -> None:
    """Twice as many stalled connections as workers (half silent, half mid-request): /healthz still answers
    within 1 s; gunicorn's own 414 is problem+json; the access log holds no percent-encoded secret."""
    port = free_port()
    workers = 2
    proc = start_server(tmp_path / "home", port, "--workers", str(workers))
    idle: list[socket.socket] = []
    try:
        wait_healthy(port, proc)
        for n in range(2 * workers):
            sock = socket.create_connection(("127.0.0.1", port))
            if n % 2:
                sock.sendall(b"POST /v1/diagnoses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 100\r\n\r\n{\"description\": ")  # the body never ends
            idle.append(sock)
        time.sleep(0.5)
        for _ in range(5):
            started = time.monotonic()
            assert get(port, "/healthz", timeout=5.0)[0] == 200
            assert time.monotonic() - started < 1.0
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/" + "a" * 9000)
        response = conn.getresponse()
        assert response.status == 414 and response.getheader("Content-Type") == "application/problem+json"
        assert json.loads(response.read())["status"] == 414
        conn.close()
        get(port, "/v1/incidents?q=password%3Dhunter2x")
        get(port, "/v1/kb/causes/hf_aB3aB3aB3aB3aB3aB3aB3aB3?auth=Bearer%20abcdefghijklmnopq")
    finally:
        for sock in idle:
            sock.close()
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0, out
    for secret in ("hunter2x", "hf_aB3aB3aB3aB3aB3aB3aB3aB3", "abcdefghijklmnopq"):
        assert secret not in out
    logged = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    access = [a for a in logged if "path" in a and "query" in a]  # the access lines of the JSON log
    assert any("[REDACTED:" in a["query"] for a in access) and any("[REDACTED:" in a["path"] for a in access)


def test_issue14_access_log_redacts_percent_encoded_secrets() -> None:
    from dsdoctor.api.server import redacted_url_part

    assert "hunter2" not in redacted_url_part("q=password%3Dhunter2&page=2", query=True)
    assert "abcdefghijklmnop" not in redacted_url_part("a=Bearer%20abcdefghijklmnop", query=True)
    assert redacted_url_part("q=nccl+timeout&lang=zh", query=True) == "q=nccl+timeout&lang=zh"
    assert redacted_url_part("/v1/kb/causes/memory.fragmentation") == "/v1/kb/causes/memory.fragmentation"
