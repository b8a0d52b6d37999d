"""Issue 14: every secret shape through every write path, and none of them in the databases, the search
index, the responses or the logs afterwards (the store and the diagnosis service are the choke points)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import sqlite3
import zlib
from pathlib import Path

import pytest

from dsdoctor.api.cli import main
from tests.test_api_support import NAN_LOG, make_app
from tests.test_chatops_api import SECRET as SLACK_SECRET
from tests.test_chatops_api import sign, slack_body

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#: the part of each secret that must never be seen again
SECRETS = {
    "password": ("db password=hunter2x host=x", "hunter2x"),
    "hf": ("huggingface token hf_aB3aB3aB3aB3aB3aB3aB3aB3", "hf_aB3aB3aB3aB3aB3aB3aB3aB3"),
    "github": ("ghp_x1Y2x1Y2x1Y2x1Y2x1Y2x1Y2x1Y2x1Y2x1Y2", "x1Y2x1Y2x1Y2x1Y2x1Y2x1Y2"),
    "slack": ("xoxp-1234567890-0987654321-abcdefabcd", "0987654321-abcdefabcd"),
    "aws_key_id": ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    "aws_secret": (f"secret {AWS_SECRET} used", AWS_SECRET),
    "basic": ("Authorization: Basic dXNlcjpodW50ZXIyeHk=", "dXNlcjpodW50ZXIyeHk"),
    "bearer": ("Bearer abcdefghijklmnopqrst", "abcdefghijklmnopqrst"),
    "openai": ("sk-proj-AbCdEfGhIjKlMnOpQrSt_uvwxyz0123", "AbCdEfGhIjKlMnOpQrSt_uvwxyz0123"),
    "gitlab": ("glpat-AbCdEfGhIjKlMnOpQrSt", "AbCdEfGhIjKlMnOpQrSt"),
    "google": ("AIzaSyA1234567890abcdefghijklmnopqrstuv", "SyA1234567890abcdefghij"),
    "url": ("redis://admin:pa55wordZ@10.0.0.1:6379/0", "pa55wordZ"),
    "percent": ("q=password%3Dhunter3y", "hunter3y"),
    "pem": ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAsecretbody\n", "MIIEowIBAAKCAQEAsecretbody"),
}
TEXT = "\n".join(text for text, _ in SECRETS.values())
NEEDLES = [needle for _, needle in SECRETS.values()]
INCIDENT = {"title": "Loss NaN on rank 3", "phenomenon": TEXT, "root_cause": "hardware.silent_data_corruption",
            "fix": TEXT, "scope": "rank 3", "tags": ["gpu"]}


def _found(blob: str) -> list[str]:
    return [needle for needle in NEEDLES if needle in blob]


def _database_text(home: Path) -> str:
    """Every value of every table of every SQLite file, zlib blobs inflated, plus every other file's bytes."""
    parts: list[str] = []
    for path in sorted(home.rglob("*")):
        if not path.is_file():
            continue
        if path.suffix == ".db":
            conn = sqlite3.connect(path)
            try:
                for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
                    for row in conn.execute(f'SELECT * FROM "{table}"'):
                        for value in row:
                            if isinstance(value, bytes):
                                with contextlib.suppress(zlib.error):
                                    value = zlib.decompress(value)
                                value = value.decode("utf-8", "replace")
                            parts.append(str(value))
            finally:
                conn.close()
        else:  # the search index, WAL files, caches
            parts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(parts)


