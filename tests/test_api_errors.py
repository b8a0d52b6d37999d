"""Every error path of the API answers with one RFC 9457 problem shape (api/errors.py)."""

from __future__ import annotations

import gzip
import io
import json

import pytest

from tests.test_api_support import EVIDENCE, api_app, assert_problem, client, make_app  # noqa: F401  (fixtures)

JSON = "application/json"

# (method, url, request kwargs, status, field named in errors or None)
CASES = [
    ("get", "/no/such/route", {}, 404, None),
    ("get", "/v1/diagnoses/does-not-exist", {}, 404, None),
    ("post", "/v1/diagnoses/does-not-exist/observations", {"json": {"observations": {"s.loss_nan": True}}}, 404, None),
    ("post", "/v1/diagnoses/does-not-exist/incident", {}, 404, None),
    ("get", "/v1/kb/causes/compute.no_such_cause", {}, 404, None),
    ("get", "/v1/kb/graph?around=s.no_such_symptom", {}, 404, None),
    ("get", "/v1/incidents/INC-NOPE", {}, 404, None),
    ("patch", "/v1/incidents/INC-NOPE", {"json": {"title": "x"}}, 404, None),
    ("delete", "/v1/incidents/INC-NOPE", {}, 404, None),
    ("get", "/v1/incidents/INC-NOPE/similar", {}, 404, None),
    ("delete", "/v1/diagnoses", {}, 405, None),
    ("put", "/v1/kb/causes", {}, 405, None),
    ("post", "/healthz", {}, 405, None),
    ("post", "/v1/diagnoses", {"data": "{not json", "content_type": JSON}, 400, None),
    ("post", "/v1/diagnoses", {"data": "", "content_type": JSON}, 400, None),
    ("post", "/v1/diagnoses", {"data": "[" * 200 + "]" * 200, "content_type": JSON}, 400, None),
    ("post", "/v1/diagnoses", {"data": b"not gzip", "content_type": JSON, "headers": {"Content-Encoding": "gzip"}},
     400, None),
    ("post", "/v1/diagnoses", {"data": gzip.compress(b'{"description": "x"}')[:-6], "content_type": JSON,
                               "headers": {"Content-Encoding": "gzip"}}, 400, None),
    ("post", "/v1/diagnoses", {"data": "loss is nan", "content_type": "text/plain"}, 415, None),
    ("post", "/v1/diagnoses", {"data": {"description": "x"}, "content_type": "application/x-www-form-urlencoded"},
     415, None),
    ("post", "/v1/diagnoses", {"data": b"{}", "content_type": JSON, "headers": {"Content-Encoding": "br"}}, 415, None),
    ("post", "/v1/diagnoses", {"json": [1, 2]}, 422, ""),
    ("post", "/v1/diagnoses", {"json": {}}, 422, "description"),
    ("post", "/v1/diagnoses", {"json": {"config": {"train_batch_size": 8}}}, 422, "description"),
    ("post", "/v1/diagnoses", {"json": {"description": 5}}, 422, "description"),
    ("post", "/v1/diagnoses", {"json": {"logs": "text"}}, 422, "logs"),
    ("post", "/v1/diagnoses", {"json": {"logs": [{"source": "r0"}]}}, 422, "logs.0.text"),
    ("post", "/v1/diagnoses", {"json": {"description": "x", "colour": "red"}}, 422, "colour"),
    ("post", "/v1/diagnoses", {"json": {"description": "x", "observations": {"s.loss_nan": "yes"}}}, 422,
     "observations.s.loss_nan.value"),
    ("post", "/v1/diagnoses", {"json": {"description": "x", "metrics": [{"name": "loss", "value": "high"}]}}, 422,
     "metrics.0.value"),
    ("post", "/v1/diagnoses", {"json": {"description": "x", "environment": {"world_size": "8"}}}, 422,
     "environment.world_size"),
    ("post", "/v1/diagnoses", {"json": {"description": "x", "environment": {"nodes": True}}}, 422,
     "environment.nodes"),
    ("post", "/v1/diagnoses", {"json": {"description": "x", "environment": {"nodes": 0}}}, 422,
     "environment.nodes"),
    ("post", "/v1/diagnoses", {"json": {"description": "x", "environment": {"nodes": "n" * 300}}}, 422,
     "environment.nodes"),
    ("post", "/v1/diagnoses?lang=fr", {"json": EVIDENCE}, 422, "lang"),
    ("post", "/v1/diagnoses?top=0", {"json": EVIDENCE}, 422, "top"),
    ("post", "/v1/diagnoses?top=many", {"json": EVIDENCE}, 422, "top"),
    ("post", "/v1/diagnoses", {"data": {"unknown_part": "x"}, "content_type": "multipart/form-data"}, 422,
     "unknown_part"),
    ("post", "/v1/diagnoses", {"data": {"config": (io.BytesIO(b"{bad"), "ds_config.json"), "description": "x"},
                               "content_type": "multipart/form-data"}, 400, None),
    ("post", "/v1/diagnoses", {"data": {"config": (io.BytesIO(b"[1]"), "ds_config.json"), "description": "x"},
                               "content_type": "multipart/form-data"}, 422, "config"),
    ("post", "/v1/diagnoses", {"data": {"metrics": (io.BytesIO(b"a,b\n1,2\n"), "m.csv"), "description": "x"},
                               "content_type": "multipart/form-data"}, 422, "metrics"),
    ("get", "/v1/diagnoses?limit=0", {}, 422, "limit"),
    ("get", "/v1/diagnoses?limit=abc", {}, 422, "limit"),
    ("get", "/v1/diagnoses?cursor=not-a-cursor", {}, 422, "cursor"),
    ("get", "/v1/diagnoses?since=yesterday", {}, 422, "since"),
    ("get", "/v1/kb/causes?domain=weather", {}, 422, "domain"),
    ("get", "/v1/kb/graph?format=svg", {}, 422, "format"),
    ("get", "/v1/kb/graph?depth=99", {}, 422, "depth"),
    ("get", "/v1/incidents?severity=apocalyptic", {}, 422, "severity"),
    ("get", "/v1/incidents?limit=1000", {}, 422, "limit"),
    ("get", "/v1/incidents?cursor=garbage", {}, 422, "cursor"),
    ("get", "/v1/incidents?since=2024-13-45", {}, 422, "since"),
    ("post", "/v1/incidents", {"json": {"title": "t"}}, 422, "phenomenon"),
    ("post", "/v1/incidents", {"json": {"title": "t", "phenomenon": "p", "root_cause": "compute.nope"}}, 422,
     "root_cause"),
    ("post", "/v1/incidents", {"json": "a string"}, 422, ""),
    ("post", "/v1/incidents", {"data": "{", "content_type": JSON}, 400, None),
    ("post", "/v1/incidents", {"data": "x", "content_type": "text/plain"}, 415, None),
]


