"""Diagnoses kept by the API: SQLite in ``DSDOCTOR_HOME/diagnoses.db`` (WAL, safe with many workers),
or the shared PostgreSQL database of a fleet (``DSDOCTOR_DATABASE_URL``).

Each row holds the diagnosis as returned, the redacted evidence it was computed from
(zlib-compressed JSON, so observations can re-run it) and the history of observations.
Listing is newest first with an opaque cursor over the insertion sequence, so paging never
repeats or skips a diagnosis while others are being added.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import sqlite3
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsdoctor.kb.storage import jsontext
from dsdoctor.kb.storage.backend import SqliteBackend, StorageError
from dsdoctor.kb.storage.backend import for_file as backend_for

FILE_NAME = "diagnoses.db"
SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS diagnoses (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    top_cause TEXT,
    top_probability REAL,
    verdict TEXT,
    summary TEXT NOT NULL DEFAULT '',
    lang TEXT NOT NULL DEFAULT 'en',
    top_n INTEGER NOT NULL DEFAULT 5,
    version INTEGER NOT NULL DEFAULT 1,
    evidence BLOB NOT NULL,
    diagnosis TEXT NOT NULL,
    history TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS diagnoses_created_at ON diagnoses (created_at);
"""
#: Version 2: the job identity of the evidence, as columns so that listings can filter on it.
_JOB_COLUMNS = {"job_id": "TEXT", "cluster": "TEXT", "job": "TEXT"}
_JOB_INDEXES = """
CREATE INDEX IF NOT EXISTS diagnoses_job_id ON diagnoses (job_id);
CREATE INDEX IF NOT EXISTS diagnoses_cluster ON diagnoses (cluster);
"""


class InvalidCursor(ValueError):
    """A cursor that this API did not hand out."""


@dataclass
class StoredDiagnosis:
    id: str
    created_at: str
    updated_at: str
    lang: str
    top: int
    version: int
    evidence: dict[str, Any]
    diagnosis: dict[str, Any]
    history: list[dict[str, Any]]


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"d:{seq}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The sequence number inside a cursor; raise InvalidCursor for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, number = raw.partition(":")
        if kind != "d" or not number.isdigit():
            raise ValueError
        return int(number)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidCursor(f"{cursor!r} is not a cursor returned by this API (use next_cursor from a listing)") from None


def _pack(evidence: dict[str, Any]) -> bytes:
    return zlib.compress(jsontext.dumps_bytes(evidence), 1)


def _unpack(blob: bytes) -> dict[str, Any]:
    return json.loads(zlib.decompress(blob).decode("utf-8"))


def _text(diagnosis: dict[str, Any], encoded: bytes | None) -> str:
    """The diagnosis as JSON text (stored as text on both backends, so reads need no decoding)."""
    return (encoded or jsontext.dumps_bytes(diagnosis)).decode("utf-8")


def _top(diagnosis: dict[str, Any]) -> tuple[str | None, float | None]:
    causes = diagnosis.get("causes") or []
    return (causes[0]["id"], causes[0]["probability"]) if causes else (None, None)


