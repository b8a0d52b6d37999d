"""IncidentStore: CRUD, conflicts, import/export, site counts and similar incidents."""

from __future__ import annotations

import io
import json
import sqlite3

import pytest

from dsdoctor.kb.catalog import load_catalog
from dsdoctor.kb.incidents import ConflictError, IncidentStore, NotFoundError, ValidationError
from dsdoctor.kb.incidents.migrations import SCHEMA_VERSION

CAUSES = frozenset(load_catalog())


def record(**overrides):
    base = {"title": "Only rank 3 OOM", "phenomenon": "CUDA out of memory on rank 3",
            "root_cause": "memory.foreign_process_on_gpu"}
    base.update(overrides)
    return base


@pytest.fixture
def store(dsdoctor_home, store_backend):
    with IncidentStore(dsdoctor_home, valid_causes=CAUSES, seed=False) as s:
        yield s


def test_add_get_update_delete(store):
    added = store.add(record(id="INC-1", tags=["oom"]))
    assert store.get("INC-1") == added
    updated = store.update("INC-1", {"status": "resolved", "fix": "killed the leftover process"})
    assert updated["status"] == "resolved" and updated["tags"] == ["oom"]
    assert updated["updated_at"] >= added["updated_at"] and updated["created_at"] == added["created_at"]
    assert store.get("INC-1") == updated
    store.delete("INC-1")
    with pytest.raises(NotFoundError):
        store.get("INC-1")
    assert store.count() == 0


def test_update_without_change_returns_the_record_unchanged(store):
    added = store.add(record(id="INC-1"))
    assert store.update("INC-1", {"title": added["title"]}) == added


def test_duplicate_id_is_a_conflict(store):
    store.add(record(id="INC-1"))
    with pytest.raises(ConflictError) as info:
        store.add(record(id="INC-1", title="another"))
    assert info.value.http_status == 409 and "INC-1" in str(info.value)
    assert store.get("INC-1")["title"] == "Only rank 3 OOM"


def test_missing_ids_are_not_found(store):
    for call in (lambda: store.get("NOPE"), lambda: store.update("NOPE", {"fix": "x"}), lambda: store.delete("NOPE")):
        with pytest.raises(NotFoundError) as info:
            call()
        assert info.value.http_status == 404


def test_unknown_root_cause_is_refused_naming_valid_ids(store):
    with pytest.raises(ValidationError) as info:
        store.add(record(root_cause="memory.fragmentaton"))
    message = info.value.messages["root_cause"][0]
    assert "memory.fragmentation" in message and "comm.network_interface" in message
    assert store.count() == 0


def test_valid_causes_may_be_a_callable_asked_on_every_write(dsdoctor_home, store_backend):
    allowed = {"memory.fragmentation"}
    with IncidentStore(dsdoctor_home, valid_causes=lambda: allowed, seed=False) as s:
        with pytest.raises(ValidationError):
            s.add(record(root_cause="memory.foreign_process_on_gpu"))
        allowed.add("memory.foreign_process_on_gpu")
        assert s.add(record(root_cause="memory.foreign_process_on_gpu"))["domain"] == "memory"


def test_tags_and_symptoms_live_in_child_tables_with_foreign_keys(dsdoctor_home):
    store = IncidentStore(dsdoctor_home, valid_causes=CAUSES, seed=False)  # the embedded schema
    store.add(record(id="INC-1", tags=["oom"], symptoms=["s.cuda_oom"]))
    db = store._db
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert db.journal_mode == "wal"
    with pytest.raises(sqlite3.IntegrityError):
        db.execute("INSERT INTO incident_tags (incident_id, position, tag) VALUES ('NOPE', 0, 'x')")
    store.delete("INC-1")
    assert db.execute("SELECT COUNT(*) FROM incident_tags").fetchone()[0] == 0
    assert db.execute("SELECT COUNT(*) FROM incident_symptoms").fetchone()[0] == 0


