"""Rows <-> records: read and write incidents in the SQLite tables (through sqlite-utils).

Every write also appends the incident id to ``index_queue`` in the caller's transaction, so the
full-text index can always catch up from SQLite (see :mod:`kb.incidents.indexer`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import sqlite_utils

from dsdoctor.kb.incidents.record import RECORD_FIELDS, normalise, utc_now

_COLUMNS = tuple(k for k in RECORD_FIELDS if k not in ("tags", "symptoms"))
_SELECT = "SELECT " + ", ".join(_COLUMNS) + " FROM incidents"


def to_row(record: dict[str, Any]) -> dict[str, Any]:
    """The ``incidents`` row of a normalised record (tags and symptoms live in their own tables)."""
    row = {k: record[k] for k in _COLUMNS}
    row["job"] = json.dumps(record["job"], ensure_ascii=False, sort_keys=True)
    return row


def _from_row(row: tuple, tags: list[str], symptoms: list[str]) -> dict[str, Any]:
    record = dict(zip(_COLUMNS, row, strict=True))
    record["job"] = json.loads(record["job"] or "{}")
    record["tags"] = tags
    record["symptoms"] = symptoms
    return normalise(record)


def enqueue(db: sqlite_utils.Database, incident_ids: Iterable[str]) -> None:
    """Ask the index to (re)index or drop these incidents (call inside the write transaction)."""
    now = utc_now()
    db["index_queue"].insert_all(({"incident_id": i, "queued_at": now} for i in incident_ids), pk="seq")


def insert(db: sqlite_utils.Database, record: dict[str, Any]) -> None:
    """Insert a new record (raises sqlite3.IntegrityError when the id exists)."""
    db["incidents"].insert(to_row(record))
    _write_children(db, record)
    enqueue(db, [record["id"]])


def insert_many(db: sqlite_utils.Database, records: list[dict[str, Any]]) -> None:
    """Insert many new records at once (bulk import)."""
    if not records:
        return
    db["incidents"].insert_all((to_row(r) for r in records), batch_size=500)
    db["incident_tags"].insert_all(({"incident_id": r["id"], "position": i, "tag": t}
                                    for r in records for i, t in enumerate(r["tags"])), batch_size=500)
    db["incident_symptoms"].insert_all(({"incident_id": r["id"], "symptom_id": s}
                                        for r in records for s in r["symptoms"]), batch_size=500)
    enqueue(db, [r["id"] for r in records])


def replace(db: sqlite_utils.Database, record: dict[str, Any], expected_version: int) -> bool:
    """Overwrite the record with the same id if it is still at ``expected_version``; False when it is not.

    The version check is part of the UPDATE, so no reader outside the transaction can slip a change in."""
    row = {k: v for k, v in to_row(record).items() if k not in ("id", "version")}
    assignments = ", ".join(f"{k} = ?" for k in row)
    cursor = db.execute(f"UPDATE incidents SET {assignments}, version = version + 1 WHERE id = ? AND version = ?",
                        [*row.values(), record["id"], expected_version])
    if cursor.rowcount != 1:
        return False
    record["version"] = expected_version + 1
    db.execute("DELETE FROM incident_tags WHERE incident_id = ?", [record["id"]])
    db.execute("DELETE FROM incident_symptoms WHERE incident_id = ?", [record["id"]])
    _write_children(db, record)
    enqueue(db, [record["id"]])
    return True


def delete(db: sqlite_utils.Database, incident_id: str) -> bool:
    """Delete a record (tags and symptoms go with it); False when there was none."""
    cursor = db.execute("DELETE FROM incidents WHERE id = ?", [incident_id])
    if cursor.rowcount:
        enqueue(db, [incident_id])
    return bool(cursor.rowcount)


def _write_children(db: sqlite_utils.Database, record: dict[str, Any]) -> None:
    rid = record["id"]
    if record["tags"]:
        db["incident_tags"].insert_all(
            {"incident_id": rid, "position": i, "tag": t} for i, t in enumerate(record["tags"]))
    if record["symptoms"]:
        db["incident_symptoms"].insert_all({"incident_id": rid, "symptom_id": s} for s in record["symptoms"])


def exists(db: sqlite_utils.Database, incident_id: str) -> bool:
    return db.execute("SELECT 1 FROM incidents WHERE id = ?", [incident_id]).fetchone() is not None


def fetch(db: sqlite_utils.Database, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Records by id (missing ids are simply absent from the result)."""
    wanted = list(dict.fromkeys(ids))
    out: dict[str, dict[str, Any]] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        marks = ",".join("?" * len(chunk))
        tags = _children(db, f"SELECT incident_id, tag FROM incident_tags WHERE incident_id IN ({marks}) "
                             "ORDER BY incident_id, position", chunk)
        symptoms = _children(db, f"SELECT incident_id, symptom_id FROM incident_symptoms WHERE incident_id IN "
                                 f"({marks}) ORDER BY incident_id, symptom_id", chunk)
        for row in db.execute(f"{_SELECT} WHERE id IN ({marks})", chunk).fetchall():
            out[row[0]] = _from_row(row, tags.get(row[0], []), symptoms.get(row[0], []))
    return out


def _children(db: sqlite_utils.Database, sql: str, params: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for incident_id, value in db.execute(sql, params).fetchall():
        out.setdefault(incident_id, []).append(value)
    return out


def iterate(db: sqlite_utils.Database, batch: int = 2000) -> Iterator[dict[str, Any]]:
    """Every record, ordered by id, read in batches (call inside a read transaction for a snapshot)."""
    last = ""
    while True:
        ids = [r[0] for r in db.execute("SELECT id FROM incidents WHERE id > ? ORDER BY id LIMIT ?",
                                        [last, batch]).fetchall()]
        if not ids:
            return
        records = fetch(db, ids)
        for incident_id in ids:
            yield records[incident_id]
        last = ids[-1]


def count(db: sqlite_utils.Database) -> int:
    return int(db.execute("SELECT COUNT(*) FROM incidents").fetchone()[0])
