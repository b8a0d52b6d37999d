"""/v1/diagnoses: create (JSON, multipart, gzip), read, list, observations, incident (api/blueprints/diagnoses.py).

The rules layer is replaced by tests.test_api_support.fake_diagnose; the ranking is the real engine
on the small NaN knowledge base. tests/test_api_diagnoses_real.py runs the real pipeline.
"""

from __future__ import annotations

import gzip
import io
import json

from tests.test_api_support import EVIDENCE, NAN_LOG, api_app, assert_problem, client  # noqa: F401

HF = "hf_" + "Zq9" * 12


def _create(client, evidence=EVIDENCE, query=""):
    response = client.post(f"/v1/diagnoses{query}", json=evidence)
    assert response.status_code == 201, response.get_json()
    return response


def test_create_returns_the_diagnosis_and_where_it_is_stored(client) -> None:
    response = _create(client)
    body = response.get_json()
    assert response.headers["Location"] == f"/v1/diagnoses/{body['id']}"
    assert response.mimetype == "application/json"
    assert body["causes"] and body["causes"][0]["probability"] >= body["causes"][-1]["probability"]
    assert {s["id"] for s in body["symptoms"]} == {"s.loss_nan", "s.nan_subset_ranks"}
    assert body["first_error"]["rank"] == 3
    assert body["observation_history"] == []
    assert body["created_at"].endswith("Z")
    for experiment in body["next_experiments"]:
        assert experiment["outcomes"] and all(o["observe"].startswith(experiment["id"] + "=")
                                              for o in experiment["outcomes"])
    stored = client.get(response.headers["Location"])
    assert stored.status_code == 200 and stored.get_json() == body


def test_lang_and_top(client) -> None:
    body = _create(client, query="?lang=zh&top=2").get_json()
    assert len(body["causes"]) == 2
    assert body["lang"] == "zh" and "（中文）" in body["causes"][0]["title"]
    assert "首要候选" in body["summary"]["text"] or "最可能" in body["summary"]["text"]


def test_secrets_are_redacted_before_storing_and_echoing(client, api_app) -> None:
    evidence = {"description": f"token={HF}", "logs": [{"source": "rank3", "text": f"[rank3]: loss is nan {HF}\n"}],
                "config": {"train_batch_size": 8, "wandb_api_key": "k-123"}}
    response = _create(client, evidence)
    text = response.get_data(as_text=True)
    assert HF not in text and "k-123" not in text
    assert any("redacted" in w for w in response.get_json()["warnings"])
    db = (api_app.extensions["dsdoctor"]["services"].home / "diagnoses.db").read_bytes()
    assert HF.encode() not in db
    stored = api_app.extensions["dsdoctor"]["services"].diagnoses().get(response.get_json()["id"])
    assert stored.evidence["config"]["wandb_api_key"] == "[REDACTED:secret_value]"
    assert "[REDACTED:hf_token]" in stored.evidence["logs"][0]["text"]


def test_multipart_with_log_files(client) -> None:
    data = {
        "logs": [(io.BytesIO(b"[rank1]: step 9 loss is nan\n"), "rank1.log"),
                 (io.BytesIO(gzip.compress(b"[rank5]: only rank 5 has nan\n")), "rank5.log.gz")],
        "config": (io.BytesIO(b'{"train_batch_size": 16, "fp16": {"enabled": true}}'), "ds_config.json"),
        "metrics": (io.BytesIO(b"name,rank,step,value\nloss,1,9,nan\nloss,1,8,2.5\n"), "metrics.csv"),
        "environment": (io.BytesIO(b'{"world_size": 8, "versions": {"torch": "2.3.0"}}'), "env.json"),
        "description": "NaN after step 8",
        "observations": '{"s.fp16_overflow_repeated": false}',
    }
    response = client.post("/v1/diagnoses?top=3", data=data, content_type="multipart/form-data")
    assert response.status_code == 201, response.get_json()
    body = response.get_json()
    symptoms = {s["id"]: s for s in body["symptoms"]}
    assert symptoms["s.loss_nan"]["ranks"] == [1]
    assert symptoms["s.nan_subset_ranks"]["ranks"] == [5]
    assert body["observations"] == {"s.fp16_overflow_repeated": False}
    sources = {ref["source"] for s in body["symptoms"] for ref in s["line_refs"]}
    assert sources == {"rank1", "rank5"}


