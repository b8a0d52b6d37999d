"""Signed-in browser sessions, kept on the server so that signing out ends them.

The session cookie is Flask's signed cookie; on its own, a copy of it stays valid after the
browser signs out. Each sign-in therefore records a random session id here
(``DSDOCTOR_HOME/web-sessions.db``, only the id's SHA-256 stored); a page is served to a cookie
only while its id is recorded, younger than ``MAX_AGE``, and for the token it was made with.
Signing out deletes the record: the copied cookie stops working at once, in every worker.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
import sqlite3
from pathlib import Path

FILE_NAME = "web-sessions.db"
MAX_AGE = dt.timedelta(days=7)
_SCHEMA = ("CREATE TABLE IF NOT EXISTS sessions (id_sha256 TEXT PRIMARY KEY, token_sha256 TEXT NOT NULL, "
           "created_at TEXT NOT NULL)")


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("utf-8", "replace")).hexdigest()


def _stamp(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class SessionStore:
    """The server-side record of signed-in sessions of one data directory."""

    def __init__(self, home: Path):
        self.path = Path(home) / FILE_NAME

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 10000")
        conn.execute(_SCHEMA)
        return conn

    def start(self, token_sha256: str) -> str:
        """Record a new session for a token; return its id (kept in the cookie). Expired ones go."""
        session_id = secrets.token_urlsafe(32)
        now = dt.datetime.now(dt.UTC)
        conn = self._connect()
        try:
            conn.execute("DELETE FROM sessions WHERE created_at < ?", (_stamp(now - MAX_AGE),))
            conn.execute("INSERT INTO sessions VALUES (?, ?, ?)", (_digest(session_id), token_sha256, _stamp(now)))
        finally:
            conn.close()
        return session_id

    def valid(self, session_id: str, token_sha256: str) -> bool:
        """True while the session is recorded, younger than MAX_AGE and made for this token."""
        if not self.path.exists():
            return False
        conn = self._connect()
        try:
            row = conn.execute("SELECT token_sha256, created_at FROM sessions WHERE id_sha256 = ?",
                               (_digest(session_id),)).fetchone()
        finally:
            conn.close()
        oldest = _stamp(dt.datetime.now(dt.UTC) - MAX_AGE)
        return row is not None and secrets.compare_digest(row[0], token_sha256) and row[1] >= oldest

    def end(self, session_id: str) -> None:
        """Forget a session (sign-out)."""
        if not self.path.exists():
            return
        conn = self._connect()
        try:
            conn.execute("DELETE FROM sessions WHERE id_sha256 = ?", (_digest(session_id),))
        finally:
            conn.close()
