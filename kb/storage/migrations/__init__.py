"""Schema migrations of the PostgreSQL store: plain SQL files, ``NNNN_name.sql``, applied in order.

Plain SQL reads like the schema it makes and needs no ORM for a handful of tables. Each file runs
once, in one transaction with its row in ``schema_version``; replicas starting at once serialise on
an advisory lock, so every migration applies exactly once. Append new files, never edit old ones.
(The embedded SQLite files keep their own schema code, which older data directories depend on.)
"""

from __future__ import annotations

import re
from importlib import resources

from dsdoctor.kb.storage.backend import Backend, StorageError

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LOCK_KEY = 0x64736463  # "dsdc": the advisory lock every replica takes while migrating


def migration_files(dialect: str = "postgresql") -> list[tuple[int, str, str]]:
    """(version, name, SQL) of every migration of ``dialect``, in order."""
    found = []
    for entry in resources.files(__package__).joinpath(dialect).iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    found.sort()
    if [v for v, _, _ in found] != list(range(1, len(found) + 1)):
        raise StorageError(f"migrations of {dialect} are not numbered 0001, 0002, ... without gaps")
    return found


def current_version(backend: Backend) -> int:
    row = backend.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
    return int(row[0])


def migrate(backend: Backend) -> int:
    """Apply the migrations the database lacks; return the schema version reached."""
    files = migration_files(backend.dialect)
    with backend.transaction():
        backend.execute(f"SELECT pg_advisory_xact_lock({_LOCK_KEY})")
        backend.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
                        "name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        reached = current_version(backend)
        if reached > len(files):
            raise StorageError(f"the database has schema version {reached}, newer than this dsdoctor "
                               f"({len(files)}); upgrade dsdoctor")
        for version, name, sql in files[reached:]:
            backend.conn.raw.execute(sql)
            backend.execute("INSERT INTO schema_version (version, name) VALUES (?, ?)", (version, name))
    return current_version(backend)
