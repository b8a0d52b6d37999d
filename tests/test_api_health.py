"""/healthz, /readyz, /metrics, /openapi.json and /docs (api/blueprints/health.py, docs.py, api/metrics.py)."""

from __future__ import annotations

import re

import pytest

from dsdoctor.api.version import package_version
from tests.test_api_support import EVIDENCE, api_app, assert_problem, client, make_app  # noqa: F401


def test_healthz(client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200 and response.get_json() == {"status": "ok", "version": package_version()}


def test_the_api_version_is_the_package_version(client) -> None:
    from importlib.metadata import version

    assert package_version() == version("dsdoctor") != "1"
    assert client.get("/openapi.json").get_json()["info"]["version"] == version("dsdoctor")


def test_readyz_reports_each_check(client, monkeypatch) -> None:
    import dsdoctor.api.blueprints.health as health

    fake = {"knowledge": {"ok": True, "detail": "x"}, "store": {"ok": True, "detail": "y"}}
    monkeypatch.setattr(health, "readiness_checks", lambda: fake)
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.get_json()["status"] == "ready"
    fake["store"] = {"ok": False, "detail": "disk full"}
    body = assert_problem(client.get("/readyz"), 503)
    assert body["checks"]["store"]["detail"] == "disk full" and "store" in body["detail"]


def test_readiness_checks_are_real(api_app) -> None:
    from dsdoctor.api.blueprints.health import readiness_checks

    with api_app.test_request_context("/readyz"):
        checks = readiness_checks()
    assert set(checks) == {"warm_up", "knowledge", "rules", "store", "index"}
    assert checks["knowledge"]["ok"] and "4 causes" in checks["knowledge"]["detail"]
    assert checks["store"]["ok"] and checks["index"]["ok"]


def test_metrics_count_requests_by_route_and_status(client) -> None:
    client.get("/healthz")
    client.get("/v1/diagnoses/nope")
    client.get("/no/such/thing")
    response = client.get("/metrics")
    assert response.status_code == 200 and response.mimetype == "text/plain"
    text = response.get_data(as_text=True)
    assert re.search(r'dsdoctor_http_requests_total\{method="GET",route="/healthz",status="200"\} \d', text)
    assert 'route="/v1/diagnoses/<diagnosis_id>",status="404"' in text
    assert 'route="unmatched",status="404"' in text  # no label per unknown path
    assert "dsdoctor_http_request_duration_seconds_bucket" in text
    assert re.search(r"^dsdoctor_search_index_lag \d", text, re.MULTILINE)


def test_metrics_merge_worker_files_in_multiprocess_mode(tmp_path, monkeypatch) -> None:
    """With PROMETHEUS_MULTIPROC_DIR set before import, /metrics sums what every process wrote."""
    import subprocess
    import sys

    script = f"""
import os
os.environ["PROMETHEUS_MULTIPROC_DIR"] = {str(tmp_path / "prom")!r}
os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)
pid = os.fork()
from dsdoctor.api import metrics
metrics.LOG_BYTES.inc(100)
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
body, _ = metrics.render(lambda: 0)
print(body.decode())
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parent.parent)).stdout
    assert "dsdoctor_log_bytes_processed_total 200.0" in out


def test_openapi_document(client) -> None:
    spec = client.get("/openapi.json").get_json()
    assert spec["openapi"].startswith("3.")
    paths = spec["paths"]
    for path in ("/v1/diagnoses", "/v1/diagnoses/{diagnosis_id}", "/v1/diagnoses/{diagnosis_id}/observations",
                 "/v1/diagnoses/{diagnosis_id}/incident", "/v1/kb/causes", "/v1/kb/causes/{cause_id}",
                 "/v1/kb/symptoms", "/v1/kb/experiments", "/v1/kb/graph", "/v1/incidents",
                 "/v1/incidents/{incident_id}", "/v1/incidents/{incident_id}/similar", "/healthz", "/readyz",
                 "/metrics"):
        assert path in paths, path
    body = paths["/v1/diagnoses"]["post"]["requestBody"]["content"]
    assert set(body) == {"application/json", "multipart/form-data"}
    assert paths["/v1/diagnoses"]["post"]["x-required-scope"] == "diagnose"
    assert paths["/v1/incidents/{incident_id}"]["delete"]["x-required-scope"] == "admin"
    default = spec["components"]["responses"]["DEFAULT_ERROR"]["content"]
    assert list(default) == ["application/problem+json"]
    assert spec["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    evidence = spec["components"]["schemas"]["Evidence"]
    assert evidence["additionalProperties"] is False and "logs" in evidence["properties"]


def test_docs_page_works_offline(client) -> None:
    page = client.get("/docs")
    assert page.status_code == 200 and page.mimetype == "text/html"
    html = page.get_data(as_text=True)
    assert "/openapi.json" in html or "/docs/assets/init.js" in html
    assert not re.search(r"(src|href)=\"https?://", html)  # no CDN
    for asset in re.findall(r'(?:src|href)="(/docs/assets/[^"]+)"', html):
        response = client.get(asset)
        assert response.status_code == 200, asset
        assert not re.search(rb"(src|href)=\"https?://", response.get_data()[:2000])
    assert client.get("/docs/assets/init.js").get_data(as_text=True).count("/openapi.json") == 1
    assert_problem(client.get("/docs/assets/../../etc/passwd"), 404)
    assert_problem(client.get("/docs/assets/secret.py"), 404)


def test_docs_fall_back_without_swagger_ui(client, monkeypatch) -> None:
    import dsdoctor.api.blueprints.docs as docs

    monkeypatch.setattr(docs, "swagger_dist", lambda: None)
    html = client.get("/docs").get_data(as_text=True)
    assert "/v1/diagnoses" in html and "<table>" in html


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_chinese_text_is_utf8_json(client, lang) -> None:
    response = client.post(f"/v1/diagnoses?lang={lang}", json={**EVIDENCE, "description": "第 3 号卡 loss is nan"})
    assert response.status_code == 201
    assert response.content_type.startswith("application/json")
    if lang == "zh":
        assert "首要候选".encode() in response.get_data() or "最可能".encode() in response.get_data()
