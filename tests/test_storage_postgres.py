"""The PostgreSQL backend of the storage layer: migrations from SQL files, clear errors, the API on it."""

from __future__ import annotations

import threading

import psycopg
import pytest

from dsdoctor.kb.storage import backend, migrations
from dsdoctor.kb.storage.backend import StorageError
from dsdoctor.kb.storage.diagnoses import DiagnosisStore
from tests.test_api_support import EVIDENCE, make_app


def test_migrations_are_numbered_sql_files_applied_once(pg_url) -> None:
    files = migrations.migration_files("postgresql")
    assert [v for v, _, _ in files] == list(range(1, len(files) + 1))
    store = backend.postgres(pg_url)
    assert migrations.migrate(store) == len(files)  # again: nothing new to apply
    rows = store.execute("SELECT version, name FROM schema_version ORDER BY version").fetchall()
    assert [tuple(r) for r in rows] == [(v, n) for v, n, _ in files]


def test_replicas_starting_at_once_migrate_exactly_once(pg_cluster) -> None:
    url = pg_cluster.create_database()
    errors: list[BaseException] = []

    def start() -> None:
        try:
            migrations.migrate(backend.PostgresBackend(url))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM schema_version").fetchone()[0] == len(migrations.migration_files())


def test_a_newer_schema_is_refused_naming_both_versions(pg_url) -> None:
    store = backend.postgres(pg_url)
    store.execute("INSERT INTO schema_version (version, name) VALUES (99, 'future')")
    with pytest.raises(StorageError, match="schema version 99, newer than this dsdoctor"):
        migrations.migrate(backend.PostgresBackend(pg_url))


def test_bad_urls_are_clear_errors_without_the_password(monkeypatch, dsdoctor_home) -> None:
    monkeypatch.setenv("DSDOCTOR_DATABASE_URL", "mysql://u:secret@db/x")
    with pytest.raises(StorageError, match="write postgresql://") as bad:
        DiagnosisStore(dsdoctor_home)
    assert "secret" not in str(bad.value)
    url = "postgresql://u:secret@127.0.0.1:1/x"
    store = backend.PostgresBackend(url)
    with pytest.raises(StorageError, match="cannot connect to DSDOCTOR_DATABASE_URL") as down:
        store.conn  # noqa: B018
    assert "secret" not in str(down.value) and "u:***@127.0.0.1:1" in str(down.value)


def test_the_api_keeps_diagnoses_in_postgresql(pg_url, dsdoctor_home) -> None:
    app = make_app(dsdoctor_home)
    client = app.test_client()
    created = client.post("/v1/diagnoses", json=EVIDENCE)
    assert created.status_code == 201, created.get_json()
    did = created.get_json()["id"]
    assert not (dsdoctor_home / "diagnoses.db").exists()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM diagnoses WHERE id = %s", [did]).fetchone()[0] == 1
    assert client.get(f"/v1/diagnoses/{did}").get_json()["id"] == did
    app.extensions["dsdoctor"]["services"].close()


def test_a_lost_connection_is_reopened(pg_url, dsdoctor_home) -> None:
    store = DiagnosisStore(dsdoctor_home)
    store.add({"id": "d1", "causes": []}, {"description": "x"}, lang="en", top=5)
    admin_kill(pg_url)
    assert store.get("d1").id == "d1"  # a read reconnects and runs again
    admin_kill(pg_url)
    with pytest.raises(StorageError, match="failed"):  # a write may or may not have committed: say so
        store.add({"id": "d2", "causes": []}, {"description": "x"}, lang="en", top=5)
    store.add({"id": "d3", "causes": []}, {"description": "x"}, lang="en", top=5)  # and the next write works


def admin_kill(url: str) -> None:
    """Terminate every dsdoctor connection, as a server restart would."""
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE application_name = 'dsdoctor' AND pid <> pg_backend_pid()")


def test_a_database_gone_away_is_a_503_problem_not_a_500(pg_url, dsdoctor_home) -> None:
    app = make_app(dsdoctor_home)
    client = app.test_client()
    did = client.post("/v1/diagnoses", json=EVIDENCE).get_json()["id"]
    shared = backend.postgres(pg_url)
    shared.url = "postgresql://postgres@127.0.0.1:1/gone"  # the server is unreachable from now on
    admin_kill(pg_url)
    for response in (client.get(f"/v1/diagnoses/{did}"), client.post("/v1/diagnoses", json=EVIDENCE),
                     client.get("/readyz")):
        assert response.status_code == 503 and response.mimetype == "application/problem+json", response.get_json()
    assert "127.0.0.1:1" in client.get(f"/v1/diagnoses/{did}").get_json()["detail"]
    app.extensions["dsdoctor"]["services"].close()


def test_without_postgresql_the_tests_skip_saying_how_to_get_it(monkeypatch) -> None:
    from tests import pgserver

    monkeypatch.setattr(pgserver, "bindir", lambda: None)
    assert "apt-get install postgresql" in pgserver.Cluster().unavailable()
