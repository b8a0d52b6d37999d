"""The Whoosh index of incidents: one writer at a time, catching up from SQLite by itself.

Design (several server workers, one index directory):

* SQLite is the truth. Every write appends the incident id to ``index_queue`` (an outbox) in
  the same transaction, so nothing acknowledged can be missed by the index.
* Whoever holds the index lock (``fcntl.flock`` on ``incidents-index.lock``) drains the queue:
  it reads a batch of ids, reads those records *after* reading the queue, updates or deletes
  their documents, commits the index, then deletes exactly the queue rows it handled. A crash
  at any point leaves rows in the queue and the next drain redoes them (updates are idempotent).
* Writers (``add``/``update``/``delete``) drain with a blocking lock before they return, so an
  acknowledged change is searchable; searches drain without blocking first, so after a crash
  the index catches up on the next search.
* ``rebuild`` reads a snapshot of SQLite and rewrites the whole index in one commit (in parallel
  processes for large stores); queue rows older than the snapshot are dropped, newer ones stay.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from whoosh import fields, index
from whoosh.writing import CLEAR

from dsdoctor.kb.incidents import IncidentError, tables
from dsdoctor.kb.incidents.analyzer import BilingualAnalyzer, sections
from dsdoctor.kb.incidents.migrations import connect

#: bump when the schema or the analyzer changes: the index is then rebuilt from SQLite
INDEX_FORMAT = "dsdoctor-incidents-3"
FORMAT_FILE = "dsdoctor-format"
TEXT_FIELDS = ("text", "title")
#: weight of each part of a record in the ``text`` field (title > phenomenon, root cause > the rest)
WEIGHTS = {"title": 3, "phenomenon": 2, "cause": 2, "body": 1}
DRAIN_BATCH = 500
PARALLEL_MIN_DOCS = 5_000
#: a queue longer than this is rebuilt (in parallel) rather than drained document by document
REBUILD_THRESHOLD = 5000


def build_schema() -> fields.Schema:
    """The index schema: one weighted text field (plus the title alone), keywords for filters and facets.

    All text goes into ``text``, one posting list per term: the title's terms weigh 3, the
    phenomenon's and the root cause's 2, the rest 1 (Whoosh BM25 sums token weights). That is
    about twice as fast to build and to search as one field per part joined with OR.
    """
    analyzer = BilingualAnalyzer()
    return fields.Schema(
        id=fields.ID(stored=True, unique=True, sortable=True),
        text=fields.TEXT(analyzer=analyzer, phrase=True),
        title=fields.TEXT(analyzer=analyzer, phrase=True),
        root_cause=fields.ID(sortable=True),
        domain=fields.ID(sortable=True),
        severity=fields.ID(sortable=True),
        status=fields.ID(sortable=True),
        tags=fields.KEYWORD(commas=True, lowercase=True),
        occurred_at=fields.ID(sortable=True),
    )


def body_text(record: dict[str, Any]) -> str:
    """The text of a record that weighs 1: scope, fix, regression, prevention, evidence, tags, job."""
    job = record.get("job") or {}
    job_text = " ".join(str(v) for k, v in job.items() if k != "versions")
    versions = " ".join(f"{k} {v}" for k, v in (job.get("versions") or {}).items())
    return "\n".join(part for part in (
        record["scope"], record["fix"], record["regression"], record["prevention"],
        record["evidence_summary"], " ".join(record["tags"]), record["author"], job_text, versions,
        record.get("diagnosis_id") or "", " ".join(record["symptoms"]),
    ) if part)


def document(record: dict[str, Any]) -> dict[str, str]:
    """The index document of a record."""
    return {
        "id": record["id"],
        "text": sections([
            (WEIGHTS["title"], record["title"]),
            (WEIGHTS["phenomenon"], record["phenomenon"]),
            (WEIGHTS["cause"], f"{record['root_cause']}\n{record['root_cause_detail']}"),
            (WEIGHTS["body"], body_text(record)),
        ]),
        "title": record["title"],
        "root_cause": record["root_cause"],
        "domain": record["domain"],
        "severity": record["severity"],
        "status": record["status"],
        "tags": ",".join(record["tags"]),
        "occurred_at": record["occurred_at"],
    }


class IndexLock:
    """An exclusive lock across processes and threads (one ``flock`` per acquisition)."""

    def __init__(self, path: Path):
        self.path = path

    @contextmanager
    def hold(self, blocking: bool, timeout: float = 60.0) -> Iterator[bool]:
        """Yield True while holding the lock, False when it was not obtained."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        got = False
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    got = True
                    break
                except BlockingIOError:
                    if not blocking or time.monotonic() >= deadline:
                        break
                    time.sleep(0.01)
            yield got
        finally:
            if got:
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