def test_multipart_metrics_as_json_lines(client, api_app) -> None:
    lines = b'{"name": "loss", "rank": 0, "step": 1, "value": 2.0}\n{"name": "loss", "rank": 0, "step": 2, "value": "nan"}\n'
    data = {"metrics": (io.BytesIO(lines), "metrics.jsonl"), "description": "loss is nan"}
    response = client.post("/v1/diagnoses", data=data, content_type="multipart/form-data")
    assert response.status_code == 201, response.get_json()
    stored = api_app.extensions["dsdoctor"]["services"].diagnoses().get(response.get_json()["id"])
    assert stored.evidence["metrics"][1]["value"] == "nan"


def test_gzip_json_body(client) -> None:
    response = client.post("/v1/diagnoses", data=gzip.compress(json.dumps(EVIDENCE).encode()),
                           content_type="application/json", headers={"Content-Encoding": "gzip"})
    assert response.status_code == 201
    assert response.get_json()["first_error"]["rank"] == 3


def test_invalid_utf8_is_decoded_with_replacement(client) -> None:
    raw = b'{"description": "caf\xe9 \xff", "logs": [{"source": "r3", "text": "[rank3]: loss is nan \xfe"}]}'
    response = client.post("/v1/diagnoses", data=raw, content_type="application/json")
    assert response.status_code == 201
    assert "\ufffd" in response.get_json()["symptoms"][0]["lines"][0]


def test_list_pages_newest_first(client) -> None:
    ids = [_create(client).get_json()["id"] for _ in range(5)]
    first = client.get("/v1/diagnoses?limit=2").get_json()
    assert [i["id"] for i in first["items"]] == ids[::-1][:2]
    second = client.get(f"/v1/diagnoses?limit=2&cursor={first['next_cursor']}").get_json()
    third = client.get(f"/v1/diagnoses?limit=2&cursor={second['next_cursor']}").get_json()
    assert [i["id"] for i in second["items"] + third["items"]] == ids[::-1][2:]
    assert third["next_cursor"] is None
    assert client.get("/v1/diagnoses?since=2999-01-01").get_json() == {"items": [], "next_cursor": None}
    assert len(client.get("/v1/diagnoses?since=2000-01-01T00:00:00Z").get_json()["items"]) == 5


def test_observations_rerank_and_keep_history(client) -> None:
    created = _create(client).get_json()
    experiment = next(x for x in created["next_experiments"] if x["id"] == "x.swap_suspect_gpu")
    follows = next(o for o in experiment["outcomes"] if o["id"] == "issue_follows_gpu")
    response = client.post(f"/v1/diagnoses/{created['id']}/observations",
                           json={"observations": {follows["observe"]: True}})
    assert response.status_code == 200, response.get_json()
    updated = response.get_json()
    assert updated["id"] == created["id"] and updated["created_at"] == created["created_at"]
    assert updated["causes"][0]["id"] == "hardware.silent_data_corruption"
    assert updated["observations"] == {follows["observe"]: True}
    assert "x.swap_suspect_gpu" not in {x["id"] for x in updated["next_experiments"]}
    [entry] = updated["observation_history"]
    assert entry["top_cause_before"] == created["causes"][0]["id"]
    assert entry["top_cause_after"] == "hardware.silent_data_corruption"

    more = client.post(f"/v1/diagnoses/{created['id']}/observations",
                       json={"logs": [{"source": "rank0", "text": "[rank0]: loss is nan on all ranks\n"}],
                             "description": "then every rank", "observations": {"s.scope_global": True}})
    assert more.status_code == 200
    again = more.get_json()
    assert len(again["observation_history"]) == 2
    assert again["observation_history"][1]["logs_added"] == ["rank0"]
    assert again["observations"] == {follows["observe"]: True, "s.scope_global": True}
    assert "s.nan_all_ranks" in {s["id"] for s in again["symptoms"]}
    assert client.get(f"/v1/diagnoses/{created['id']}").get_json() == again


