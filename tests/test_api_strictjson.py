"""Hostile JSON (api/strictjson.py): lone surrogates, huge integers and NaN / Infinity are a 400/422
problem naming the field on every JSON write path, never a 500 and never the text "nan" (issue 14)."""

from __future__ import annotations

import pytest

from tests.test_api_support import EVIDENCE, api_app, assert_problem, client  # noqa: F401

BIG = "9" * 5000
INCIDENT = '"phenomenon": "x", "root_cause": "hardware.silent_data_corruption"'
H = {"Content-Type": "application/json"}


def _diagnosis(client) -> str:
    return client.post("/v1/diagnoses", json=EVIDENCE).get_json()["id"]


CASES = {
    "description": ("/v1/diagnoses", '{"description": "a\\ud800b"}', "description"),
    "log source": ("/v1/diagnoses", '{"logs": [{"source": "\\udc00", "text": "x"}]}', "logs.0.source"),
    "environment key": ("/v1/diagnoses", '{"description": "x", "environment": {"\\ud800": "1"}}', "environment.<key>"),
    "huge int in config": ("/v1/diagnoses", '{"description": "x", "config": {"n": ' + BIG + '}}', "config.n"),
    "NaN description": ("/v1/diagnoses", '{"description": NaN}', "description"),
    "Infinity log text": ("/v1/diagnoses", '{"logs": [{"source": "a", "text": Infinity}]}', "logs.0.text"),
    "incident title": ("/v1/incidents", '{"title": "\\ud800", ' + INCIDENT + '}', "title"),
    "incident titled NaN": ("/v1/incidents", '{"title": NaN, ' + INCIDENT + '}', "title"),
    "incident huge int": ("/v1/incidents", '{"title": "t", "job": {"world_size": ' + BIG + '}, ' + INCIDENT + '}',
                          "job.world_size"),
    "chat-ops text": ("/v1/chatops/query", '{"text": "diagnose \\ud800"}', "text"),
    "chat-ops huge int": ("/v1/chatops/query", '{"text": "help", "user": ' + BIG + '}', "user"),
    "observation key": ("/v1/diagnoses/{id}/observations", '{"observations": {"x.\\ud800=a": true}}',
                        "observations.<key>"),
    "incident overrides": ("/v1/diagnoses/{id}/incident", '{"fix": "\\udfff"}', "fix"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_issue14_hostile_json_names_the_field(client, name: str) -> None:
    url, body, field = CASES[name]
    if "{id}" in url:
        url = url.replace("{id}", _diagnosis(client))
    problem = assert_problem(client.post(url, data=body, headers=H), 422, field=field)
    assert "\ud800" not in str(problem)


def test_issue14_patch_with_a_surrogate_is_refused(client) -> None:
    created = client.post("/v1/incidents", data='{"title": "t", ' + INCIDENT + '}', headers=H).get_json()
    assert_problem(client.patch(f"/v1/incidents/{created['id']}", data='{"scope": "\\ud800"}', headers=H), 422,
                   field="scope")


def test_issue14_nan_stays_allowed_in_metric_values(client) -> None:
    body = '{"description": "x", "metrics": [{"name": "loss", "step": 1, "value": NaN}]}'
    assert client.post("/v1/diagnoses", data=body, headers=H).status_code == 201


def test_issue14_surrogate_pairs_are_ordinary_text(client) -> None:
    body = '{"title": "GPU \\ud83d\\udd25 on fire", ' + INCIDENT + '}'
    response = client.post("/v1/incidents", data=body, headers=H)
    assert response.status_code == 201 and response.get_json()["title"] == "GPU \U0001f525 on fire"
