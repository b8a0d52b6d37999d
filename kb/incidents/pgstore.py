"""The PostgreSQL incident backend: the rows of every replica's incidents in one shared database.

The same calls as :class:`kb.incidents.embedded.EmbeddedIncidents`, with no index to keep: each
write stores the record's search columns (:mod:`kb.incidents.pgtext`) in the same row and the same
transaction, so whatever a replica acknowledged is searchable through every replica at once, and
there is no index queue, no index lock and nothing to drain. Writers never wait on one another
except on the same incident's row (``SELECT ... FOR UPDATE`` for a versioned update) and while
seeding or importing, which take a transaction-scoped advisory lock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from dsdoctor.kb.incidents import pgsearch
from dsdoctor.kb.incidents.pgtext import search_columns
from dsdoctor.kb.incidents.record import RECORD_FIELDS, normalise
from dsdoctor.kb.incidents.search import Filters
from dsdoctor.kb.storage.backend import postgres

_COLUMNS = tuple(k for k in RECORD_FIELDS if k not in ("tags", "symptoms"))
#: every column a write sets: the record's, its tags and symptoms, its search columns
WRITE_COLUMNS = (*_COLUMNS, "tags", "symptoms", "text_tsv", "title_tsv", "identifiers")
_SELECT = "SELECT " + ", ".join((*_COLUMNS, "tags", "symptoms")) + " FROM incidents"
_LOCKS = {"incidents-seed": 0x64736901, "incidents-import": 0x64736902}
BATCH = 500


def row_values(record: dict[str, Any]) -> tuple[Any, ...]:
    """The values of :data:`WRITE_COLUMNS` for a normalised record."""
    row = {k: record[k] for k in _COLUMNS}
    row["job"] = json.dumps(record["job"], ensure_ascii=False, sort_keys=True)
    row["tags"] = list(record["tags"])
    row["symptoms"] = list(record["symptoms"])
    row.update(search_columns(record))
    return tuple(row[c] for c in WRITE_COLUMNS)


def _record(row: tuple[Any, ...]) -> dict[str, Any]:
    record = dict(zip(_COLUMNS, row[: len(_COLUMNS)], strict=True))
    record["job"] = json.loads(record["job"] or "{}")
    record["tags"] = list(row[len(_COLUMNS)])
    record["symptoms"] = sorted(row[len(_COLUMNS) + 1])
    return normalise(record)


INSERT = f"INSERT INTO incidents ({', '.join(WRITE_COLUMNS)}) VALUES ({', '.join('?' * len(WRITE_COLUMNS))})"


class PostgresIncidents:
    """Incidents in the ``incidents`` table of ``DSDOCTOR_DATABASE_URL`` (migrated on first use)."""

    dialect = "postgresql"
    #: each thread has its own connection: the store need not serialise its threads
    shared_connection = False

    def __init__(self, url: str):
        self.backend = postgres(url)
        self.integrity_errors = self.backend.integrity_errors
        self.freqs = pgsearch.Frequencies(self.backend)

    def close(self) -> None:
        """Close this thread's connection (the process's backend stays for the other stores)."""
        self.backend.close()

    # ------------------------------------------------------------------ records

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.backend.transaction():
            yield
        self.freqs.forget()  # this process wrote: count again rather than rank by the old counts

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        with self.backend.transaction():
            self.backend.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            yield

    def exclusive(self, name: str) -> None:
        """Wait for, then hold until commit, the advisory lock ``name`` (seeding, importing)."""
        self.backend.execute("SELECT pg_advisory_xact_lock(?)", [_LOCKS[name]])

    def exists(self, incident_id: str) -> bool:
        return self.backend.execute("SELECT 1 FROM incidents WHERE id = ?", [incident_id]).fetchone() is not None

    def insert(self, record: dict[str, Any]) -> None:
        self.backend.execute(INSERT, row_values(record))

    def insert_many(self, records: list[dict[str, Any]], on_conflict: str = "") -> None:
        sql = INSERT.replace("?", "%s") + on_conflict
        for start in range(0, len(records), BATCH):
            with self.backend.conn.raw.cursor() as cur:
                cur.executemany(sql, [row_values(r) for r in records[start : start + BATCH]])

    def replace(self, record: dict[str, Any], expected_version: int) -> bool:
        values = dict(zip(WRITE_COLUMNS, row_values(record), strict=True))
        changed = {k: v for k, v in values.items() if k not in ("id", "version")}
        assignments = ", ".join(f"{k} = ?" for k in changed)
        cursor = self.backend.execute(f"UPDATE incidents SET {assignments}, version = version + 1 "
                                      "WHERE id = ? AND version = ?", [*changed.values(), record["id"], expected_version])
        if cursor.rowcount != 1:
            return False
        record["version"] = expected_version + 1
        return True

    def delete(self, incident_id: str) -> bool:
        return bool(self.backend.execute("DELETE FROM incidents WHERE id = ?", [incident_id]).rowcount)

    def fetch(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        wanted = list(dict.fromkeys(ids))
        out: dict[str, dict[str, Any]] = {}
        for start in range(0, len(wanted), BATCH):
            for row in self.backend.execute(f"{_SELECT} WHERE id = ANY(?)", [wanted[start : start + BATCH]]):
                out[row[0]] = _record(row)
        return out

    def fetch_for_update(self, incident_id: str) -> dict[str, Any] | None:
        """The record, its row locked until the transaction ends (a concurrent update waits, then sees
        the new version)."""
        row = self.backend.execute(f"{_SELECT} WHERE id = ? FOR UPDATE", [incident_id]).fetchone()
        return None if row is None else _record(row)

    def iterate(self, batch: int = 2000) -> Iterator[dict[str, Any]]:
        last = ""
        while True:
            rows = self.backend.execute(f'{_SELECT} WHERE id COLLATE "C" > ? ORDER BY id COLLATE "C" LIMIT ?',
                                        [last, batch]).fetchall()
            if not rows:
                return
            for row in rows:
                yield _record(row)
            last = rows[-1][0]

    def count(self) -> int:
        return int(self.backend.execute("SELECT count(*) FROM incidents").fetchone()[0])

    def any_incident(self) -> bool:
        return self.backend.execute("SELECT 1 FROM incidents LIMIT 1").fetchone() is not None

    def meta(self, key: str) -> str | None:
        row = self.backend.execute("SELECT value FROM incident_meta WHERE key = ?", [key]).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        self.backend.execute("INSERT INTO incident_meta (key, value) VALUES (?, ?) "
                             "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value", [key, value])

    def site_cause_counts(self) -> dict[str, int]:
        # the seed examples and the public incidents ship with dsdoctor: not this site's history
        rows = self.backend.execute(
            "SELECT root_cause, count(*) FROM incidents WHERE status = 'resolved' AND NOT starts_with(id, 'INC-SEED-') "
            "AND NOT starts_with(id, 'PUB-') GROUP BY root_cause ORDER BY root_cause").fetchall()
        return {cause: int(n) for cause, n in rows}

    # ------------------------------------------------------------------ search

    def before_read(self) -> None:
        """Nothing to catch up: the rows are the index."""

    def sync(self, timeout: float) -> None:
        """Nothing to wait for: the write's own transaction made it searchable."""

    def browse(self, filters: Filters, limit: int, cursor: str | None) -> dict[str, Any]:
        return pgsearch.browse(self.backend, filters, limit, cursor)

    def ranked(self, q: str, filters: Filters, limit: int, cursor: str | None) -> dict[str, Any]:
        return pgsearch.ranked(self.backend, self.freqs, q, filters, limit, cursor)

    def symptom_matches(self, symptoms: Iterable[str], exclude: str | None) -> dict[str, float]:
        return pgsearch.symptom_matches(self.backend, symptoms, exclude)

    def text_matches(self, text: str, exclude: str | None) -> dict[str, float]:
        return pgsearch.text_matches(self.backend, self.freqs, text, exclude)

    def data_version(self) -> None:
        """None: another replica may change the incidents at any time, so nothing is memoised."""
        return None

    def index_lag(self) -> int:
        return 0

    def reindex(self, procs: int | None = None) -> int:
        """Recompute every row's search columns (after the analyzer changed); return how many."""
        done = 0
        ids = [r[0] for r in self.backend.execute("SELECT id FROM incidents").fetchall()]
        for start in range(0, len(ids), BATCH):
            records = self.fetch(ids[start : start + BATCH])
            with self.backend.transaction(), self.backend.conn.raw.cursor() as cur:
                cur.executemany("UPDATE incidents SET text_tsv = %s, title_tsv = %s, identifiers = %s WHERE id = %s",
                                [(*search_columns(r).values(), r["id"]) for r in records.values()])
            done += len(records)
        self.freqs.forget()
        return done

    def warm_up(self) -> None:
        from dsdoctor.kb.incidents.analyzer import warm_up

        warm_up()
        self.count()
