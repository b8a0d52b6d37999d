"""Request ids and the one JSON log format (api/logs.py, the access logger of api/server.py), and
the diagnosis metrics (api/metrics.py)."""

from __future__ import annotations

import io
import json
import logging
import re
from datetime import timedelta
from types import SimpleNamespace

from dsdoctor.api import logs
from dsdoctor.api.version import package_version
from tests.test_api_support import EVIDENCE, api_app, client  # noqa: F401

BASE_FIELDS = {"time", "level", "logger", "message", "request_id", "pid"}


def test_a_sane_request_id_is_echoed_and_others_are_replaced(client) -> None:
    assert client.get("/healthz", headers={"X-Request-ID": "ci-run.42:a"}).headers["X-Request-ID"] == "ci-run.42:a"
    for header in ({}, {"X-Request-ID": "has spaces"}, {"X-Request-ID": "x" * 129}):
        rid = client.get("/healthz", headers=header).headers["X-Request-ID"]
        assert re.fullmatch(r"[0-9a-f]{32}", rid), rid
    refused = client.post("/v1/diagnoses", data="x", content_type="text/plain", headers={"X-Request-ID": "r1"})
    assert refused.status_code == 415 and refused.headers["X-Request-ID"] == "r1"  # errors carry it too


def _capture(logger: logging.Logger) -> io.StringIO:
    out = io.StringIO()
    logger.addHandler(logs.use_json(logging.StreamHandler(out)))
    return out


def test_app_logs_are_json_lines_with_the_request_id(api_app) -> None:
    logger = logging.getLogger("dsdoctor.test")
    logger.setLevel(logging.INFO)
    out = _capture(logger)
    with api_app.test_request_context("/", headers={"X-Request-ID": "abc"}):
        api_app.preprocess_request()
        logger.info("diagnosed %s", "d1", extra={"diagnosis_id": "d1"})
    logger.warning("outside any request")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert set(first) >= BASE_FIELDS and first["request_id"] == "abc" and first["message"] == "diagnosed d1"
    assert first["level"] == "INFO" and first["logger"] == "dsdoctor.test" and first["diagnosis_id"] == "d1"
    assert second["request_id"] is None and second["level"] == "WARNING"


def test_access_lines_share_the_format(monkeypatch) -> None:
    from gunicorn.config import Config

    from dsdoctor.api.server import _json_access_logger

    cfg = Config()
    cfg.set("accesslog", "-")
    logger = _json_access_logger()(cfg)
    out = io.StringIO()
    for handler in logger.access_log.handlers:
        handler.setStream(out)
    environ = {logs.ENVIRON_KEY: "rid-7", "REMOTE_ADDR": "127.0.0.1", "REQUEST_METHOD": "GET",
               "PATH_INFO": "/v1/diagnoses", "QUERY_STRING": "token=hunter2hunter2hunter2"}
    logger.access(SimpleNamespace(status="200 OK", sent=12), None, environ, timedelta(milliseconds=3))
    line = json.loads(out.getvalue())
    assert set(line) >= BASE_FIELDS and line["request_id"] == "rid-7" and line["logger"] == "gunicorn.access"
    assert line["status"] == 200 and line["path"] == "/v1/diagnoses" and "hunter2" not in line["query"]


def test_metrics_show_diagnosis_duration_verdicts_and_build_info(client) -> None:
    verdict = client.post("/v1/diagnoses", json=EVIDENCE).get_json()["summary"]["verdict"]
    text = client.get("/metrics").get_data(as_text=True)
    assert re.search(r'^dsdoctor_diagnosis_duration_seconds_bucket\{le="\+Inf"\} [1-9]', text, re.MULTILINE)
    assert re.search(rf'^dsdoctor_diagnosis_verdicts_total\{{verdict="{verdict}"\}} [1-9]', text, re.MULTILINE)
    assert 'dsdoctor_build_info{python="' in text and f'version="{package_version()}"}} 1.0' in text