def _job(diagnosis: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    job = diagnosis.get("job") or {}
    return job.get("id"), job.get("cluster"), jsontext.dumps(job) if job else None


def _add_job_columns(conn: sqlite3.Connection) -> None:
    """Add the version-2 job columns to a version-1 database (a no-op when present; races are harmless)."""
    present = {row[1] for row in conn.execute("PRAGMA table_info(diagnoses)")}
    for name, kind in _JOB_COLUMNS.items():
        if name not in present:
            try:
                conn.execute(f"ALTER TABLE diagnoses ADD COLUMN {name} {kind}")
            except sqlite3.OperationalError as exc:  # another worker added it first
                if "duplicate column" not in str(exc):
                    raise
    conn.executescript(_JOB_INDEXES)


def _switch_to_wal(conn: sqlite3.Connection, seconds: float = 20.0) -> None:
    """WAL mode, once per database file. Workers booting together race for it, and the switch needs
    an exclusive lock that SQLite's busy handler does not always wait for: retry until it holds."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                return
            conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _sqlite_initialise(conn: sqlite3.Connection) -> None:
    _switch_to_wal(conn)
    conn.executescript(_SCHEMA)
    _add_job_columns(conn)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


class DiagnosisStore:
    """The diagnoses of a data directory (``diagnoses.db``), or of the shared PostgreSQL database when
    ``DSDOCTOR_DATABASE_URL`` is set, through this thread's connection."""

    def __init__(self, home: Path):
        self.backend = backend_for(home, FILE_NAME)
        self.path = Path(home) / FILE_NAME

    @classmethod
    def initialise(cls, home: Path) -> None:
        """Create the database (WAL mode) and its tables if missing; safe to race between workers
        (PostgreSQL: the migrations ran when the backend opened)."""
        backend = backend_for(home, FILE_NAME)
        if isinstance(backend, SqliteBackend):
            conn = backend._open()
            try:
                _sqlite_initialise(conn)
            finally:
                conn.close()

    @property
    def conn(self) -> Any:
        return self.backend.conn

    def close(self) -> None:
        """Close this thread's connection (the next use opens a new one)."""
        self.backend.close()

    def add(self, diagnosis: dict[str, Any], evidence: dict[str, Any], *, lang: str, top: int,
            created_at: str | None = None, diagnosis_json: bytes | None = None) -> None:
        """Store a new diagnosis with the (already redacted) evidence it came from.

        ``diagnosis_json`` is the diagnosis already encoded as UTF-8 JSON (saves encoding it twice);
        it is stored as text."""
        now = created_at or utc_now()
        cause, probability = _top(diagnosis)
        self.backend.execute(
            "INSERT INTO diagnoses (id, created_at, updated_at, top_cause, top_probability, verdict, summary, lang, "
            "top_n, evidence, diagnosis, history, job_id, cluster, job) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (diagnosis["id"], now, now, cause, probability, (diagnosis.get("summary") or {}).get("verdict"),
             (diagnosis.get("summary") or {}).get("text", ""), lang, top, _pack(evidence),
             _text(diagnosis, diagnosis_json), "[]", *_job(diagnosis)),
        )

    def get(self, diagnosis_id: str) -> StoredDiagnosis | None:
        row = self.backend.execute(
            "SELECT id, created_at, updated_at, lang, top_n, version, evidence, diagnosis, history "
            "FROM diagnoses WHERE id = ?", (diagnosis_id,)).fetchone()
        if row is None:
            return None
        did, created, updated, lang, top, version, evidence, diagnosis, history = row
        return StoredDiagnosis(did, created, updated, lang, top, version, _unpack(evidence), json.loads(diagnosis),
                               json.loads(history))

    def get_json(self, diagnosis_id: str) -> str | None:
        """The stored diagnosis as JSON text (no parsing on the read path)."""
        row = self.backend.execute("SELECT diagnosis FROM diagnoses WHERE id = ?", (diagnosis_id,)).fetchone()
        return row[0] if row else None

    def replace(self, stored: StoredDiagnosis, diagnosis: dict[str, Any], evidence: dict[str, Any],
                history: list[dict[str, Any]], diagnosis_json: bytes | None = None) -> bool:
        """Write a re-run diagnosis if nobody else changed it since ``stored`` was read (optimistic lock)."""
        cause, probability = _top(diagnosis)
        cursor = self.backend.execute(
            "UPDATE diagnoses SET updated_at = ?, top_cause = ?, top_probability = ?, verdict = ?, summary = ?, "
            "version = version + 1, evidence = ?, diagnosis = ?, history = ? WHERE id = ? AND version = ?",
            (utc_now(), cause, probability,
             (diagnosis.get("summary") or {}).get("verdict"), (diagnosis.get("summary") or {}).get("text", ""),
             _pack(evidence), _text(diagnosis, diagnosis_json),
             jsontext.dumps(history), stored.id, stored.version),
        )
        return cursor.rowcount == 1

    def list(self, *, since: str | None = None, limit: int = 20, cursor: str | None = None,
             job_id: str | None = None, cluster: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """Summaries newest first, and the cursor of the next page (None on the last page)."""
        where, params = [], []
        for column, value in (("job_id", job_id), ("cluster", cluster)):
            if value:
                where.append(f"{column} = ?")
                params.append(value)
        if cursor:
            where.append("seq < ?")
            params.append(decode_cursor(cursor))
        if since:
            where.append("created_at >= ?")
            params.append(since)
        sql = ("SELECT seq, id, created_at, updated_at, top_cause, top_probability, verdict, summary, lang, job "
               "FROM diagnoses" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY seq DESC LIMIT ?")
        rows = self.backend.execute(sql, [*params, limit + 1]).fetchall()
        items = [
            {"id": did, "created_at": created, "updated_at": updated, "top_cause": cause,
             "top_probability": probability, "verdict": verdict, "summary": summary, "lang": lang,
             "url": f"/v1/diagnoses/{did}", "job": json.loads(job) if job else None}
            for _seq, did, created, updated, cause, probability, verdict, summary, lang, job in rows[:limit]
        ]
        next_cursor = encode_cursor(rows[limit - 1][0]) if len(rows) > limit else None
        return items, next_cursor

    def writable(self) -> bool:
        """True when a write transaction can be opened (and is rolled back)."""
        try:
            if self.backend.dialect == "postgresql":
                return not self.backend.execute("SELECT pg_is_in_recovery()").fetchone()[0]
            self.backend.execute("BEGIN IMMEDIATE")
            self.backend.execute("ROLLBACK")
            return True
        except (*self.backend.operational_errors, sqlite3.Error, OSError, StorageError):
            return False
