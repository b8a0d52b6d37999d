"""`dsdoctor db copy --from sqlite:PATH --to postgresql://...`: an embedded store moves without loss."""

from __future__ import annotations

import io
import json
import sqlite3

from dsdoctor.api.cli import main
from dsdoctor.kb.catalog import load_catalog
from dsdoctor.kb.incidents import IncidentStore
from dsdoctor.kb.storage import backend
from dsdoctor.kb.storage.diagnoses import DiagnosisStore
from dsdoctor.kb.storage.tokens import TokenStore
from tests.test_api_support import EVIDENCE, make_app


def _seed_embedded_store(home) -> tuple[list[str], str]:
    """Diagnoses made through the API (one with an observation) and a token, all in SQLite."""
    app = make_app(home)
    client = app.test_client()
    ids = [client.post("/v1/diagnoses", json={**EVIDENCE, "job": {"id": f"j{n}", "cluster": "east"}}).get_json()["id"]
           for n in range(5)]
    secret, _ = TokenStore(home).create("ci", "diagnose,incidents:read")
    app.extensions["dsdoctor"]["services"].close()
    return ids, secret


def test_copy_round_trips_the_seed_store_and_is_idempotent(pg_cluster, dsdoctor_home, monkeypatch, capsys) -> None:
    ids, secret = _seed_embedded_store(dsdoctor_home)
    sqlite_store = DiagnosisStore(dsdoctor_home)
    before = {i: sqlite_store.get(i) for i in ids}
    listed_before = sqlite_store.list(limit=50)[0]
    sqlite_store.close()
    url = pg_cluster.create_database()

    assert main(["db", "copy", "--from", f"sqlite:{dsdoctor_home}", "--to", url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["diagnoses"] == {"source": 5, "copied": 5, "already_there": 0, "verified": 5}
    assert report["tokens"] == {"source": 1, "copied": 1, "already_there": 0, "verified": 1}
    assert main(["db", "copy", "--from", f"sqlite:{dsdoctor_home}", "--to", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["diagnoses"]["copied"] == 0

    monkeypatch.setenv("DSDOCTOR_DATABASE_URL", url)
    pg_store = DiagnosisStore(dsdoctor_home)
    assert pg_store.backend.dialect == "postgresql"
    for did, old in before.items():
        assert pg_store.get(did) == old
    assert pg_store.list(limit=50)[0] == listed_before  # same order, newest first
    assert pg_store.list(job_id="j3")[0][0]["id"] == before[ids[3]].id
    assert TokenStore(dsdoctor_home).verify(secret).name == "ci"
    backend.forget(url)


def test_a_conflicting_row_is_reported_not_overwritten(pg_cluster, dsdoctor_home, monkeypatch, capsys) -> None:
    ids, _ = _seed_embedded_store(dsdoctor_home)
    url = pg_cluster.create_database()
    assert main(["db", "copy", "--from", f"sqlite:{dsdoctor_home}", "--to", url]) == 0
    assert "5 verified identical" in capsys.readouterr().out
    with sqlite3.connect(dsdoctor_home / "diagnoses.db") as conn:
        conn.execute("UPDATE diagnoses SET summary = 'changed later' WHERE id = ?", (ids[0],))
    conn.close()
    assert main(["db", "copy", "--from", f"sqlite:{dsdoctor_home}", "--to", url]) != 0
    assert "diagnoses: 1 of 5 rows differ in PostgreSQL" in capsys.readouterr().err
    backend.forget(url)


def test_bad_arguments_say_what_to_write(dsdoctor_home, tmp_path, capsys) -> None:
    assert main(["db", "copy", "--from", str(tmp_path), "--to", "postgresql://x@127.0.0.1:1/x"]) != 0
    assert "write sqlite:PATH" in capsys.readouterr().err
    assert main(["db", "copy", "--from", f"sqlite:{tmp_path}", "--to", "postgresql://x@127.0.0.1:1/x"]) != 0
    assert "holds none of diagnoses.db, tokens.db, incidents.db" in capsys.readouterr().err
    (tmp_path / "tokens.db").touch()
    assert main(["db", "copy", "--from", f"sqlite:{tmp_path}", "--to", "mysql://x/y"]) != 0
    assert "write postgresql://" in capsys.readouterr().err


def test_copy_round_trips_the_seeded_incident_store_with_versions(pg_cluster, dsdoctor_home, monkeypatch,
                                                                  capsys) -> None:
    causes = frozenset(load_catalog())
    with IncidentStore(dsdoctor_home, valid_causes=causes) as embedded:  # seed + public incidents
        embedded.add({"id": "SITE-1", "title": "只有 rank 3 OOM", "phenomenon": "CUDA out of memory on rank 3",
                      "root_cause": "memory.foreign_process_on_gpu", "tags": ["oom"], "symptoms": ["s.cuda_oom"]})
        embedded.update("SITE-1", {"status": "resolved", "fix": "killed the leftover process"})
        embedded.update("SITE-1", {"scope": "rank 3"})
        everything = {r["id"]: r for r in embedded._data.iterate()}
        exported = io.StringIO()
        embedded.export_jsonl(exported)
        found = embedded.search("显存 OR NCCL_SOCKET_IFNAME", limit=200)
        counts = embedded.site_cause_counts()
    assert everything["SITE-1"]["version"] == 3 and len(everything) > 100
    url = pg_cluster.create_database()

    assert main(["db", "copy", "--from", f"sqlite:{dsdoctor_home}", "--to", url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["incidents"]
    assert report["source"] == report["copied"] == report["verified"] == len(everything)
    assert report["searchable"] == report["searched"] > 0
    assert main(["db", "copy", "--from", f"sqlite:{dsdoctor_home}", "--to", url, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)["incidents"]
    assert (again["copied"], again["already_there"]) == (0, len(everything))

    monkeypatch.setenv("DSDOCTOR_DATABASE_URL", url)
    with IncidentStore(dsdoctor_home / "elsewhere", valid_causes=causes) as pg:  # no reseeding, no reload
        assert pg.backend == "postgresql" and pg.count() == len(everything)
        assert {r["id"]: r for r in pg._data.iterate()} == everything
        copied = io.StringIO()
        pg.export_jsonl(copied)
        assert copied.getvalue() == exported.getvalue()
        assert pg.site_cause_counts() == counts
        on_pg = pg.search("显存 OR NCCL_SOCKET_IFNAME", limit=200)
        assert on_pg["total"] == found["total"] and {i["id"] for i in on_pg["items"]} == {i["id"] for i in found["items"]}
        assert pg.update("SITE-1", {"fix": "kill it"}, expected_version=3)["version"] == 4
    backend.forget(url)
