"""One JSON log format for the app, gunicorn and the access log, each line with the request id.

A request's id is its ``X-Request-ID`` header when that is a sane token (1-128 of
``A-Za-z0-9._:-``), else a new random one; it is echoed in the response header, put on every log
record written while the request runs, and on its access-log line.
"""

from __future__ import annotations

import logging
import re
import sys
import uuid

from flask import Flask, g, has_request_context, request
from pythonjsonlogger.json import JsonFormatter

HEADER = "X-Request-ID"
ENVIRON_KEY = "dsdoctor.request_id"  # gunicorn's access logger reads it from the WSGI environ
_VALID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
#: every line: time, level, logger, message, request_id, pid, then the record's own fields
FIELDS = "%(levelname)s %(name)s %(message)s %(request_id)s %(process)d"
RENAMED = {"levelname": "level", "name": "logger", "process": "pid"}


def request_id_from(header: str | None) -> str:
    """The client's id when it is a sane token, else a new one."""
    if header and _VALID.fullmatch(header):
        return header
    return uuid.uuid4().hex


def current_request_id() -> str | None:
    return g.get("request_id") if has_request_context() else None


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` (None outside a request) to records that do not carry one."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = current_request_id()
        return True


def formatter() -> JsonFormatter:
    return JsonFormatter(FIELDS, rename_fields=RENAMED, timestamp="time", json_ensure_ascii=False)


def use_json(handler: logging.Handler) -> logging.Handler:
    """Make ``handler`` write the JSON format with request ids."""
    handler.setFormatter(formatter())
    handler.addFilter(RequestIdFilter())
    return handler


def configure(level: int = logging.INFO) -> None:
    """The ``dsdoctor`` loggers write JSON lines on stderr (called in each server process)."""
    logger = logging.getLogger("dsdoctor")
    if not any(getattr(h, "dsdoctor_json", False) for h in logger.handlers):
        handler = use_json(logging.StreamHandler(sys.stderr))
        handler.dsdoctor_json = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def install(app: Flask) -> None:
    """Give each request its id and echo it in the response."""

    @app.before_request
    def _request_id() -> None:
        g.request_id = request_id_from(request.headers.get(HEADER))
        request.environ[ENVIRON_KEY] = g.request_id

    @app.after_request
    def _echo(response):
        rid = g.get("request_id")
        if rid:
            response.headers[HEADER] = rid
        return response