def _csrf(client, url: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', client.get(url).get_data(as_text=True)).group(1)


def test_issue14_no_secret_survives_any_write_path(dsdoctor_home, monkeypatch, capsys, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    app = make_app(dsdoctor_home, DSDOCTOR_SLACK_SIGNING_SECRET=SLACK_SECRET)
    client = app.test_client()
    responses: list[str] = []

    def keep(response, *codes):
        assert response.status_code in codes, response.get_data(as_text=True)[:500]
        responses.append(response.get_data(as_text=True))
        return response

    evidence = {"description": TEXT, "logs": [{"source": "rank3", "text": NAN_LOG + TEXT}],
                "config": {"hf_token": "hf_aB3aB3aB3aB3aB3aB3aB3aB3", "note": TEXT},
                "environment": {"versions": {"torch": "2.3"}}, "observations": {}}
    # REST: diagnoses (JSON and multipart), observations, incident from a diagnosis, incidents, PATCH
    did = keep(client.post("/v1/diagnoses", json=evidence), 201).get_json()["id"]
    keep(client.post("/v1/diagnoses", data={"logs": (io.BytesIO(TEXT.encode()), "rank0.log"),
                                            "description": TEXT}, content_type="multipart/form-data"), 201)
    keep(client.post(f"/v1/diagnoses/{did}/observations", json={"description": TEXT, "observations": {}}), 200)
    from_diagnosis = keep(client.post(f"/v1/diagnoses/{did}/incident", json={"fix": TEXT, "root_cause_detail": TEXT}),
                          201).get_json()
    created = keep(client.post("/v1/incidents", json=INCIDENT), 201).get_json()
    keep(client.patch(f"/v1/incidents/{created['id']}", json={"prevention": TEXT, "regression": TEXT}), 200)
    # web pages: new diagnosis, edit an incident, record a diagnosis as incident
    keep(client.post("/diagnoses/new", data={"csrf_token": _csrf(client, "/diagnoses/new"), "logs_text": TEXT,
                                             "description": TEXT}), 303)
    page = client.get(f"/incidents/{from_diagnosis['id']}").get_data(as_text=True)
    version = re.search(r'name="version" value="([^"]+)"', page).group(1)
    keep(client.post(f"/incidents/{from_diagnosis['id']}/edit", data={
        "csrf_token": _csrf(client, f"/incidents/{from_diagnosis['id']}"), "version": version, "title": "edited",
        "phenomenon": TEXT, "root_cause": from_diagnosis["root_cause"], "fix": TEXT, "severity": "high",
        "status": "open", "tags": ""}), 303)
    keep(client.post(f"/diagnoses/{did}/incident", data={"csrf_token": _csrf(client, f"/diagnoses/{did}"),
                                                         "title": "from the page password=hunter2x"}), 303)
    # chat-ops: generic bot and Slack
    keep(client.post("/v1/chatops/query", json={"text": "diagnose " + NAN_LOG + TEXT}), 200)
    body = slack_body("diagnose " + NAN_LOG + TEXT)
    keep(client.post("/v1/chatops/slack", data=body, headers=sign(body)), 200)
    # CLI import
    lines = dsdoctor_home / "import.jsonl"
    lines.write_text(json.dumps({**INCIDENT, "id": "INC-IMPORTED-1"}) + "\n", encoding="utf-8")
    monkeypatch.setenv("DSDOCTOR_HOME", str(dsdoctor_home))
    assert main(["incidents", "import", str(lines)]) == 0
    lines.unlink()

    # read everything back: API pages, search, similar incidents, chat answers
    for incident_id in (created["id"], from_diagnosis["id"], "INC-IMPORTED-1"):
        keep(client.get(f"/v1/incidents/{incident_id}"), 200)
        keep(client.get(f"/incidents/{incident_id}"), 200)
    keep(client.get("/v1/incidents?q=rank"), 200)
    keep(client.get("/v1/incidents?q=password"), 200)
    keep(client.get(f"/v1/diagnoses/{did}"), 200)
    keep(client.post("/v1/chatops/query", json={"text": f"incident {created['id']}"}), 200)
    keep(client.post("/v1/chatops/query", json={"text": "search password"}), 200)
    app.extensions["dsdoctor"]["services"].close()

    assert _found("\n".join(responses)) == []
    assert _found(_database_text(dsdoctor_home)) == []
    logs = capsys.readouterr()
    assert _found(logs.out + logs.err + caplog.text) == []


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_issue14_problem_details_never_echo_a_secret(dsdoctor_home, name: str) -> None:
    text, needle = SECRETS[name]
    client = make_app(dsdoctor_home).test_client()
    for response in (client.post("/v1/incidents", json={"title": "t", "phenomenon": "p", "root_cause": text}),
                     client.post("/v1/incidents", json={"title": "t", "phenomenon": "p", "root_cause": "x.y",
                                                        "occurred_at": text}),
                     client.post("/v1/diagnoses", json={"description": "x", "logs": [{"source": "a", "text": 5}],
                                                        "environment": {"world_size": text}}),
                     client.get(f"/v1/kb/causes/{text.splitlines()[0]}")):
        assert response.status_code in (400, 404, 422), response.get_data(as_text=True)
        assert needle not in response.get_data(as_text=True)
