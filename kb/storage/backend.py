"""The two database backends of the storage layer, behind one small interface.

``SqliteBackend``: one embedded file in the data directory (the default, as before).
``PostgresBackend``: one PostgreSQL database shared by every replica (``DSDOCTOR_DATABASE_URL``),
through psycopg 3. Both hand out this thread's connection, kept open between requests, with
``execute(sql, params)`` taking ``?`` placeholders, and a ``transaction()`` that takes the write lock
up front (SQLite ``BEGIN IMMEDIATE``; PostgreSQL row locks, so replicas never wait on one writer).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dsdoctor.kb.errors import DsdoctorError
from dsdoctor.kb.storage.settings import database_url

SQLITE_BUSY_MS = 15000
PG_CONNECT_TIMEOUT_S = 10


class StorageError(DsdoctorError):
    """The database cannot be reached or used; the message says which and why (a 503 in the API)."""

    http_status = 503


class Backend:
    """What a store needs from a database: this thread's connection and the dialect's errors."""

    dialect = ""
    #: exception classes raised when a UNIQUE or PRIMARY KEY constraint refuses a row
    integrity_errors: tuple[type[BaseException], ...] = ()
    #: exception classes of a database that is unreachable, locked or read-only
    operational_errors: tuple[type[BaseException], ...] = ()
    #: exception classes of a value the database cannot hold
    data_errors: tuple[type[BaseException], ...] = ()

    def __init__(self) -> None:
        self._local = threading.local()

    def _open(self) -> Any:
        raise NotImplementedError

    def _usable(self, conn: Any) -> bool:
        return True

    @property
    def conn(self) -> Any:
        """This thread's connection (reopened after a fork or a lost connection)."""
        held = getattr(self._local, "held", None)
        if held is None or held[0] != os.getpid() or not self._usable(held[1]):
            held = self._local.held = (os.getpid(), self._open())
        return held[1]

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement with ``?`` placeholders; return the cursor."""
        return self.conn.execute(sql, params)

    def close(self) -> None:
        """Close this thread's connection (the next use opens a new one)."""
        held = getattr(self._local, "held", None)
        self._local.held = None
        if held is not None and held[0] == os.getpid():
            held[1].close()

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        raise NotImplementedError
        yield

    def exists(self) -> bool:
        """True when the database was ever created (a missing SQLite file means empty)."""
        return True


class SqliteBackend(Backend):
    """One SQLite file (WAL, busy timeout), as dsdoctor has always stored things on one machine."""

    dialect = "sqlite"
    integrity_errors = (sqlite3.IntegrityError,)
    operational_errors = (sqlite3.OperationalError,)

    def __init__(self, path: Path, busy_ms: int = SQLITE_BUSY_MS):
        super().__init__()
        self.path = Path(path)
        self.busy_ms = busy_ms

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=self.busy_ms / 1000, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {self.busy_ms}")
        conn.execute("PRAGMA synchronous = NORMAL")  # WAL: durable at checkpoints, never corrupt
        return conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def exists(self) -> bool:
        return self.path.exists()


class _PgConnection:
    """A psycopg connection that takes ``?`` placeholders like sqlite3 (none of our SQL holds a literal ``?``)."""

    def __init__(self, raw: Any):
        self.raw = raw

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.raw.execute(sql.replace("?", "%s"), list(params))

    def close(self) -> None:
        self.raw.close()


class PostgresBackend(Backend):
    """One PostgreSQL database for every replica (autocommit; explicit transactions where needed).

    A connection lost under a statement (a restarted server, a failover) is reopened by the next use;
    a read is retried once at once, a write is a StorageError: it may or may not have committed."""

    dialect = "postgresql"

    def __init__(self, url: str):
        super().__init__()
        import psycopg

        self.url = url
        self._psycopg = psycopg
        self.integrity_errors = (psycopg.errors.IntegrityError,)
        self.operational_errors = (psycopg.OperationalError,)
        self.data_errors = (psycopg.DataError,)

    def _open(self) -> _PgConnection:
        try:
            raw = self._psycopg.connect(self.url, autocommit=True, connect_timeout=PG_CONNECT_TIMEOUT_S,
                                        application_name="dsdoctor")
        except self._psycopg.Error as exc:
            raise StorageError(f"cannot connect to DSDOCTOR_DATABASE_URL ({redact_url(self.url)}): "
                               f"{str(exc).strip()}") from None
        return _PgConnection(raw)

    def _usable(self, conn: _PgConnection) -> bool:
        return not (conn.raw.closed or conn.raw.broken)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        conn = self.conn
        try:
            return conn.execute(sql, params)
        except self._psycopg.OperationalError as exc:
            failure = exc
            if not self._usable(conn) and sql.lstrip()[:6].upper() == "SELECT":
                try:
                    return self.conn.execute(sql, params)  # a new connection: reads are safe to repeat
                except self._psycopg.OperationalError as again:
                    failure = again
        raise StorageError(f"the database at {redact_url(self.url)} failed: {str(failure).strip()}")

    @contextmanager
    def transaction(self) -> Iterator[_PgConnection]:
        conn = self.conn
        with conn.raw.transaction():
            yield conn


def redact_url(url: str) -> str:
    """``url`` without its password (for messages and logs)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def check_url(url: str) -> str:
    """``url`` when it names PostgreSQL; a clear error otherwise."""
    if not url.startswith(("postgresql://", "postgres://")):
        raise StorageError(f"DSDOCTOR_DATABASE_URL={redact_url(url)!r}: write postgresql://USER@HOST:PORT/DBNAME "
                           "(or leave it unset for the SQLite files in DSDOCTOR_HOME)")
    return url


_shared: dict[str, PostgresBackend] = {}
_shared_lock = threading.Lock()


def postgres(url: str) -> PostgresBackend:
    """The process's backend for ``url`` (one per URL, each thread with its own connection), migrated."""
    from dsdoctor.kb.storage.migrations import migrate

    with _shared_lock:
        backend = _shared.get(url)
        if backend is None:
            backend = PostgresBackend(check_url(url))
            migrate(backend)
            _shared[url] = backend
    return backend


def forget(url: str) -> None:
    """Drop the process's backend for ``url`` (closing this thread's connection): tests, shutdown."""
    with _shared_lock:
        backend = _shared.pop(url, None)
    if backend is not None:
        backend.close()


_files: dict[Path, SqliteBackend] = {}


def for_file(home: Path, file_name: str) -> Backend:
    """The backend of one store: PostgreSQL when ``DSDOCTOR_DATABASE_URL`` is set, else ``home/file_name``
    (one backend per file and process, so each thread keeps its connection open across requests:
    closing the last connection of a WAL database checkpoints it, a disk sync per request)."""
    url = database_url()
    if url:
        return postgres(url)
    path = Path(home) / file_name
    with _shared_lock:
        return _files.setdefault(path, SqliteBackend(path))
