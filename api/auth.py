"""Bearer-token authentication and per-route scopes.

Each /v1 view declares the scope it needs with :func:`requires`; a /v1 view that declares
none needs ``admin`` (a forgotten declaration fails closed), unless it is marked
``auth_exempt`` because it checks its caller itself (the signed Slack endpoint). Views outside /v1 (health, metrics,
OpenAPI, docs) are open. With no tokens configured and ``open_without_tokens`` (a loopback
bind, or ``--insecure``) every request is allowed: the development mode `dsdoctor serve`
announces at start.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any, TypeVar

from flask import current_app, g, request
from flask_smorest import Blueprint

from dsdoctor.api.errors import ApiError
from dsdoctor.kb.storage.tokens import TokenInfo, TokenStore, hash_token, is_expired

F = TypeVar("F", bound=Callable[..., Any])
REALM = 'Bearer realm="dsdoctor"'
OPEN_PRINCIPAL = TokenInfo(name="(open: no tokens configured)", scopes=("admin",), created_at="", prefix="")


def requires(scope: str) -> Callable[[F], F]:
    """Mark a view as needing ``scope`` and document the bearer security requirement."""

    def decorator(func: F) -> F:
        documented = Blueprint.doc(security=[{"bearerAuth": []}], **{"x-required-scope": scope})(func)
        documented.required_scope = scope  # type: ignore[attr-defined]
        return documented  # type: ignore[return-value]

    return decorator


class Authenticator:
    """Checks bearer tokens against the token store, re-reading it only when its stamp changes."""

    def __init__(self, store: TokenStore, open_without_tokens: bool = True):
        self.store = store
        self.open_without_tokens = open_without_tokens
        self._stamp: tuple[object, ...] | None = None
        self._rows: list[tuple[str, str, str, str, str, str | None]] = []

    def _current_rows(self) -> list[tuple[str, str, str, str, str, str | None]]:
        stamp = self.store.stamp()
        if stamp is None:
            self._stamp, self._rows = None, []
            return []
        if stamp != self._stamp:
            self._rows = self.store.snapshot()
            self._stamp = stamp
        return self._rows

    def is_open(self) -> bool:
        """True when requests need no token (no tokens exist and the bind allows it)."""
        return self.open_without_tokens and not self._current_rows()

    def identify(self, token: str) -> TokenInfo | None:
        """The info of a valid (known, unexpired) token, comparing against every stored hash in constant time."""
        return self.identify_hash(hash_token(token))

    def identify_hash(self, wanted: str) -> TokenInfo | None:
        """:meth:`identify` for a token's SHA-256 (what a web session keeps)."""
        found: TokenInfo | None = None
        for name, stored, scopes, created, prefix, expires in self._current_rows():
            if hmac.compare_digest(stored, wanted) and not is_expired(expires):
                found = TokenInfo(name, tuple(scopes.split(",")), created, prefix, expires)
        return found

    def authorize(self, scope: str) -> TokenInfo:
        """The caller's token for ``scope``, or raise a 401/403 problem."""
        if self.is_open():
            return OPEN_PRINCIPAL
        header = request.headers.get("Authorization", "")
        kind, _, token = header.partition(" ")
        if not header:
            raise ApiError(401, f"this endpoint needs a bearer token with scope {scope!r}: send "
                           "'Authorization: Bearer <token>' (create one with: dsdoctor token create)",
                           headers={"WWW-Authenticate": REALM})
        if kind.lower() != "bearer" or not token.strip():
            raise ApiError(401, "the Authorization header must be 'Bearer <token>'",
                           headers={"WWW-Authenticate": f'{REALM}, error="invalid_request"'})
        info = self.identify(token.strip())
        if info is None:
            raise ApiError(401, "the bearer token is not valid (unknown, expired or revoked)",
                           headers={"WWW-Authenticate": f'{REALM}, error="invalid_token"'})
        if not info.allows(scope):
            raise ApiError(403, f"token {info.name!r} has scopes {', '.join(info.scopes)}; this endpoint needs "
                           f"{scope!r}", headers={"WWW-Authenticate": f'{REALM}, error="insufficient_scope", '
                                                                     f'scope="{scope}"'})
        return info


def required_scope() -> str | None:
    """The scope the current request's view needs (None: open).

    A view marked ``auth_exempt = True`` authenticates the caller itself (e.g. the Slack request
    signature of the chat-ops endpoint) and needs no bearer token."""
    view = current_app.view_functions.get(request.endpoint or "")
    if getattr(view, "auth_exempt", False):
        return None
    scope = getattr(view, "required_scope", None)
    if scope is None and request.path.startswith("/v1/"):
        return "admin"
    return scope


def check_request() -> None:
    """before_request hook: authenticate and authorize the current request."""
    if request.routing_exception is not None:
        return  # 404 / 405 answer without looking at credentials
    scope = required_scope()
    if scope is None:
        return
    authenticator: Authenticator = current_app.extensions["dsdoctor"]["auth"]
    g.principal = authenticator.authorize(scope)
