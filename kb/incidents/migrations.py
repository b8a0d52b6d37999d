"""The SQLite database of the incident store: connection settings and schema migrations.

Each migration runs once, in order, inside one ``BEGIN IMMEDIATE`` transaction together with its
row in ``schema_version``; several workers starting at once apply each migration exactly once.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlite_utils

from dsdoctor.kb.incidents.record import SEVERITIES, STATUSES

BUSY_TIMEOUT_S = 30.0


def _v1(db: sqlite_utils.Database) -> None:
    severities = ", ".join(f"'{s}'" for s in SEVERITIES)
    statuses = ", ".join(f"'{s}'" for s in STATUSES)
    _run_script(db, f"""
        CREATE TABLE incidents (
            id TEXT PRIMARY KEY,
            title TEXT NOT NULL,
            phenomenon TEXT NOT NULL,
            scope TEXT NOT NULL DEFAULT '',
            root_cause TEXT NOT NULL,
            domain TEXT NOT NULL,
            root_cause_detail TEXT NOT NULL DEFAULT '',
            fix TEXT NOT NULL DEFAULT '',
            regression TEXT NOT NULL DEFAULT '',
            prevention TEXT NOT NULL DEFAULT '',
            severity TEXT NOT NULL CHECK (severity IN ({severities})),
            status TEXT NOT NULL CHECK (status IN ({statuses})),
            occurred_at TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            author TEXT NOT NULL DEFAULT '',
            job TEXT NOT NULL DEFAULT '{{}}',
            diagnosis_id TEXT,
            evidence_summary TEXT NOT NULL DEFAULT ''
        );
        CREATE INDEX incidents_by_time ON incidents (occurred_at DESC, id);
        CREATE INDEX incidents_by_cause ON incidents (root_cause, status);
        CREATE INDEX incidents_by_domain ON incidents (domain);
        CREATE TABLE incident_tags (
            incident_id TEXT NOT NULL REFERENCES incidents (id) ON DELETE CASCADE ON UPDATE CASCADE,
            position INTEGER NOT NULL,
            tag TEXT NOT NULL,
            PRIMARY KEY (incident_id, tag)
        );
        CREATE INDEX incident_tags_by_tag ON incident_tags (tag);
        CREATE TABLE incident_symptoms (
            incident_id TEXT NOT NULL REFERENCES incidents (id) ON DELETE CASCADE ON UPDATE CASCADE,
            symptom_id TEXT NOT NULL,
            PRIMARY KEY (incident_id, symptom_id)
        );
        CREATE INDEX incident_symptoms_by_symptom ON incident_symptoms (symptom_id);
        -- outbox of the full-text index: every write appends the incident id in the same transaction
        CREATE TABLE index_queue (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            incident_id TEXT NOT NULL,
            queued_at TEXT NOT NULL
        );
        CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """)


def _v2(db: sqlite_utils.Database) -> None:
    db.execute("ALTER TABLE incidents ADD COLUMN version INTEGER NOT NULL DEFAULT 1")


def _v3(db: sqlite_utils.Database) -> None:
    db.execute("ALTER TABLE incidents ADD COLUMN source_url TEXT NOT NULL DEFAULT ''")


def _run_script(db: sqlite_utils.Database, script: str) -> None:
    """Run ``;``-separated statements inside the current transaction (executescript would commit)."""
    for statement in script.split(";"):
        body = "\n".join(line for line in statement.splitlines() if not line.strip().startswith("--"))
        if body.strip():
            db.execute(body)


#: (version, description, function); append new migrations, never edit old ones
MIGRATIONS: list[tuple[int, str, Callable[[sqlite_utils.Database], None]]] = [
    (1, "incidents, tags, symptoms, index queue, meta", _v1),
    (2, "incident version, +1 on every change (optimistic concurrency)", _v2),
    (3, "source_url: where a (public) incident was reported", _v3),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


def connect(path: Path) -> sqlite_utils.Database:
    """Open the database in WAL mode with foreign keys on and a busy timeout for other writers."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    db = sqlite_utils.Database(conn)
    db.execute("PRAGMA foreign_keys = ON")
    db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    db.execute("PRAGMA synchronous = NORMAL")  # durable across process crashes in WAL mode
    if db.journal_mode != "wal":
        for _ in range(50):  # another process may hold the lock while switching
            try:
                db.enable_wal()
                break
            except sqlite3.OperationalError:
                time.sleep(0.1)
    return db


@contextmanager
def write_transaction(db: sqlite_utils.Database) -> Iterator[sqlite_utils.Database]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``: take the write lock up front so readers never deadlock."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.rollback()
        raise
    else:
        db.execute("COMMIT")


def current_version(db: sqlite_utils.Database) -> int:
    """The schema version of ``db`` (0 for a new database)."""
    if "schema_version" not in db.table_names():
        return 0
    row = db.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def migrate(db: sqlite_utils.Database) -> int:
    """Apply the migrations ``db`` lacks; return the schema version reached."""
    db.execute("CREATE TABLE IF NOT EXISTS schema_version "
               "(version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL, description TEXT NOT NULL)")
    for version, description, apply in MIGRATIONS:
        if current_version(db) >= version:
            continue
        with write_transaction(db):
            if current_version(db) >= version:  # another worker got there first
                continue
            apply(db)
            db.execute("INSERT INTO schema_version (version, applied_at, description) "
                       "VALUES (?, strftime('%Y-%m-%dT%H:%M:%SZ', 'now'), ?)", [version, description])
    reached = current_version(db)
    if reached > SCHEMA_VERSION:
        from dsdoctor.kb.incidents import IncidentError

        raise IncidentError(f"the incident database has schema version {reached}, newer than this dsdoctor "
                            f"({SCHEMA_VERSION}); upgrade dsdoctor")
    return reached
