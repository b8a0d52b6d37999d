"""API bearer tokens: created once, stored only as SHA-256 hashes in ``DSDOCTOR_HOME/tokens.db``.

A token is ``dsd_`` plus 32 random bytes (URL-safe base64): with that much entropy a plain
SHA-256 is as good as a slow password hash. Verification compares the hash with every stored
hash using :func:`hmac.compare_digest` (no early exit), so timing says nothing about a near miss.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
import secrets
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from kb.errors import DsdoctorError

SCOPES = ("diagnose", "incidents:read", "incidents:write", "admin")
TOKEN_PREFIX = "dsd_"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
FILE_NAME = "tokens.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    name TEXT PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    prefix TEXT NOT NULL,
    scopes TEXT NOT NULL,
    created_at TEXT NOT NULL
)
"""


@dataclass(frozen=True)
class TokenInfo:
    """A stored token, without the secret."""

    name: str
    scopes: tuple[str, ...]
    created_at: str
    prefix: str

    def allows(self, scope: str) -> bool:
        """True when the token carries ``scope`` (``admin`` carries every scope)."""
        return scope in self.scopes or "admin" in self.scopes


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
    """The token table of one data directory."""

    def __init__(self, home: Path):
        self.path = Path(home) / FILE_NAME

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 10000")
        conn.execute(_SCHEMA)
        return conn

    def create(self, name: str, scopes: str | list[str] | tuple[str, ...]) -> tuple[str, TokenInfo]:
        """Make a new token; return it (shown once, never stored) and its info."""
        if not NAME_PATTERN.match(name or ""):
            raise DsdoctorError(f"token name {name!r}: use 1-64 letters, digits, '.', '_' or '-', e.g. ci-pipeline")
        scope_list = parse_scopes(scopes)
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        info = TokenInfo(name=name, scopes=scope_list, prefix=token[:8],
                         created_at=dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        conn = self._connect()
        try:
            conn.execute("INSERT INTO tokens (name, hash, prefix, scopes, created_at) VALUES (?, ?, ?, ?, ?)",
                         (name, hash_token(token), info.prefix, ",".join(scope_list), info.created_at))
        except sqlite3.IntegrityError:
            raise DsdoctorError(f"a token named {name!r} exists; revoke it first (dsdoctor token revoke {name}) "
                                "or pick another name") from None
        finally:
            conn.close()
        return token, info

    def list(self) -> list[TokenInfo]:
        """Every active token, oldest first."""
        if not self.path.exists():
            return []
        conn = self._connect()
        try:
            rows = conn.execute("SELECT name, scopes, created_at, prefix FROM tokens ORDER BY created_at, name")
            return [TokenInfo(name, tuple(scopes.split(",")), created, prefix) for name, scopes, created, prefix in rows]
        finally:
            conn.close()

    def revoke(self, name: str) -> None:
        """Delete a token; requests using it fail from then on."""
        conn = self._connect()
        try:
            if conn.execute("DELETE FROM tokens WHERE name = ?", (name,)).rowcount == 0:
                known = [r[0] for r in conn.execute("SELECT name FROM tokens ORDER BY name")]
                raise DsdoctorError(f"no token named {name!r}; tokens: {', '.join(known) or '(none)'}")
        finally:
            conn.close()

    def count(self) -> int:
        """How many tokens exist (0 means the API runs open on a loopback address)."""
        if not self.path.exists():
            return 0
        conn = self._connect()
        try:
            return int(conn.execute("SELECT count(*) FROM tokens").fetchone()[0])
        finally:
            conn.close()

    def verify(self, token: str) -> TokenInfo | None:
        """The token's info when it is valid, else None (constant-time comparison)."""
        if not self.path.exists():
            return None
        wanted = hash_token(token)
        conn = self._connect()
        try:
            rows = conn.execute("SELECT name, hash, scopes, created_at, prefix FROM tokens").fetchall()
        finally:
            conn.close()
        match: TokenInfo | None = None
        for name, stored, scopes, created, prefix in rows:
            if hmac.compare_digest(stored, wanted):
                match = TokenInfo(name, tuple(scopes.split(",")), created, prefix)
        return match

    def snapshot(self) -> list[tuple[str, str, str, str, str]]:
        """All rows (name, hash, scopes, created_at, prefix) for an in-process cache."""
        if not self.path.exists():
            return []
        conn = self._connect()
        try:
            return conn.execute("SELECT name, hash, scopes, created_at, prefix FROM tokens").fetchall()
        finally:
            conn.close()
