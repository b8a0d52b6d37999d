"""Signed-in browser sessions, kept on the server so that signing out ends them.

The session cookie is Flask's signed cookie; on its own, a copy of it stays valid after the
browser signs out. Each sign-in therefore records a random session id here
(``DSDOCTOR_HOME/web-sessions.db``, or the fleet's PostgreSQL; only the id's SHA-256 stored); a page is served to a cookie
only while its id is recorded, younger than ``MAX_AGE``, and for the token it was made with.
Signing out deletes the record: the copied cookie stops working at once, in every worker (and, on
PostgreSQL, on every replica).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from pathlib import Path

from dsdoctor.kb.storage.backend import Backend, SqliteBackend, postgres
from dsdoctor.kb.storage.backend import for_file as backend_for
from dsdoctor.kb.storage.settings import database_url

FILE_NAME = "web-sessions.db"
MAX_AGE = dt.timedelta(days=7)
_SCHEMA = ("CREATE TABLE IF NOT EXISTS sessions (id_sha256 TEXT PRIMARY KEY, token_sha256 TEXT NOT NULL, "
           "created_at TEXT NOT NULL)")


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "replace")).hexdigest()


def _stamp(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class SessionStore:
    """The server-side record of signed-in sessions of one data directory (or of the fleet)."""

    def __init__(self, home: Path):
        self.path = Path(home) / FILE_NAME
        self.backend = backend_for(home, FILE_NAME)
        self.table = "sessions" if isinstance(self.backend, SqliteBackend) else "web_sessions"

    def _ready(self) -> Backend:
        if isinstance(self.backend, SqliteBackend):
            self.backend.execute(_SCHEMA)
        return self.backend

    def start(self, token_sha256: str) -> str:
        """Record a new session for a token; return its id (kept in the cookie). Expired ones go."""
        session_id = secrets.token_urlsafe(32)
        now = dt.datetime.now(dt.UTC)
        db = self._ready()
        db.execute(f"DELETE FROM {self.table} WHERE created_at < ?", (_stamp(now - MAX_AGE),))
        db.execute(f"INSERT INTO {self.table} (id_sha256, token_sha256, created_at) VALUES (?, ?, ?)",
                   (_digest(session_id), token_sha256, _stamp(now)))
        return session_id

    def valid(self, session_id: str, token_sha256: str) -> bool:
        """True while the session is recorded, younger than MAX_AGE and made for this token."""
        if not self.backend.exists():
            return False
        row = self._ready().execute(f"SELECT token_sha256, created_at FROM {self.table} WHERE id_sha256 = ?",
                                    (_digest(session_id),)).fetchone()
        oldest = _stamp(dt.datetime.now(dt.UTC) - MAX_AGE)
        return row is not None and secrets.compare_digest(row[0], token_sha256) and row[1] >= oldest

    def end(self, session_id: str) -> None:
        """Forget a session (sign-out)."""
        if not self.backend.exists():
            return
        self._ready().execute(f"DELETE FROM {self.table} WHERE id_sha256 = ?", (_digest(session_id),))


def shared_secret_key() -> bytes | None:
    """The fleet's session signing key from PostgreSQL (made by the first replica to ask), or None on the
    embedded store, where each data directory keeps its own key file."""
    url = database_url()
    if not url:
        return None
    db = postgres(url)
    db.execute("INSERT INTO web_secret (id, key_hex) VALUES (1, ?) ON CONFLICT (id) DO NOTHING",
               (secrets.token_bytes(32).hex(),))
    return bytes.fromhex(db.execute("SELECT key_hex FROM web_secret WHERE id = 1").fetchone()[0])
