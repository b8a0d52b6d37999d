"""Diagnoses persistence on both backends (SQLite in WAL mode, PostgreSQL): stable cursors, optimistic
updates (kb/storage/diagnoses.py)."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from dsdoctor.kb.storage.diagnoses import DiagnosisStore, InvalidCursor, decode_cursor, encode_cursor


def _diagnosis(n: int, cause: str = "compute.lr_divergence") -> dict:
    return {"id": f"d{n:04d}", "causes": [{"id": cause, "probability": 0.5}],
            "summary": {"verdict": "uncertain", "text": f"case {n}"}}


@pytest.fixture
def store(dsdoctor_home, store_backend):
    DiagnosisStore.initialise(dsdoctor_home)
    s = DiagnosisStore(dsdoctor_home)
    yield s
    s.close()


def test_wal_mode_and_round_trip(store, store_backend) -> None:
    if store_backend == "sqlite":
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    evidence = {"description": "日本語 and 中文", "logs": [{"source": "r0", "text": "x" * 10_000}]}
    store.add(_diagnosis(1), evidence, lang="zh", top=3, created_at="2024-05-01T00:00:00Z")
    got = store.get("d0001")
    assert got.evidence == evidence and got.lang == "zh" and got.top == 3 and got.history == []
    assert got.created_at == "2024-05-01T00:00:00Z"
    raw = store.conn.execute("SELECT length(evidence) FROM diagnoses").fetchone()[0]
    assert raw < 1000  # compressed
    assert store.get("missing") is None and store.get_json("missing") is None


def test_encoded_diagnoses_are_stored_as_text(store) -> None:
    """The API hands over the diagnosis as UTF-8 bytes (encoded once); SQLite keeps it as TEXT."""
    from dsdoctor.api import jsontext

    diagnosis = {**_diagnosis(2), "summary": {"verdict": "uncertain", "text": "显存碎片"}}
    kind = "typeof" if store.backend.dialect == "sqlite" else "pg_typeof"
    store.add(diagnosis, {"description": "x"}, lang="zh", top=3, diagnosis_json=jsontext.dumps_bytes(diagnosis))
    assert str(store.conn.execute(f"SELECT {kind}(diagnosis) FROM diagnoses WHERE id = 'd0002'").fetchone()[0]) == "text"
    assert store.get_json("d0002") == jsontext.dumps(diagnosis) and store.get("d0002").diagnosis == diagnosis
    stored = store.get("d0002")
    changed = {**diagnosis, "summary": {"verdict": "confident", "text": "换了"}}
    assert store.replace(stored, changed, stored.evidence, [], diagnosis_json=jsontext.dumps_bytes(changed))
    assert str(store.conn.execute(f"SELECT {kind}(diagnosis) FROM diagnoses WHERE id = 'd0002'").fetchone()[0]) == "text"
    assert store.get("d0002").diagnosis == changed


def test_listing_is_newest_first_with_a_stable_cursor(store) -> None:
    for n in range(7):
        store.add(_diagnosis(n), {"description": "x"}, lang="en", top=5)
    page1, cursor = store.list(limit=3)
    assert [i["id"] for i in page1] == ["d0006", "d0005", "d0004"]
    store.add(_diagnosis(99), {"description": "late"}, lang="en", top=5)  # arrives between pages
    page2, cursor2 = store.list(limit=3, cursor=cursor)
    page3, cursor3 = store.list(limit=3, cursor=cursor2)
    assert [i["id"] for i in page2] == ["d0003", "d0002", "d0001"]
    assert [i["id"] for i in page3] == ["d0000"] and cursor3 is None
    assert page1[0]["url"] == "/v1/diagnoses/d0006" and page1[0]["top_cause"] == "compute.lr_divergence"


def test_since_filter(store) -> None:
    store.add(_diagnosis(1), {"description": "x"}, lang="en", top=5, created_at="2024-01-01T00:00:00Z")
    store.add(_diagnosis(2), {"description": "x"}, lang="en", top=5, created_at="2024-06-01T00:00:00Z")
    items, _ = store.list(since="2024-03-01T00:00:00Z")
    assert [i["id"] for i in items] == ["d0002"]


@pytest.mark.parametrize("bad", ["", "zzz", encode_cursor(5)[:-2] + "!!", "ZDp4"])
def test_bad_cursor(bad: str) -> None:
    with pytest.raises(InvalidCursor):
        decode_cursor(bad)
    assert decode_cursor(encode_cursor(42)) == 42


def test_optimistic_replace(store) -> None:
    store.add(_diagnosis(1), {"description": "x"}, lang="en", top=5)
    first = store.get("d0001")
    second = store.get("d0001")
    assert store.replace(first, _diagnosis(1, "data.corrupt_sample"), {"description": "y"}, [{"at": "t"}])
    assert not store.replace(second, _diagnosis(1), {"description": "z"}, [])  # stale version
    now = store.get("d0001")
    assert now.version == 2 and now.history == [{"at": "t"}] and now.evidence == {"description": "y"}
    items, _ = store.list()
    assert items[0]["top_cause"] == "data.corrupt_sample"


def test_writable(store, dsdoctor_home, store_backend) -> None:
    assert store.writable()
    if store_backend == "postgresql":
        return  # no file lock to hold: a primary is writable, a standby in recovery is not
    blocker = sqlite3.connect(dsdoctor_home / "diagnoses.db", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    store.conn.execute("PRAGMA busy_timeout = 50")
    assert not store.writable()
    blocker.execute("ROLLBACK")
    blocker.close()


def _writer(home: str, worker: int, count: int) -> None:
    s = DiagnosisStore(Path(home))
    for n in range(count):
        s.add(_diagnosis(worker * 1000 + n), {"description": "x" * 500}, lang="en", top=5)
    s.close()


def test_several_processes_write_at_once(dsdoctor_home, store_backend) -> None:
    DiagnosisStore.initialise(dsdoctor_home)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(dsdoctor_home), w, 40)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    s = DiagnosisStore(dsdoctor_home)
    seen, cursor = [], None
    while True:
        page, cursor = s.list(limit=50, cursor=cursor)
        seen += [i["id"] for i in page]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 160
    s.close()