def test_unknown_observation_keys_are_warnings(client) -> None:
    created = _create(client).get_json()
    body = client.post(f"/v1/diagnoses/{created['id']}/observations",
                       json={"observations": {"x.swap_suspect_gpu=melted": True, "s.bogus": True}}).get_json()
    assert any("melted" in w for w in body["warnings"]) and any("s.bogus" in w for w in body["warnings"])


def test_observations_need_something_new(client) -> None:
    created = _create(client).get_json()
    url = f"/v1/diagnoses/{created['id']}/observations"
    assert_problem(client.post(url, json={}), 422, field="observations")
    assert_problem(client.post(url, json={"observations": {"s.loss_nan": 1}}), 422)
    assert_problem(client.post(url, json={"observations": {"s.loss_nan": True}, "color": 1}), 422, field="color")
    assert_problem(client.post(url + "?lang=de", json={"observations": {"s.loss_nan": True}}), 422, field="lang")


def test_observations_by_multipart(client) -> None:
    created = _create(client).get_json()
    data = {"logs": [(io.BytesIO(b"[rank0]: loss is nan on all ranks\n"), "rank0.log")],
            "observations": '{"s.scope_global": true}'}
    response = client.post(f"/v1/diagnoses/{created['id']}/observations", data=data,
                           content_type="multipart/form-data")
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["observation_history"][0]["logs_added"] == ["rank0"]


def test_incident_from_a_diagnosis(client) -> None:
    created = _create(client).get_json()
    response = client.post(f"/v1/diagnoses/{created['id']}/incident")
    assert response.status_code == 201, response.get_json()
    incident = response.get_json()
    assert response.headers["Location"] == f"/v1/incidents/{incident['id']}"
    top = created["causes"][0]
    assert incident["root_cause"] == top["id"]
    assert incident["diagnosis_id"] == created["id"]
    assert incident["symptoms"] == sorted(s["id"] for s in created["symptoms"])
    assert top["fixes"][0]["title"] in incident["fix"]
    assert created["first_error"]["line"] in incident["phenomenon"]
    assert "rank 3" in incident["scope"]
    assert client.get(f"/v1/incidents/{incident['id']}").get_json()["diagnosis_id"] == created["id"]


def test_incident_overrides(client) -> None:
    created = _create(client).get_json()
    response = client.post(f"/v1/diagnoses/{created['id']}/incident",
                           json={"root_cause": "hardware.silent_data_corruption", "status": "resolved",
                                 "fix": "replaced GPU 3", "tags": ["gpu"]})
    assert response.status_code == 201, response.get_json()
    incident = response.get_json()
    assert incident["root_cause"] == "hardware.silent_data_corruption" and incident["status"] == "resolved"
    assert incident["fix"] == "replaced GPU 3" and incident["tags"] == ["gpu"]
    bad = client.post(f"/v1/diagnoses/{created['id']}/incident", json={"root_cause": "hardware.nope"})
    assert_problem(bad, 422, field="root_cause")
    assert_problem(client.post(f"/v1/diagnoses/{created['id']}/incident", json={"colour": "x"}), 422, field="colour")


def test_resolved_incidents_become_site_priors(client) -> None:
    created = _create(client).get_json()
    client.post(f"/v1/diagnoses/{created['id']}/incident",
                json={"root_cause": "hardware.silent_data_corruption", "status": "resolved", "fix": "swap"})
    import dsdoctor.api.services as services_module

    services_module.SITE_COUNTS_TTL_S, saved = 0.0, services_module.SITE_COUNTS_TTL_S
    try:
        later = _create(client).get_json()
    finally:
        services_module.SITE_COUNTS_TTL_S = saved
    sdc = next(c for c in later["causes"] if c["id"] == "hardware.silent_data_corruption")
    assert sdc["site_incidents"] == 1
    assert any(item["id"] for item in later["similar_incidents"])


def test_stats_reach_metrics(client) -> None:
    _create(client)
    text = client.get("/metrics").get_data(as_text=True)
    assert 'dsdoctor_diagnoses_total{top_cause="data.corrupt_sample"}' in text
    assert "dsdoctor_log_bytes_processed_total" in text
