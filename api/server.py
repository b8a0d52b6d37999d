"""Run the API under gunicorn (a production WSGI server) from `dsdoctor serve`.

* N worker processes of ``THREADS`` threads each (gthread, see :mod:`api.gworker`: a client that
  never finishes its request cannot starve them); each process builds the app itself
  (``create_app`` in the worker), so the knowledge base is loaded once per worker and nothing
  (SQLite handles, index readers) is shared across a fork.
* ``PROMETHEUS_MULTIPROC_DIR`` is set (and emptied) under ``DSDOCTOR_HOME`` before any worker
  imports prometheus_client; dead workers are marked so their gauges go away.
* Access logs are JSON lines on stdout, app and gunicorn logs JSON lines on stderr (api/logs.py); SIGTERM stops gracefully (in-flight requests finish,
  up to ``graceful_timeout``); gunicorn's control socket is disabled.
* With no API tokens the API is open, which is only allowed on a loopback address unless
  ``--insecure`` is given.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import shlex
import socket
import urllib.parse
from pathlib import Path

import click

from dsdoctor.api.gworker import THREADS
from dsdoctor.kb.redact import redact_text

GRACEFUL_TIMEOUT_S = 20
WORKER_TIMEOUT_S = 120
EXAMPLE_EVIDENCE = {
    "description": "rank 3 ran out of GPU memory at the first step",
    "logs": [{"source": "rank3", "text": "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                                         "2.00 GiB. GPU 3 has a total capacity of 79.15 GiB of which 1.2 GiB is free."}],
}


def is_loopback(host: str) -> bool:
    """True when ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
        except OSError:
            return False


def curl_example(host: str, port: int, with_token: bool) -> str:
    """A curl command that diagnoses a small evidence document on this server."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    shown = f"[{shown}]" if ":" in shown else shown
    auth = ' -H "Authorization: Bearer $DSDOCTOR_TOKEN"' if with_token else ""
    body = shlex.quote(json.dumps(EXAMPLE_EVIDENCE, separators=(",", ":")))
    return (f"curl -s -X POST 'http://{shown}:{port}/v1/diagnoses'{auth} -H 'Content-Type: application/json' "
            f"-d {body}")


def check_port_free(host: str, port: int) -> None:
    """One clear line when the port is taken, instead of gunicorn's five retries and tracebacks."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds: TIME_WAIT is no conflict
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise click.ClickException(f"port {port} is in use; try PORT={port + 1} make run "
                                           f"(or dsdoctor serve --port {port + 1})") from None
            raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def prepare_metrics_dir(home: Path) -> Path:
    """An empty directory for prometheus_client's multiprocess files, exported in the environment."""
    directory = home / "prometheus"
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    return directory


def redacted_url_part(text: str, *, query: bool = False) -> str:
    """A path or query string for the access log with its secrets removed, percent-encoded ones too
    (``q=password%3Dhunter2``, ``Bearer%20...`` is what browsers and ``curl --data-urlencode`` send).

    When a secret hides behind percent-encoding the decoded, redacted text is logged instead."""
    plain = redact_text(text)
    decoded = urllib.parse.unquote_plus(text) if query else urllib.parse.unquote(text)
    if decoded == text:
        return plain
    clean = redact_text(decoded)
    return plain if clean == decoded else clean


def _json_access_logger():
    from gunicorn.glogging import Logger

    from dsdoctor.api import logs

    class JsonAccessLogger(Logger):
        """gunicorn's own messages and one access line per request, all in the app's JSON format
        (api/logs.py) with the request id; query strings redacted."""

        def setup(self, cfg):
            super().setup(cfg)
            for handler in (*self.error_log.handlers, *self.access_log.handlers):
                logs.use_json(handler)

        def access(self, resp, req, environ, request_time):
            if not self.access_log_enabled:
                return
            status = resp.status.split(None, 1)[0] if isinstance(resp.status, str) else resp.status
            record = {
                "request_id": environ.get(logs.ENVIRON_KEY),
                "remote": environ.get("REMOTE_ADDR", "-"),
                "method": environ.get("REQUEST_METHOD"),
                "path": redacted_url_part(environ.get("PATH_INFO") or ""),
                "query": redacted_url_part(environ.get("QUERY_STRING") or "", query=True),
                "status": int(status),
                "bytes": getattr(resp, "sent", None),
                "duration_ms": round(request_time.total_seconds() * 1000, 2),
                "user_agent": environ.get("HTTP_USER_AGENT"),
            }
            try:
                self.access_log.info("request", extra=record)
            except Exception:
                self.exception("access log failed")

    return JsonAccessLogger


def run_server(host: str, port: int, workers: int, insecure: bool) -> None:
    """Start gunicorn with ``workers`` processes serving ``api.app:create_app()``."""
    from dsdoctor.api.limits import max_body_bytes
    from dsdoctor.api.settings import home as data_home
    from dsdoctor.kb.storage.tokens import TokenStore

    home = data_home().resolve()
    os.environ["DSDOCTOR_HOME"] = str(home)
    try:
        max_body_bytes()
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if workers < 1:
        raise click.ClickException(f"--workers must be at least 1, got {workers}")
    tokens = TokenStore(home).count()
    loopback = is_loopback(host)
    if tokens == 0 and not loopback and not insecure:
        raise click.ClickException(
            f"refusing to serve on {host} (not a loopback address) with no API tokens: anyone could use the API. "
            "Create a token first (dsdoctor token create --name NAME --scope diagnose) or pass --insecure.")
    open_without_tokens = loopback or insecure
    check_port_free(host, port)
    prepare_metrics_dir(home)  # before any worker imports prometheus_client

    from gunicorn.app.base import BaseApplication

    from dsdoctor.api.metrics import mark_process_dead

    def when_ready(_server) -> None:
        click.echo(f"dsdoctor listening on http://{host}:{port}  (workers: {workers}, data: {home})")
        if tokens == 0:
            click.echo("authentication: OFF - no API tokens configured (development mode"
                       f"{'; --insecure' if not loopback else ''}); "
                       "create one with: dsdoctor token create --name NAME --scope diagnose")
        else:
            click.echo(f"authentication: bearer tokens ({tokens} configured)")
        click.echo(f"docs: http://{host}:{port}/docs   health: curl -s http://{host}:{port}/healthz")
        click.echo("try: " + curl_example(host, port, with_token=tokens > 0))

    def child_exit(_server, worker) -> None:
        mark_process_dead(worker.pid)

    class _Server(BaseApplication):
        def load_config(self) -> None:
            self.cfg.set("bind", f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
            self.cfg.set("workers", workers)
            self.cfg.set("worker_class", "dsdoctor.api.gworker.Worker")
            self.cfg.set("threads", THREADS)
            self.cfg.set("timeout", WORKER_TIMEOUT_S)
            self.cfg.set("graceful_timeout", GRACEFUL_TIMEOUT_S)
            self.cfg.set("control_socket_disable", True)  # gunicorn 27 opens ~/.gunicorn/ otherwise
            self.cfg.set("accesslog", "-")
            self.cfg.set("logger_class", _json_access_logger())
            self.cfg.set("when_ready", when_ready)
            self.cfg.set("child_exit", child_exit)
            self.cfg.set("proc_name", "dsdoctor")

        def load(self):
            from dsdoctor.api import logs
            from dsdoctor.api.app import create_app

            logs.configure()

            return create_app({"DSDOCTOR_HOME": str(home), "DSDOCTOR_OPEN_WITHOUT_TOKENS": open_without_tokens,
                               "DSDOCTOR_BIND_HOST": host})

    _Server().run()
