"""The embedded incident backend: SQLite records (sqlite-utils) and the derived Whoosh index.

What :class:`kb.incidents.store.IncidentStore` asks of a backend, over the modules that have always
done it (:mod:`~kb.incidents.tables`, :mod:`~kb.incidents.indexer`, :mod:`~kb.incidents.search`,
:mod:`~kb.incidents.similar`). :mod:`kb.incidents.pgstore` answers the same calls on PostgreSQL.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from dsdoctor.kb.incidents import IncidentError, search, tables
from dsdoctor.kb.incidents import similar as similarity
from dsdoctor.kb.incidents.analyzer import warm_up
from dsdoctor.kb.incidents.indexer import Indexer
from dsdoctor.kb.incidents.migrations import connect, migrate, write_transaction

DB_FILE = "incidents.db"
INDEX_DIR = "incidents-index"
LOCK_FILE = "incidents-index.lock"
T = TypeVar("T")


class EmbeddedIncidents:
    """Incidents in ``home/incidents.db``, searched through the Whoosh index in ``home/incidents-index``."""

    dialect = "sqlite"
    integrity_errors: tuple[type[BaseException], ...] = (sqlite3.IntegrityError,)
    #: one connection shared by the store's threads, so the store serialises them
    shared_connection = True

    def __init__(self, home: Path):
        self.home = home
        try:
            self.db = connect(home / DB_FILE)
            migrate(self.db)
            self.indexer = Indexer(home / DB_FILE, home / INDEX_DIR, home / LOCK_FILE)
        except sqlite3.DatabaseError as exc:
            raise IncidentError(f"{home / DB_FILE} cannot be used as the incident database: {exc} "
                                f"(restore it from a backup or move it away to start empty)") from None

    @staticmethod
    def exists_in(home: Path) -> bool:
        return (Path(home) / DB_FILE).exists()

    def close(self) -> None:
        self.indexer.close()
        self.db.close()

    # ------------------------------------------------------------------ records

    def transaction(self) -> Any:
        """A write transaction (``BEGIN IMMEDIATE``: every other writer waits)."""
        return write_transaction(self.db)

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One consistent read of several statements."""
        self.db.execute("BEGIN")
        try:
            yield
        finally:
            self.db.execute("COMMIT")

    def exclusive(self, name: str) -> None:
        """Serialise this transaction with others taking ``name`` (SQLite's write lock already does)."""

    def exists(self, incident_id: str) -> bool:
        return tables.exists(self.db, incident_id)

    def insert(self, record: dict[str, Any]) -> None:
        tables.insert(self.db, record)

    def insert_many(self, records: list[dict[str, Any]]) -> None:
        tables.insert_many(self.db, records)

    def replace(self, record: dict[str, Any], expected_version: int) -> bool:
        return tables.replace(self.db, record, expected_version)

    def delete(self, incident_id: str) -> bool:
        return tables.delete(self.db, incident_id)

    def fetch(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        return tables.fetch(self.db, ids)

    def fetch_for_update(self, incident_id: str) -> dict[str, Any] | None:
        return tables.fetch(self.db, [incident_id]).get(incident_id)

    def iterate(self) -> Iterator[dict[str, Any]]:
        return tables.iterate(self.db)

    def count(self) -> int:
        return tables.count(self.db)

    def any_incident(self) -> bool:
        return self.db.execute("SELECT 1 FROM incidents LIMIT 1").fetchone() is not None

    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM store_meta WHERE key = ?", [key]).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        self.db["store_meta"].insert({"key": key, "value": value}, replace=True)

    def site_cause_counts(self) -> dict[str, int]:
        # the seed examples and the public incidents ship with dsdoctor: not this site's history
        rows = self.db.execute("SELECT root_cause, COUNT(*) FROM incidents WHERE status = 'resolved' "
                               "AND id NOT LIKE 'INC-SEED-%' AND id NOT LIKE 'PUB-%' GROUP BY root_cause "
                               "ORDER BY root_cause").fetchall()
        return {cause: int(n) for cause, n in rows}

    # ------------------------------------------------------------------ search

    def before_read(self) -> None:
        """Catch the index up without waiting (after a crash the next search finishes the work)."""
        self.indexer.drain(blocking=False)

    def sync(self, timeout: float) -> None:
        """Bring the index up to date before a write returns (it stays queued if the wait times out)."""
        self.indexer.drain(blocking=True, timeout=timeout)

    def browse(self, filters: search.Filters, limit: int, cursor: str | None) -> dict[str, Any]:
        return search.browse(self.db, filters, limit, cursor)

    def ranked(self, q: str, filters: search.Filters, limit: int, cursor: str | None) -> dict[str, Any]:
        return self._fresh(lambda: search.ranked(self.indexer, q, filters, limit, cursor))

    def symptom_matches(self, symptoms: Iterable[str], exclude: str | None) -> dict[str, float]:
        return similarity.symptom_matches(self.db, symptoms, exclude)

    def text_matches(self, text: str, exclude: str | None) -> dict[str, float]:
        return self._fresh(lambda: similarity.text_matches(self.indexer, text, exclude=exclude))

    def data_version(self) -> tuple[int, int] | None:
        """Equal values mean unchanged incidents and index: rows this connection changed, and commits of
        any other connection or process (SQLite's data_version; the indexer writes through its own)."""
        return self.db.conn.total_changes, self.db.execute("PRAGMA data_version").fetchone()[0]

    def index_lag(self) -> int:
        return self.indexer.lag()

    def reindex(self, procs: int | None = None) -> int:
        return self.indexer.rebuild(procs=procs)

    def warm_up(self) -> None:
        warm_up(self.home / "cache")
        self.indexer.drain(blocking=False)
        self.indexer.searcher()

    def _fresh(self, run: Callable[[], T]) -> T:
        """Run a search; once more on a reopened index if another process replaced its files."""
        try:
            return run()
        except (OSError, EOFError):
            self.indexer.reset_searcher()
            return run()
