"""The `job` object of the evidence: validated, stored with the diagnosis, listed and filtered,
shown on the pages and echoed by chat-ops (api/schemas.py, api/store.py, api/chatops.py)."""

from __future__ import annotations

import sqlite3

import pytest

from dsdoctor.api.chatops import ChatContext, handle
from dsdoctor.kb.storage.diagnoses import DiagnosisStore
from tests.kbfactory import nan_kb
from tests.test_api_support import EVIDENCE, api_app, assert_problem, client  # noqa: F401

JOB = {"id": "48213", "name": "llama-sft", "cluster": "a100-east", "run_url": "https://runs.example/48213",
       "labels": {"team": "pretrain"}}


def _post(client, job):
    return client.post("/v1/diagnoses", json={**EVIDENCE, "job": job})


@pytest.mark.usefixtures("store_backend")
def test_the_job_is_stored_returned_and_listed(client) -> None:
    created = _post(client, JOB)
    assert created.status_code == 201 and created.get_json()["job"] == JOB
    did = created.get_json()["id"]
    assert client.get(f"/v1/diagnoses/{did}").get_json()["job"] == JOB
    observed = client.post(f"/v1/diagnoses/{did}/observations", json={"observations": {"s.loss_nan": True}})
    assert observed.get_json()["job"] == JOB  # a re-run keeps the job of its evidence
    assert client.get("/v1/diagnoses").get_json()["items"][0]["job"] == JOB


@pytest.mark.usefixtures("store_backend")
def test_listing_filters_by_job_id_and_cluster(client) -> None:
    ids = {}
    for job_id, cluster in (("1", "east"), ("2", "east"), ("3", "west")):
        ids[job_id] = _post(client, {"id": job_id, "cluster": cluster}).get_json()["id"]
    client.post("/v1/diagnoses", json=EVIDENCE)  # no job at all

    def listed(**query) -> list[str]:
        return [i["id"] for i in client.get("/v1/diagnoses", query_string=query).get_json()["items"]]

    assert listed(cluster="east") == [ids["2"], ids["1"]]
    assert listed(job_id="3") == [ids["3"]] and listed(job_id="3", cluster="east") == []
    assert len(listed()) == 4


@pytest.mark.parametrize(("job", "field"), [
    ({"run_url": "javascript:alert(1)"}, "job.run_url"),
    ({"id": ""}, "job.id"),
    ({"owner": "me"}, "job.owner"),
    ({"labels": {"team": 3}}, "job.labels.team.value"),
    ("48213", "job._schema"),
])
def test_a_bad_job_is_a_422_naming_the_field(client, job, field) -> None:
    body = assert_problem(_post(client, job), 422)
    assert any(e["field"].startswith(field.rsplit(".", 1)[0]) for e in body["errors"]), body


def test_a_version_1_database_gains_the_job_columns(tmp_path) -> None:
    path = tmp_path / "diagnoses.db"
    with sqlite3.connect(path) as conn:  # the version-1 table, as an older release created it
        conn.executescript("CREATE TABLE diagnoses (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, "
                           "created_at TEXT NOT NULL, updated_at TEXT NOT NULL, top_cause TEXT, top_probability REAL, "
                           "verdict TEXT, summary TEXT NOT NULL DEFAULT '', lang TEXT NOT NULL DEFAULT 'en', "
                           "top_n INTEGER NOT NULL DEFAULT 5, version INTEGER NOT NULL DEFAULT 1, "
                           "evidence BLOB NOT NULL, diagnosis TEXT NOT NULL, history TEXT NOT NULL DEFAULT '[]');"
                           "INSERT INTO diagnoses (id, created_at, updated_at, evidence, diagnosis) "
                           "VALUES ('old', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', x'00', '{}');")
    conn.close()
    DiagnosisStore.initialise(tmp_path)
    DiagnosisStore.initialise(tmp_path)  # twice: a second worker starting
    store = DiagnosisStore(tmp_path)
    try:
        items, _ = store.list()
        assert [(i["id"], i["job"]) for i in items] == [("old", None)]
        assert store.list(cluster="east")[0] == []
    finally:
        store.close()


def test_chat_answers_echo_the_job() -> None:
    d = {"id": "d1", "summary": {"text": "Most likely x"}, "causes": [], "job": JOB}
    ctx = ChatContext(kb=nan_kb(), diagnose=None, get_diagnosis=lambda did: d, observe=lambda did, obs, lang: d,
                      search_incidents=None, get_incident=None, base_url=None)
    answer = handle("observe d1 s.loss_nan", ctx)
    assert "Job: `48213 llama-sft @ a100-east  https://runs.example/48213  team=pretrain`" in answer.markdown


def test_the_pages_show_the_job(client) -> None:
    did = _post(client, JOB).get_json()["id"]
    page = client.get(f"/diagnoses/{did}").get_data(as_text=True)
    assert "<code>48213</code> llama-sft" in page and '<a href="https://runs.example/48213"' in page
    assert "<code>team=pretrain</code>" in page
    listing = client.get("/diagnoses").get_data(as_text=True)
    assert "48213 llama-sft @ a100-east" in listing
