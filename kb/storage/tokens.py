"""API bearer tokens: created once, stored only as SHA-256 hashes in ``DSDOCTOR_HOME/tokens.db`` (or the
shared PostgreSQL database of a fleet).

A token is ``dsd_`` plus 32 random bytes (URL-safe base64): with that much entropy a plain
SHA-256 is as good as a slow password hash. Verification compares the hash with every stored
hash using :func:`hmac.compare_digest` (no early exit), so timing says nothing about a near miss.
A token may carry an expiry (``--expires 30d``); after it the token is refused like a revoked one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import hmac
import os
import re
import secrets
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from dsdoctor.kb.errors import DsdoctorError
from dsdoctor.kb.storage.backend import Backend, SqliteBackend
from dsdoctor.kb.storage.backend import for_file as backend_for
from dsdoctor.kb.storage.scopes import SCOPES

TOKEN_PREFIX = "dsd_"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
FILE_NAME = "tokens.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    name TEXT PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    prefix TEXT NOT NULL,
    scopes TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT
)
"""
_DURATION = re.compile(r"^(\d{1,6})([mhdw])$")
_UNIT_S = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class TokenInfo:
    """A stored token, without the secret."""

    name: str
    scopes: tuple[str, ...]
    created_at: str
    prefix: str
    expires_at: str | None = None

    def allows(self, scope: str) -> bool:
        """True when the token carries ``scope`` (``admin`` carries every scope)."""
        return scope in self.scopes or "admin" in self.scopes


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_duration(text: str) -> dt.timedelta:
    """``30d``, ``12h``, ``90m``, ``2w`` -> a timedelta; anything else is an error saying what to write."""
    found = _DURATION.match((text or "").strip())
    if not found or int(found.group(1)) == 0:
        raise DsdoctorError(f"--expires {text!r}: write a number and a unit, e.g. 90m, 12h, 30d or 2w")
    return dt.timedelta(seconds=int(found.group(1)) * _UNIT_S[found.group(2)])


def is_expired(expires_at: str | None, now: str | None = None) -> bool:
    """True once ``expires_at`` (a UTC timestamp; None: never) has passed (timestamps sort as text)."""
    return bool(expires_at) and (now or _now()) >= str(expires_at)


def hash_token(token: str) -> str:
    """The stored form of a token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def parse_scopes(raw: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``"diagnose,incidents:read"`` -> ("diagnose", "incidents:read"); unknown scopes are an error."""
    items = raw.split(",") if isinstance(raw, str) else [s for part in raw for s in part.split(",")]
    scopes = tuple(dict.fromkeys(s.strip() for s in items if s.strip()))
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown or not scopes:
        what = f"unknown scope {', '.join(map(repr, unknown))}" if unknown else "no scope given"
        raise DsdoctorError(f"{what}; scopes are: {', '.join(SCOPES)} (comma-separated)")
    return scopes


class TokenStore:
    """The token table of one data directory (``tokens.db``), or of the shared PostgreSQL database."""

    def __init__(self, home: Path):
        self.path = Path(home) / FILE_NAME
        self.backend = backend_for(home, FILE_NAME)

    def _ready(self) -> Backend:
        """The backend with its table present (SQLite: created on first use, as before)."""
        if isinstance(self.backend, SqliteBackend):
            conn = self.backend.conn
            conn.execute(_SCHEMA)
            if "expires_at" not in {row[1] for row in conn.execute("PRAGMA table_info(tokens)")}:
                with contextlib.suppress(sqlite3.OperationalError):  # another process added it meanwhile
                    conn.execute("ALTER TABLE tokens ADD COLUMN expires_at TEXT")  # a tokens.db from before expiries
        return self.backend

    def close(self) -> None:
        """Close this thread's connection (the next use opens a new one)."""
        self.backend.close()

    def create(self, name: str, scopes: str | list[str] | tuple[str, ...], expires_in: dt.timedelta | None = None
               ) -> tuple[str, TokenInfo]:
        """Make a new token (valid for ``expires_in``, or until revoked); return it (shown once, never
        stored) and its info."""
        if not NAME_PATTERN.match(name or ""):
            raise DsdoctorError(f"token name {name!r}: use 1-64 letters, digits, '.', '_' or '-', e.g. ci-pipeline")
        scope_list = parse_scopes(scopes)
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = dt.datetime.now(dt.UTC)
        expires = (now + expires_in).strftime("%Y-%m-%dT%H:%M:%SZ") if expires_in else None
        info = TokenInfo(name=name, scopes=scope_list, prefix=token[:8], created_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                         expires_at=expires)
        backend = self._ready()
        try:
            backend.execute("INSERT INTO tokens (name, hash, prefix, scopes, created_at, expires_at) "
                            "VALUES (?, ?, ?, ?, ?, ?)",
                            (name, hash_token(token), info.prefix, ",".join(scope_list), info.created_at, expires))
        except backend.integrity_errors:
            raise DsdoctorError(f"a token named {name!r} exists; revoke it first (dsdoctor token revoke {name}) "
                                "or pick another name") from None
        return token, info

    def list(self) -> list[TokenInfo]:
        """Every active token, oldest first."""
        if not self.backend.exists():
            return []
        rows = self._ready().execute("SELECT name, scopes, created_at, prefix, expires_at FROM tokens "
                                     "ORDER BY created_at, name").fetchall()
        return [TokenInfo(name, tuple(scopes.split(",")), created, prefix, expires)
                for name, scopes, created, prefix, expires in rows]

    def revoke(self, name: str) -> None:
        """Delete a token; requests using it fail from then on."""
        backend = self._ready()
        if backend.execute("DELETE FROM tokens WHERE name = ?", (name,)).rowcount == 0:
            known = [r[0] for r in backend.execute("SELECT name FROM tokens ORDER BY name").fetchall()]
            raise DsdoctorError(f"no token named {name!r}; tokens: {', '.join(known) or '(none)'}")

    def count(self) -> int:
        """How many tokens exist (0 means the API runs open on a loopback address)."""
        if not self.backend.exists():
            return 0
        return int(self._ready().execute("SELECT count(*) FROM tokens").fetchone()[0])

    def verify(self, token: str) -> TokenInfo | None:
        """The token's info when it is valid, else None (constant-time comparison)."""
        wanted = hash_token(token)
        match: TokenInfo | None = None
        now = _now()
        for name, stored, scopes, created, prefix, expires in self.snapshot():
            if hmac.compare_digest(stored, wanted) and not is_expired(expires, now):
                match = TokenInfo(name, tuple(scopes.split(",")), created, prefix, expires)
        return match

    def stamp(self) -> tuple[object, ...] | None:
        """Changes whenever a token is created or revoked, by any process or replica (None: no tokens
        were ever stored). SQLite: the file's mtime and size; PostgreSQL: a digest of the hashes, one
        small query, so a token revoked through one replica stops working on every replica at once."""
        if isinstance(self.backend, SqliteBackend):
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                return None
            return st.st_mtime_ns, st.st_size
        row = self.backend.execute("SELECT count(*), COALESCE(md5(string_agg(name || ':' || hash || ':' || "
                                   "COALESCE(expires_at, ''), ',' ORDER BY name)), '') FROM tokens").fetchone()
        return tuple(row) if row[0] else None

    def snapshot(self) -> list[tuple[str, str, str, str, str, str | None]]:
        """All rows (name, hash, scopes, created_at, prefix, expires_at) for an in-process cache."""
        if not self.backend.exists():
            return []
        rows = self._ready().execute("SELECT name, hash, scopes, created_at, prefix, expires_at FROM tokens").fetchall()
        return [tuple(row) for row in rows]
