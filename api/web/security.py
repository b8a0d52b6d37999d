"""Security of the web pages: the session secret, CSRF tokens, sign-in with an API token, headers.

* The session is Flask's signed cookie (HttpOnly, SameSite=Lax). Its key is 32 random bytes in
  ``DSDOCTOR_HOME/web-secret.key`` (mode 0600), made on first use; every worker reads the same file.
* Sign-in: when API tokens exist, an engineer pastes one token once. The session keeps only its
  SHA-256 (the form ``tokens.db`` stores), never the token, and every request checks it again, so a
  revoked or expired token stops working on the next page. Each sign-in is also recorded on the
  server (:mod:`api.web.sessions`): signing out ends it there, so a copied cookie stops working.
* CSRF: Flask-WTF's CSRFProtect, for the web pages only (the REST API authenticates each request
  with a bearer token instead). A random secret per session; each form carries it signed with a
  timestamp, refused once older than ``WTF_CSRF_TIME_LIMIT`` (:data:`CSRF_TIME_LIMIT_S`).
* Every web response carries a strict Content-Security-Policy: no inline script or style anywhere.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from flask import Flask, Response, session
from flask_wtf.csrf import CSRFError, CSRFProtect, generate_csrf

from dsdoctor.kb.storage.tokens import hash_token

SECRET_FILE = "web-secret.key"
SESSION_COOKIE = "dsdoctor_session"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
#: how long a form stays valid: a working session, so a long paste is not refused on submit
CSRF_TIME_LIMIT_S = 8 * 3600
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
}


# ---------------------------------------------------------------- the session key


def load_secret_key(home: Path) -> bytes:
    """The session signing key of this data directory, created (0600) on first use; on PostgreSQL the one
    key of the fleet, so a cookie signed by one replica is good on every replica.

    Safe when several workers start at once: the first to create the file wins, the others read it.
    """
    from dsdoctor.api.web.sessions import shared_secret_key

    shared = shared_secret_key()
    if shared is not None:
        return shared
    path = Path(home) / SECRET_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_key(path)
    key = secrets.token_bytes(32)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.hex().encode("ascii"))
    return key


def _read_key(path: Path) -> bytes:
    for _ in range(50):  # another worker may be between create and write
        text = path.read_text(encoding="ascii").strip()
        if len(text) == 64:
            return bytes.fromhex(text)
        time.sleep(0.02)
    raise RuntimeError(f"{path} does not hold a 64-hex-digit session key; delete it to make a new one")


def configure_session(app: Flask, home: Path) -> None:
    """Give the app its session key and safe cookie settings (an explicit SECRET_KEY is kept)."""
    if not app.config.get("SECRET_KEY"):
        app.config["SECRET_KEY"] = load_secret_key(home)
    app.config.setdefault("SESSION_COOKIE_NAME", SESSION_COOKIE)
    if app.config.get("SESSION_COOKIE_NAME") == "session":
        app.config["SESSION_COOKIE_NAME"] = SESSION_COOKIE
    app.config["SESSION_COOKIE_HTTPONLY"] = True
    app.config["SESSION_COOKIE_SAMESITE"] = "Lax"


# ---------------------------------------------------------------- CSRF


def configure_csrf(app: Flask) -> None:
    """CSRFProtect on the app, checking nothing by itself: the web blueprint calls :func:`csrf_problem`
    (the REST API and chat-ops endpoints are not forms and keep their own authentication)."""
    if "csrf" in app.extensions:
        return
    app.config.setdefault("WTF_CSRF_TIME_LIMIT", CSRF_TIME_LIMIT_S)
    app.config["WTF_CSRF_CHECK_DEFAULT"] = False
    app.config["WTF_CSRF_FIELD_NAME"] = CSRF_FIELD
    app.config.setdefault("WTF_CSRF_HEADERS", [CSRF_HEADER, "X-CSRFToken"])
    CSRFProtect(app)


def csrf_token() -> str:
    """The signed, time-stamped CSRF token for this session's forms."""
    return generate_csrf()


def csrf_problem() -> str | None:
    """None when this POST carries a valid CSRF token; otherwise why not (Flask-WTF's reason)."""
    from flask import current_app

    try:
        current_app.extensions["csrf"].protect()
    except CSRFError as exc:
        return str(exc.description)
    return None


# ---------------------------------------------------------------- who is signed in


@dataclass(frozen=True)
class Viewer:
    """Who is looking at the page: a token (by name and scopes), or the open development mode."""

    name: str
    scopes: tuple[str, ...]
    open_mode: bool = False

    def allows(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes


OPEN_VIEWER = Viewer(name="", scopes=("admin",), open_mode=True)


def _authenticator():
    from dsdoctor.api.web.backend import authenticator

    return authenticator()


def auth_required() -> bool:
    """True when pages need a signed-in token (tokens exist, or the bind is not open)."""
    return not _authenticator().is_open()


def _sessions():
    from dsdoctor.api.services import services
    from dsdoctor.api.web.sessions import SessionStore

    return SessionStore(services().home)


def current_viewer() -> Viewer | None:
    """The signed-in viewer, :data:`OPEN_VIEWER` in open mode, or None (sign-in needed)."""
    auth = _authenticator()
    if auth.is_open():
        return OPEN_VIEWER
    digest, session_id = session.get("token_sha256"), session.get("sid")
    if not isinstance(digest, str) or len(digest) != 64 or not isinstance(session_id, str):
        return None
    info = auth.identify_hash(digest)
    if info is None or not _sessions().valid(session_id, digest):
        return None
    return Viewer(name=info.name, scopes=tuple(info.scopes))


def sign_in(token: str) -> Viewer | None:
    """Check a pasted token; on success start a fresh session that remembers its hash."""
    info = _authenticator().identify(token.strip()) if token.strip() else None
    if info is None:
        return None
    lang = session.get("lang")
    session.clear()
    session["token_sha256"] = hash_token(token.strip())
    session["sid"] = _sessions().start(session["token_sha256"])
    if lang:
        session["lang"] = lang
    return Viewer(name=info.name, scopes=tuple(info.scopes))


def sign_out() -> None:
    """End the session on the server and forget the token (the language choice stays)."""
    session_id = session.get("sid")
    if isinstance(session_id, str):
        _sessions().end(session_id)
    lang = session.get("lang")
    session.clear()
    if lang:
        session["lang"] = lang


def safe_next(target: str | None, default: str) -> str:
    """``target`` when it is a path on this site (no scheme, no host, no '//'), else ``default``."""
    if not target or not isinstance(target, str):
        return default
    if any(ord(c) < 32 or ord(c) == 127 for c in target):  # CR/LF would split the Location header
        return default
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return default
    return target


# ---------------------------------------------------------------- headers


def add_security_headers(response: Response) -> Response:
    """after_request hook of the web pages: CSP and friends; pages are never cached by proxies."""
    for key, value in SECURITY_HEADERS.items():
        response.headers.setdefault(key, value)
    if response.mimetype == "text/html":
        response.headers.setdefault("Cache-Control", "no-store")
    return response