def test_schema_version_is_recorded_and_migrations_run_once(dsdoctor_home):
    for _ in range(2):
        with IncidentStore(dsdoctor_home, seed=False) as s:
            rows = s._db.execute("SELECT version FROM schema_version").fetchall()
    assert rows == [(v,) for v in range(1, SCHEMA_VERSION + 1)]  # each migration once


def test_import_is_idempotent_and_updates_changed_lines(store):
    lines = [json.dumps(record(id="INC-1")), json.dumps(record(title="no id", occurred_at="2024-05-01")), ""]
    assert store.import_jsonl(lines) == {"added": 2, "updated": 0, "unchanged": 0}
    assert store.import_jsonl(lines) == {"added": 0, "updated": 0, "unchanged": 2}
    changed = [json.dumps(record(id="INC-1", fix="restart")), lines[1]]
    assert store.import_jsonl(changed) == {"added": 0, "updated": 1, "unchanged": 1}
    assert store.count() == 2 and store.get("INC-1")["fix"] == "restart"
    assert store.search("no id")["total"] == 1


def test_import_rejects_the_whole_file_naming_each_bad_line(store, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([json.dumps(record(id="A")), "{not json", json.dumps(record(id="B", severity="x")),
                               json.dumps(record(id="A"))]), encoding="utf-8")
    with pytest.raises(ValidationError) as info:
        store.import_jsonl(path)
    keys = set(info.value.messages)
    assert {"line 2", "line 3: severity", "line 4: id"} <= keys
    assert store.count() == 0


def test_import_of_a_missing_file_is_a_clear_error(store, tmp_path):
    with pytest.raises(ValidationError, match="does not exist"):
        store.import_jsonl(tmp_path / "missing.jsonl")


def test_export_import_roundtrip(store, tmp_path, other_database):
    store.add(record(id="INC-1", tags=["oom", "显存"], symptoms=["s.cuda_oom"],
                     job={"cluster": "a", "world_size": 8, "node_count": 1, "versions": {"torch": "2.3.0"}}))
    store.add(record(id="INC-2", title="看门狗超时", root_cause="comm.slow_rank_exceeds_timeout", status="resolved",
                     fix="raise the timeout", occurred_at="2024-01-02T03:04:05Z"))
    first = io.StringIO()
    assert store.export_jsonl(first) == 2
    with IncidentStore(tmp_path / "other", valid_causes=CAUSES, seed=False) as other:
        assert other.import_jsonl(first.getvalue().splitlines())["added"] == 2
        second = io.StringIO()
        other.export_jsonl(second)
        assert other.search("看门狗")["total"] == 1
    assert second.getvalue() == first.getvalue()
    assert "显存" in first.getvalue()  # UTF-8, not \\u escapes


def test_site_cause_counts_count_resolved_incidents_from_the_store(store):
    store.add(record(id="A", status="resolved", fix="x"))
    store.add(record(id="B", status="resolved", fix="x"))
    store.add(record(id="C"))
    store.add(record(id="D", root_cause="memory.fragmentation", status="resolved", fix="x"))
    assert store.site_cause_counts() == {"memory.foreign_process_on_gpu": 2, "memory.fragmentation": 1}
    store.update("A", {"status": "open"})
    store.delete("D")
    assert store.site_cause_counts() == {"memory.foreign_process_on_gpu": 1}


def test_similar_by_symptoms_uses_jaccard(store):
    store.add(record(id="A", symptoms=["s.cuda_oom", "s.oom_other_process_on_gpu"]))
    store.add(record(id="B", title="other", phenomenon="other", symptoms=["s.cuda_oom", "s.loss_nan", "s.hang"]))
    store.add(record(id="C", title="unrelated", phenomenon="nothing", symptoms=["s.hang"]))
    found = store.similar(symptoms=["s.cuda_oom", "s.oom_other_process_on_gpu"])
    assert [f["id"] for f in found] == ["A", "B"]
    assert found[0]["score"] == 1.0 and found[1]["score"] == pytest.approx(1 / 4)
    assert set(found[0]) >= {"id", "title", "root_cause", "fix", "score"}