@pytest.mark.parametrize(("method", "url", "kwargs", "status", "field"), CASES,
                         ids=[f"{c[0]} {c[1][:50]} {c[3]}" for c in CASES])
def test_error_shape(client, method, url, kwargs, status, field) -> None:
    response = getattr(client, method)(url, **kwargs)
    body = assert_problem(response, status, field=field)
    assert body["instance"] == url.split("?")[0]
    if status == 422:
        assert body["type"] == "urn:dsdoctor:problem:validation"
        assert body["errors"] and all(e["message"] for e in body["errors"])


def test_405_names_the_allowed_methods(client) -> None:
    response = client.delete("/v1/diagnoses")
    assert_problem(response, 405)
    allowed = {m.strip() for m in response.headers["Allow"].split(",")}
    assert {"GET", "POST"} <= allowed
    assert "GET" in response.get_json()["detail"]


def test_validation_error_says_what_is_allowed(client) -> None:
    body = client.post("/v1/diagnoses", json={"description": "x", "colour": "red"}).get_json()
    message = next(e["message"] for e in body["errors"] if e["field"] == "colour")
    assert "description" in message and "logs" in message  # the allowed fields are listed
    body = client.post("/v1/diagnoses?lang=fr", json=EVIDENCE).get_json()
    assert "en, zh" in body["errors"][0]["message"]
    assert body["errors"][0]["location"] == "query"


def test_unexpected_exception_is_a_500_problem_without_traceback(dsdoctor_home) -> None:
    def broken(*_args, **_kwargs):
        raise RuntimeError("secret internal state")

    app = make_app(dsdoctor_home, DSDOCTOR_DIAGNOSE=broken)
    app.config["TESTING"] = False  # as in production: the handler, not the test client, sees it
    response = app.test_client().post("/v1/diagnoses", json=EVIDENCE)
    body = assert_problem(response, 500)
    assert "secret internal state" not in response.get_data(as_text=True)
    assert body["reference"] in body["detail"]
    app.extensions["dsdoctor"]["services"].close()


def test_bad_evidence_from_the_engine_is_a_422(dsdoctor_home) -> None:
    from dsdoctor.kb.errors import DsdoctorError

    def refuses(*_args, **_kwargs):
        raise DsdoctorError("the config is not a DeepSpeed config")

    app = make_app(dsdoctor_home, DSDOCTOR_DIAGNOSE=refuses)
    body = assert_problem(app.test_client().post("/v1/diagnoses", json=EVIDENCE), 422)
    assert body["detail"] == "the config is not a DeepSpeed config"
    app.extensions["dsdoctor"]["services"].close()


def test_broken_knowledge_base_is_a_503(dsdoctor_home) -> None:
    from dsdoctor.kb.errors import KnowledgeError, Problem

    def broken(*_args, **_kwargs):
        raise KnowledgeError([Problem("kb/data/causes/x.yaml", 3, "unknown mechanism m.x")])

    app = make_app(dsdoctor_home, DSDOCTOR_DIAGNOSE=broken)
    body = assert_problem(app.test_client().post("/v1/diagnoses", json=EVIDENCE), 503)
    assert body["problems"] == ["kb/data/causes/x.yaml:3: unknown mechanism m.x"]
    app.extensions["dsdoctor"]["services"].close()


def test_problem_bodies_are_json_documents(client) -> None:
    raw = client.get("/nowhere").get_data(as_text=True)
    assert json.loads(raw)["status"] == 404
