"""The derived index: rebuild equals incremental, crash catch-up, one writer across workers."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from dsdoctor.kb.incidents import IncidentStore, tables
from dsdoctor.kb.incidents.indexer import FORMAT_FILE, TEXT_FIELDS, document
from dsdoctor.kb.incidents.migrations import connect, write_transaction
from dsdoctor.kb.incidents.record import validate_new
from dsdoctor.kb.incidents.store import DB_FILE, INDEX_DIR

ROOT = Path(__file__).resolve().parent.parent


def record(i: int, **overrides):
    base = {"id": f"INC-{i:03d}", "title": f"case {i}: watchdog timeout 看门狗超时",
            "phenomenon": f"rank {i % 4} OOM 显存碎片 checkpoints", "root_cause": "memory.fragmentation",
            "tags": [f"t{i % 3}"], "occurred_at": f"2024-02-{1 + i % 28:02d}"}
    base.update(overrides)
    return base


def postings(store: IncidentStore) -> dict:
    """Everything the index holds: field -> term -> sorted incident ids; plus the stored ids."""
    searcher = store.indexer.searcher()
    reader = searcher.reader()
    id_of = {docnum: fields["id"] for docnum, fields in reader.iter_docs()}
    out: dict = {"ids": sorted(id_of.values())}
    for field in (*TEXT_FIELDS, "root_cause", "domain", "severity", "status", "tags", "occurred_at"):
        table = {}
        for term in reader.lexicon(field):
            docs = [id_of[d] for d in reader.postings(field, term).all_ids() if d in id_of]
            if docs:
                table[term] = sorted(docs)
        out[field] = table
    return out


def index_ids(store: IncidentStore) -> list[str]:
    return postings(store)["ids"]


@pytest.fixture
def store(dsdoctor_home):
    with IncidentStore(dsdoctor_home, seed=False) as s:
        yield s


def test_rebuild_from_sqlite_equals_the_incremental_index(store):
    for i in range(12):
        store.add(record(i))
    store.update("INC-003", {"title": "renamed: NCCL_SOCKET_IFNAME", "tags": ["network"]})
    store.delete("INC-007")
    store.import_jsonl([json.dumps(record(20, title="imported 导入"))])
    incremental = postings(store)
    assert "INC-007" not in incremental["ids"] and len(incremental["ids"]) == 12
    assert store.reindex() == 12
    assert postings(store) == incremental


def test_search_catches_up_after_a_crash_between_sqlite_and_index(dsdoctor_home):
    IncidentStore(dsdoctor_home, seed=False).close()
    db = connect(dsdoctor_home / DB_FILE)  # a worker that committed to SQLite, then died before indexing
    with write_transaction(db):
        tables.insert(db, validate_new(record(1, title="崩溃前写入的事故 orphaned"), None))
    db.close()
    with IncidentStore(dsdoctor_home, seed=False) as fresh:
        assert fresh.index_lag() == 1
        assert [i["id"] for i in fresh.search("崩溃")["items"]] == ["INC-001"]
        assert fresh.index_lag() == 0


def test_crash_after_index_commit_before_queue_cleanup_is_harmless(store):
    store.add(record(1))
    with write_transaction(store._db):  # the same change queued again, as if the cleanup never ran
        tables.enqueue(store._db, ["INC-001", "INC-001"])
    assert store.search("checkpoints")["total"] == 1
    assert index_ids(store) == ["INC-001"]


def test_a_reader_does_not_wait_for_a_busy_writer(store):
    store.add(record(1))
    with store.indexer.lock.hold(blocking=True):  # another worker is indexing
        with write_transaction(store._db):
            tables.insert(store._db, validate_new(record(2), None))
        assert store.search("checkpoints")["total"] == 1  # served from the index as it is
        assert store.index_lag() == 1
    assert store.search("checkpoints")["total"] == 2


def test_two_stores_in_threads_write_concurrently(dsdoctor_home):
    IncidentStore(dsdoctor_home, seed=False).close()
    errors = []

    def worker(offset: int) -> None:
        try:
            with IncidentStore(dsdoctor_home, seed=False) as s:
                for i in range(offset, offset + 15):
                    s.add(record(i))
                    if i % 5 == 0:
                        s.update(f"INC-{i:03d}", {"severity": "high"})
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k * 100,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with IncidentStore(dsdoctor_home, seed=False) as s:
        assert s.count() == 30 and s.index_lag() == 0
        found = index_ids(s)
        assert len(found) == len(set(found)) == 30
        assert s.search("checkpoints", limit=100)["total"] == 30


WORKER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from dsdoctor.kb.incidents import IncidentStore
    home, offset = Path(sys.argv[1]), int(sys.argv[2])
    with IncidentStore(home, seed=False) as s:
        for i in range(offset, offset + 12):
            s.add({"id": f"P{offset}-{i}", "title": f"process {offset} case {i}", "phenomenon": "显存碎片 checkpoint",
                   "root_cause": "memory.fragmentation"})
    print("ok")
""")


def test_two_processes_write_concurrently_without_duplicates_or_lost_entries(dsdoctor_home):
    IncidentStore(dsdoctor_home, seed=False).close()
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(dsdoctor_home), str(k)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in (0, 1000)]
    outputs = [p.communicate(timeout=180) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    with IncidentStore(dsdoctor_home, seed=False) as s:
        assert s.count() == 24 and s.index_lag() == 0
        found = index_ids(s)
        assert len(found) == len(set(found)) == 24
        assert s.search("显存碎片", limit=100)["total"] == 24


def test_index_of_an_older_format_is_rebuilt_from_sqlite(store, dsdoctor_home):
    store.add(record(1))
    store.close()
    (dsdoctor_home / INDEX_DIR / FORMAT_FILE).write_text("dsdoctor-incidents-0\n", encoding="utf-8")
    with IncidentStore(dsdoctor_home, seed=False) as again:
        assert again.search("checkpoints")["total"] == 1
    assert (dsdoctor_home / INDEX_DIR / FORMAT_FILE).read_text().strip() != "dsdoctor-incidents-0"


def test_deleted_index_directory_is_rebuilt(store, dsdoctor_home):
    import shutil

    store.add(record(1))
    store.close()
    shutil.rmtree(dsdoctor_home / INDEX_DIR)
    with IncidentStore(dsdoctor_home, seed=False) as again:
        assert again.search("checkpoints")["total"] == 1


def test_parallel_rebuild_matches_serial(store, monkeypatch):
    import dsdoctor.kb.incidents.indexer as indexer

    for i in range(30):
        store.add(record(i))
    serial = postings(store)
    monkeypatch.setattr(indexer, "PARALLEL_MIN_DOCS", 10)
    assert store.reindex(procs=2) == 30
    assert postings(store) == serial


def test_document_weighs_the_parts_of_a_record():
    from dsdoctor.kb.incidents.analyzer import BilingualAnalyzer

    doc = document(validate_new(record(1, title="Only rank 3", fix="raise NCCL timeout", symptoms=["s.cuda_oom"],
                                       job={"cluster": "a100", "versions": {"torch": "2.3.0"}}), None))
    weights = {}
    for token in BilingualAnalyzer()(doc["text"]):
        weights.setdefault(token.text, token.boost)
    assert weights["onli"] == 3.0 and weights["显存"] == 2.0 and weights["fragment"] == 2.0
    assert weights["nccl"] == 1.0 and weights["cuda"] == 1.0 and weights["torch"] == 1.0
    assert doc["title"] == "Only rank 3" and doc["domain"] == "memory" and doc["tags"] == "t1"
