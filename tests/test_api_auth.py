"""Bearer tokens and scopes on every route (api/auth.py)."""

from __future__ import annotations

import pytest

from dsdoctor.kb.storage.tokens import TokenStore
from tests.test_api_support import EVIDENCE, assert_problem, make_app

#: (method, url, scope the route needs)
ROUTES = [
    ("post", "/v1/diagnoses", "diagnose"),
    ("get", "/v1/diagnoses", "diagnose"),
    ("get", "/v1/diagnoses/x", "diagnose"),
    ("post", "/v1/diagnoses/x/observations", "diagnose"),
    ("post", "/v1/diagnoses/x/incident", "incidents:write"),
    ("get", "/v1/kb/causes", "diagnose"),
    ("get", "/v1/kb/causes/x", "diagnose"),
    ("get", "/v1/kb/symptoms", "diagnose"),
    ("get", "/v1/kb/experiments", "diagnose"),
    ("get", "/v1/kb/graph", "diagnose"),
    ("get", "/v1/incidents", "incidents:read"),
    ("post", "/v1/incidents", "incidents:write"),
    ("get", "/v1/incidents/x", "incidents:read"),
    ("patch", "/v1/incidents/x", "incidents:write"),
    ("delete", "/v1/incidents/x", "admin"),
    ("get", "/v1/incidents/x/similar", "incidents:read"),
]
OPEN = ["/healthz", "/readyz", "/metrics", "/openapi.json", "/docs"]


@pytest.fixture
def secured(dsdoctor_home, store_backend):
    store = TokenStore(dsdoctor_home)
    tokens = {scope: store.create(scope.replace(":", "-"), scope)[0]
              for scope in ("diagnose", "incidents:read", "incidents:write", "admin")}
    app = make_app(dsdoctor_home)
    yield app, tokens
    app.extensions["dsdoctor"]["services"].close()


def _call(client, method, url, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = {"json": EVIDENCE} if method in ("post", "patch") else {}
    return getattr(client, method)(url, headers=headers, **body)


@pytest.mark.parametrize(("method", "url", "scope"), ROUTES)
def test_each_route_needs_its_scope(secured, method, url, scope) -> None:
    app, tokens = secured
    client = app.test_client()
    missing = _call(client, method, url)
    assert_problem(missing, 401)
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    wrong = _call(client, method, url, "dsd_not-a-real-token")
    assert_problem(wrong, 401)
    assert 'error="invalid_token"' in wrong.headers["WWW-Authenticate"]
    for other, token in tokens.items():
        response = _call(client, method, url, token)
        if other in (scope, "admin"):
            assert response.status_code not in (401, 403), (other, response.get_json())
        else:
            body = assert_problem(response, 403)
            assert scope in body["detail"]
            assert 'error="insufficient_scope"' in response.headers["WWW-Authenticate"]


def test_every_v1_route_declares_how_it_is_authorized(secured) -> None:
    app, _ = secured
    served = set()
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/v1/"):
            view = app.view_functions[rule.endpoint]
            assert getattr(view, "required_scope", None) or getattr(view, "auth_exempt", False), rule.rule
            path = "/".join("x" if part.startswith("<") else part for part in rule.rule.split("/"))
            served |= {(method.lower(), path) for method in rule.methods - {"HEAD", "OPTIONS"}}
            if getattr(view, "required_scope", None):
                for method, url, scope in ROUTES:
                    if url == path and method.upper() in rule.methods:
                        assert view.required_scope == scope, (url, method)
    assert {(method, url) for method, url, _ in ROUTES} <= served


@pytest.mark.parametrize("url", OPEN)
def test_operational_routes_need_no_token(secured, url) -> None:
    app, _ = secured
    response = app.test_client().get(url)
    assert response.status_code in (200, 503)  # readyz may be 503 without rules, never 401


def test_malformed_authorization_header(secured) -> None:
    app, tokens = secured
    client = app.test_client()
    for header in ("Basic dXNlcjpwYXNz", "Bearer", "Bearer   ", tokens["diagnose"]):
        response = client.get("/v1/kb/causes", headers={"Authorization": header})
        assert_problem(response, 401)


def test_revoked_token_stops_working_at_once(secured, dsdoctor_home) -> None:
    app, tokens = secured
    client = app.test_client()
    headers = {"Authorization": f"Bearer {tokens['diagnose']}"}
    assert client.get("/v1/kb/causes", headers=headers).status_code == 200
    TokenStore(dsdoctor_home).revoke("diagnose")
    assert_problem(client.get("/v1/kb/causes", headers=headers), 401)


def test_open_without_tokens_on_loopback(dsdoctor_home, store_backend) -> None:
    app = make_app(dsdoctor_home)
    client = app.test_client()
    assert client.get("/v1/kb/causes").status_code == 200
    assert client.delete("/v1/incidents/none").status_code == 404  # allowed, just absent
    assert "open" in client.get("/readyz").get_json().get("auth", "open")
    TokenStore(dsdoctor_home).create("first", "diagnose")  # the first token closes the API
    assert_problem(client.get("/v1/kb/causes"), 401)
    app.extensions["dsdoctor"]["services"].close()


def test_closed_without_tokens_when_not_allowed_open(dsdoctor_home) -> None:
    app = make_app(dsdoctor_home, DSDOCTOR_OPEN_WITHOUT_TOKENS=False)
    assert_problem(app.test_client().get("/v1/kb/causes"), 401)
    app.extensions["dsdoctor"]["services"].close()


def test_refused_requests_are_counted_in_metrics(secured) -> None:
    app, _ = secured
    client = app.test_client()
    client.get("/v1/kb/causes")
    text = client.get("/metrics").get_data(as_text=True)
    assert 'method="GET",route="/v1/kb/causes",status="401"' in text


def test_views_that_authenticate_themselves_are_exempt(secured) -> None:
    from flask import Blueprint

    app, _ = secured
    bp = Blueprint("selfauth", __name__)

    def signed():
        return {"ok": True}

    signed.auth_exempt = True
    bp.add_url_rule("/v1/selfauth", view_func=signed)

    def forgot():
        return {"ok": True}

    bp.add_url_rule("/v1/forgot", view_func=forgot)
    app.register_blueprint(bp)
    client = app.test_client()
    assert client.get("/v1/selfauth").status_code == 200
    assert_problem(client.get("/v1/forgot"), 401)  # no declared scope: fails closed (admin)