def test_similar_by_text_and_by_id_excludes_itself(store):
    store.add(record(id="A", title="Watchdog timeout while rank 0 saves a checkpoint",
                     phenomenon="ALLREDUCE timed out; rank 0 in save_checkpoint on NFS",
                     root_cause="comm.slow_rank_exceeds_timeout"))
    store.add(record(id="B", title="rank 0 checkpoint save to NFS took 40 minutes",
                     phenomenon="other ranks hit the NCCL watchdog timeout", root_cause="comm.slow_rank_exceeds_timeout"))
    store.add(record(id="C", title="T4 上启用 bf16 报错", phenomenon="CUBLAS_STATUS_NOT_SUPPORTED",
                     root_cause="compute.bf16_unsupported"))
    by_text = store.similar(text="checkpoint save on NFS makes the watchdog time out")
    assert [f["id"] for f in by_text][:2] in (["A", "B"], ["B", "A"])
    assert all(0 < f["score"] <= 1 for f in by_text)
    by_id = store.similar("A")
    assert by_id[0]["id"] == "B" and "A" not in [f["id"] for f in by_id]


def test_similar_needs_something_to_compare(store):
    with pytest.raises(ValidationError):
        store.similar()


def test_open_existing_creates_nothing(tmp_path):
    assert IncidentStore.open_existing(tmp_path / "none") is None
    assert not (tmp_path / "none").exists()


def test_import_without_timestamps_stays_idempotent_as_time_passes(store, monkeypatch):
    import dsdoctor.kb.incidents.record as record_module
    import dsdoctor.kb.incidents.store as store_module

    line = [json.dumps(record(id="INC-T"))]
    for module in (record_module, store_module):
        monkeypatch.setattr(module, "utc_now", lambda: "2024-01-01T00:00:00Z")
    assert store.import_jsonl(line)["added"] == 1
    for module in (record_module, store_module):
        monkeypatch.setattr(module, "utc_now", lambda: "2025-06-01T00:00:00Z")
    assert store.import_jsonl(line) == {"added": 0, "updated": 0, "unchanged": 1}
    assert store.get("INC-T")["occurred_at"] == "2024-01-01T00:00:00Z"


def test_warm_up_loads_jieba_and_opens_the_index(store):
    from dsdoctor.kb.incidents import analyzer

    store.warm_up()
    assert analyzer.jieba_loaded()
    assert store.index_lag() == 0


def test_a_broken_database_file_is_a_clear_error(dsdoctor_home):
    from dsdoctor.kb.incidents import IncidentError

    dsdoctor_home.mkdir(parents=True)
    (dsdoctor_home / "incidents.db").write_bytes(b"garbage" * 1000)
    with pytest.raises(IncidentError, match="cannot be used as the incident database"):
        IncidentStore(dsdoctor_home)


def test_shipped_seed_examples_do_not_count_as_site_history(store):
    store.add(record(id="INC-SEED-99", status="resolved", fix="x"))
    store.add(record(id="SITE-1", status="resolved", fix="x"))
    assert store.site_cause_counts() == {"memory.foreign_process_on_gpu": 1}


def test_remembered_similar_incidents_follow_writes_of_this_and_other_processes(store, dsdoctor_home):
    """Repeated failures reuse the answer, but never a stale one: a write here, or by another
    connection (another worker process), changes what similar() returns."""
    store.add(record(id="A", symptoms=["s.cuda_oom"]))
    first = store.similar(symptoms=["s.cuda_oom"], text="rank 3 out of memory")
    first[0]["score"] = -1  # callers own their copy: the remembered answer is not changed through it
    assert store.similar(symptoms=["s.cuda_oom"], text="rank 3 out of memory")[0]["score"] > 0
    store.update("A", {"title": "renamed here"})
    assert store.similar(symptoms=["s.cuda_oom"], text="rank 3 out of memory")[0]["title"] == "renamed here"
    with IncidentStore(dsdoctor_home, valid_causes=CAUSES, seed=False) as other:
        other.add(record(id="B", title="rank 3 out of memory again", symptoms=["s.cuda_oom"]))
    ids = [f["id"] for f in store.similar(symptoms=["s.cuda_oom"], text="rank 3 out of memory")]
    assert sorted(ids) == ["A", "B"]
