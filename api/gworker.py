"""The gunicorn worker of `dsdoctor serve`: threads, a bounded read, and problem+json for gunicorn's own errors.

* gthread (a thread pool per process) instead of sync workers: a sync worker serves one
  connection at a time and waits as long as its client does, so as many idle connections as
  workers left /healthz unanswered for the whole worker timeout. gthread only hands a connection
  to a thread once it is readable, and gives an idle one back to its poller after 5 s.
* A client that sends part of a request and stops still holds its thread while the request is
  parsed; every read and write on a connection is bounded by ``READ_TIMEOUT_S``.
* Requests gunicorn refuses itself (a request line over the limit: 414, a malformed request:
  400) never reach Flask; gunicorn writes them as HTML with no hook to change that, so this
  worker replaces the writer with one that sends RFC 9457 problem+json like the rest of the API.
"""

from __future__ import annotations

import json

from gunicorn import util
from gunicorn.workers.gthread import ThreadWorker

from dsdoctor.kb.redact import redact_text

READ_TIMEOUT_S = 30.0
THREADS = 8  #: per worker process: more than a handful of stalled clients can hold


def write_problem(sock, status_int: int, reason: str, mesg: str) -> None:
    """gunicorn's ``util.write_error`` with an ``application/problem+json`` body (the request text redacted)."""
    body = json.dumps({"type": "about:blank", "title": reason, "status": status_int,
                       "detail": redact_text(mesg) or reason, "instance": ""}).encode("utf-8")
    head = (f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\nContent-Type: application/problem+json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1")
    util.write_nonblock(sock, head + body)


class Worker(ThreadWorker):
    """gthread with every socket operation of a request bounded and problem+json errors."""

    def init_process(self) -> None:
        util.write_error = write_problem  # the worker's base class looks it up at each error
        super().init_process()

    def handle(self, conn):
        init = conn.init
        if not getattr(init, "bounded", False):
            def bounded_init() -> None:
                # handle() has just made the socket blocking (no timeout); bound it before parsing
                conn.sock.settimeout(READ_TIMEOUT_S)
                init()

            bounded_init.bounded = True  # type: ignore[attr-defined]
            conn.init = bounded_init
        return super().handle(conn)
