"""The OpenAPI document is complete: every operation has an operationId, an example and each error
response it can give declared; the statuses the server really answers are among those declared
(api/openapi_doc.py)."""

from __future__ import annotations

import re

import pytest

from dsdoctor.kb.storage.tokens import TokenStore
from tests.test_api_support import make_app

METHODS = ("get", "post", "put", "patch", "delete")


@pytest.fixture
def secured(dsdoctor_home):
    app = make_app(dsdoctor_home)
    store = TokenStore(dsdoctor_home)
    tokens = {scope: store.create(scope.replace(":", "-"), scope)[0]
              for scope in ("admin", "diagnose", "incidents:read")}
    yield app, app.test_client().get("/openapi.json").get_json(), tokens
    app.extensions["dsdoctor"]["services"].close()


def _operations(spec):
    for path, item in spec["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, method, item[method], item.get("parameters", [])


def _examples(operation, path_parameters) -> list:
    found = [p["example"] for p in [*path_parameters, *operation.get("parameters", [])] if "example" in p]
    bodies = [operation.get("requestBody", {}), *operation["responses"].values()]
    found += [media["example"] for body in bodies for media in body.get("content", {}).values() if "example" in media]
    return found


def test_every_operation_has_a_unique_operation_id_and_an_example(secured) -> None:
    _, spec, _ = secured
    ids = [op.get("operationId") for _, _, op, _ in _operations(spec)]
    assert len(ids) == 21 and all(ids) and len(set(ids)) == len(ids), ids
    assert all(re.fullmatch(r"[a-z]+(?:[A-Z][a-z]*)*", i) for i in ids), ids
    for path, method, operation, parameters in _operations(spec):
        assert _examples(operation, parameters), f"{method.upper()} {path} has no example"
        if "requestBody" in operation:
            content = operation["requestBody"]["content"]
            assert any("example" in media for media in content.values()), f"{method.upper()} {path} request"


def test_error_responses_are_declared_per_operation_as_problems(secured) -> None:
    _, spec, _ = secured
    components = spec["components"]["responses"]
    for path, method, operation, _ in _operations(spec):
        declared = set(operation["responses"])
        name = f"{method.upper()} {path}"
        if operation.get("security"):
            assert {"401", "403"} <= declared, name
        if "{" in path:
            assert "404" in declared, name
        if "requestBody" in operation:
            assert {"413", "415", "422"} <= declared, name
        for status, response in operation["responses"].items():
            if status.startswith(("4", "5")) or status == "default":
                ref = response["$ref"].rsplit("/", 1)[-1]
                assert "application/problem+json" in components[ref]["content"], (name, status)
    observations = spec["paths"]["/v1/diagnoses/{diagnosis_id}/observations"]["post"]["responses"]
    assert {"401", "403", "404", "409", "413", "415", "422"} <= set(observations)
    assert "409" in spec["paths"]["/v1/incidents"]["post"]["responses"]


def _url(path: str) -> str:
    return re.sub(r"\{\w+\}", "no-such-id", path)


def test_the_statuses_the_server_answers_are_declared(secured) -> None:
    """Each operation without a token, with a token lacking its scope, with a body of the wrong
    media type, and with an unknown id: every error status it answers is in its responses."""
    app, spec, tokens = secured
    client = app.test_client()
    for path, method, operation, _ in _operations(spec):
        if path == "/v1/chatops/slack":
            continue  # signed by Slack, not by bearer tokens (tests/test_chatops_api.py)
        declared = set(operation["responses"])
        scope = operation.get("x-required-scope")
        attempts = [{}]
        if scope:
            weak = tokens["incidents:read"] if scope != "incidents:read" else tokens["diagnose"]
            attempts.append({"headers": {"Authorization": f"Bearer {weak}"}})
        admin = {"Authorization": f"Bearer {tokens['admin']}"}
        if "requestBody" in operation:
            attempts.append({"headers": {**admin, "Content-Type": "text/plain"}, "data": "hello"})
            attempts.append({"headers": admin, "json": {"unknown_field": 1}})
        attempts.append({"headers": admin, **({"json": {"text": "help"}} if "requestBody" in operation else {})})
        seen = set()
        for kwargs in attempts:
            status = getattr(client, method)(_url(path), **kwargs).status_code
            assert status < 500, (method, path, kwargs, status)
            if status >= 400:
                seen.add(str(status))
        assert seen <= declared, f"{method.upper()} {path} answered {sorted(seen - declared)}, undeclared"