class Indexer:
    """Maintains the index directory from the SQLite database at ``db_path``."""

    def __init__(self, db_path: Path, index_dir: Path, lock_path: Path):
        self.db_path = db_path
        self.index_dir = index_dir
        self.lock = IndexLock(lock_path)
        self._db = connect(db_path)  # this indexer's own connection (snapshots, queue)
        self._guard = threading.RLock()
        self._ix: Any = None
        self._searcher: Any = None

    # ------------------------------------------------------------------ opening

    def _usable(self) -> bool:
        marker = self.index_dir / FORMAT_FILE
        return (index.exists_in(str(self.index_dir)) and marker.exists()
                and marker.read_text(encoding="utf-8").strip() == INDEX_FORMAT)

    def index(self) -> Any:
        """The open index; built from SQLite first when missing or of an older format."""
        with self._guard:
            if self._ix is not None:
                return self._ix
        if not self._usable():
            with self.lock.hold(blocking=True, timeout=600) as got:  # lock order: file lock, then guard
                if not got:
                    raise IncidentError("timed out waiting for another process building the index")
                with self._guard:
                    if not self._usable():
                        self._rebuild_locked(fresh=True)
        with self._guard:
            if self._ix is None:
                self._ix = index.open_dir(str(self.index_dir))
            return self._ix

    def searcher(self) -> Any:
        """A searcher on the latest committed index (re-used while the index is unchanged)."""
        ix = self.index()
        with self._guard:
            # Not Searcher.refresh(): in Whoosh-Reloaded 2.7.5 it keeps the readers of segments a
            # merge replaced, so every merged document shows up twice. Open a new searcher instead.
            # The old one is not closed here: another thread may still be reading it; its files close
            # when the last reference goes.
            if self._searcher is not None and self._searcher.reader().generation() != ix.latest_generation():
                self._searcher = None
            if self._searcher is None:
                self._searcher = ix.searcher()
            return self._searcher

    def reset_searcher(self) -> None:
        """Forget the cached searcher (after an error reading files another process replaced)."""
        with self._guard:
            self._searcher = None
            self._ix = None

    def close(self) -> None:
        """Close the searcher and this indexer's database connection."""
        with self._guard:
            if self._searcher is not None:
                with suppress(Exception):
                    self._searcher.close()
        self.reset_searcher()
        self._db.close()

    # ------------------------------------------------------------------ queue

    def lag(self) -> int:
        """Queued changes not yet in the index."""
        with self._guard:
            return int(self._db.execute("SELECT COUNT(*) FROM index_queue").fetchone()[0])

    def drain(self, blocking: bool, timeout: float = 30.0) -> bool:
        """Index every queued change; False when another process holds the lock (non-blocking).

        A backlog longer than ``REBUILD_THRESHOLD`` (a bulk import) is cheaper to rebuild in
        parallel than to apply document by document, so it is rebuilt instead.
        """
        self.index()
        with self.lock.hold(blocking=blocking, timeout=timeout) as got:
            if not got:
                return False
            with self._guard:
                if self.lag() > REBUILD_THRESHOLD:
                    self._rebuild_locked(fresh=False)
                    self._ix = index.open_dir(str(self.index_dir))
                self._drain_locked()
            return True

    def _drain_locked(self) -> None:
        ix = self._ix or index.open_dir(str(self.index_dir))
        while True:
            rows = self._db.execute("SELECT seq, incident_id FROM index_queue ORDER BY seq LIMIT ?",
                                    [DRAIN_BATCH]).fetchall()
            if not rows:
                return
            ids = list(dict.fromkeys(r[1] for r in rows))
            records = tables.fetch(self._db, ids)  # read after the queue: at least as new as the change
            writer = ix.writer(timeout=30.0)
            try:
                for incident_id in ids:
                    if incident_id in records:
                        writer.update_document(**document(records[incident_id]))
                    else:
                        writer.delete_by_term("id", incident_id)
            except BaseException:
                writer.cancel()
                raise
            writer.commit()
            self._db.execute("DELETE FROM index_queue WHERE seq <= ?", [rows[-1][0]])

    # ------------------------------------------------------------------ rebuild

    def rebuild(self, procs: int | None = None, progress: Callable[[int], None] | None = None) -> int:
        """Rewrite the whole index from SQLite; return the number of incidents indexed."""
        with self.lock.hold(blocking=True, timeout=600) as got:
            if not got:
                raise IncidentError("timed out waiting for the index lock (another process is indexing)")
            with self._guard:
                count = self._rebuild_locked(fresh=not self._usable(), procs=procs, progress=progress)
                self._ix = index.open_dir(str(self.index_dir))
                return count

    def _rebuild_locked(self, fresh: bool, procs: int | None = None,
                        progress: Callable[[int], None] | None = None) -> int:
        if fresh:
            if self.index_dir.exists():
                shutil.rmtree(self.index_dir)
            self.index_dir.mkdir(parents=True)
            ix = index.create_in(str(self.index_dir), build_schema())
        else:
            ix = index.open_dir(str(self.index_dir))
        db = self._db
        db.execute("BEGIN")  # a read snapshot: the queue position and the rows agree
        try:
            last_seq = int(db.execute("SELECT COALESCE(MAX(seq), 0) FROM index_queue").fetchone()[0])
            total = tables.count(db)
            procs = procs if procs is not None else (os.cpu_count() or 1)
            parallel = procs > 1 and total >= PARALLEL_MIN_DOCS
            writer = (ix.writer(procs=procs, batchsize=256, multisegment=True, limitmb=256) if parallel
                      else ix.writer(limitmb=256))
            done = 0
            try:
                for record in tables.iterate(db):
                    writer.add_document(**document(record))
                    done += 1
                    if progress and done % 1000 == 0:
                        progress(1000)
            except BaseException:
                writer.cancel()
                raise
            writer.commit(mergetype=CLEAR)
        finally:
            db.execute("COMMIT")
        if progress and done % 1000:
            progress(done % 1000)
        (self.index_dir / FORMAT_FILE).write_text(INDEX_FORMAT + "\n", encoding="utf-8")
        db.execute("DELETE FROM index_queue WHERE seq <= ?", [last_seq])
        return done
