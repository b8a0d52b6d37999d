"""Every API endpoint, serve flag, token command, metric and environment variable is documented
(in README.md or a page of docs/, read together)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs_text import DOCS as README  # README.md and docs/*.md together

ROOT = Path(__file__).resolve().parent.parent


def endpoint_strings() -> list[str]:
    """``METHOD /path/{id}`` for every operation of /openapi.json, plus the spec and docs pages."""
    import tempfile

    from tests.test_api_support import make_app

    with tempfile.TemporaryDirectory() as home:
        app = make_app(Path(home))
        spec = app.test_client().get("/openapi.json").get_json()
        app.extensions["dsdoctor"]["services"].close()
    out = ["GET /openapi.json", "GET /docs"]
    for path, operations in spec["paths"].items():
        generic = re.sub(r"\{\w+\}", "{id}", path)
        out += [f"{method.upper()} {generic}" for method in operations
                if method in ("get", "post", "put", "patch", "delete")]
    return sorted(out)


ENDPOINTS = endpoint_strings()
SETTINGS = ["DSDOCTOR_HOME", "DSDOCTOR_MAX_BODY_MB", "DSDOCTOR_KB_PATH", "PROMETHEUS_MULTIPROC_DIR",
            "DSDOCTOR_CONFIG", "DSDOCTOR_SERVER", "DSDOCTOR_TOKEN", "DSDOCTOR_DATABASE_URL", "dsdoctor db copy",
            "dsdoctor serve", "--host", "--port", "--workers", "--insecure",
            "dsdoctor token create", "dsdoctor token list", "dsdoctor token revoke", "--expires",
            "diagnose", "incidents:read", "incidents:write", "admin",
            "dsdoctor_http_requests_total", "dsdoctor_http_request_duration_seconds", "dsdoctor_diagnoses_total",
            "dsdoctor_log_bytes_processed_total", "dsdoctor_secrets_redacted_total", "dsdoctor_search_index_lag",
            "application/problem+json", "Content-Encoding: gzip", "multipart/form-data"]


def test_the_route_list_is_complete() -> None:
    assert "POST /v1/diagnoses" in ENDPOINTS and "GET /v1/incidents/{id}/similar" in ENDPOINTS
    assert "GET /docs" in ENDPOINTS and "GET /openapi.json" in ENDPOINTS and len(ENDPOINTS) == 23  # 21 REST routes + 2 chat-ops


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_endpoint_is_in_the_readme(endpoint: str) -> None:
    assert endpoint in README, f"neither README.md nor docs/ mentions {endpoint!r}"


@pytest.mark.parametrize("setting", SETTINGS)
def test_setting_is_in_the_readme(setting: str) -> None:
    assert setting in README, f"neither README.md nor docs/ mentions {setting!r}"


def test_every_environment_variable_the_api_reads_is_listed() -> None:
    """Scan the API's own modules for os.environ reads; each variable must be in SETTINGS."""
    names = set()
    for path in (ROOT / "api").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        names |= set(re.findall(r"os\.environ(?:\.get\(|\.pop\(|\[)[\"'](\w+)[\"']", text))
        names |= set(re.findall(r"^\w*_ENV = [\"'](\w+)[\"']", text, re.MULTILINE))
    names.discard("DSDOCTOR_SLACK_SIGNING_SECRET")  # chat-ops, documented with it
    assert names <= set(SETTINGS), names - set(SETTINGS)
