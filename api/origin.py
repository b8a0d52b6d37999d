"""Open mode (no tokens, loopback bind): refuse what a web page or a DNS-rebinding page could send.

With no tokens the API trusts whoever can connect, which on a loopback bind is meant to be the
developer's own tools. A browser can connect too: any page the developer visits may send a form
or a multipart POST to ``http://127.0.0.1:8000`` (no CORS preflight for those), and a
DNS-rebinding page reaches it under its own host name. So in open mode:

* every request must name a loopback host (``localhost``, ``127.0.0.1``, ``[::1]``) or the bound
  address in ``Host``: a rebinding page's ``Host: evil.example`` is refused;
* a request that changes something (not GET, HEAD or OPTIONS) is refused when the browser says
  it comes from another site: ``Sec-Fetch-Site: cross-site``, or an ``Origin`` whose host is not
  one of the above.

With tokens, a bearer token (never sent by a browser on its own) is the protection instead.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from flask import current_app, request

from dsdoctor.api.errors import ApiError

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _hostname(value: str) -> str:
    """``[::1]:8000`` -> ``::1``; ``Localhost:80`` -> ``localhost``."""
    try:
        return (urlsplit(f"//{value.strip()}").hostname or "").lower()
    except ValueError:
        return "\0"  # not a host at all


def allowed_hosts() -> frozenset[str] | None:
    """Host names open mode serves; None when the bind is a wildcard (``--insecure`` on 0.0.0.0)."""
    bound = str(current_app.config.get("DSDOCTOR_BIND_HOST") or "").strip().lower()
    if bound in WILDCARDS and current_app.config.get("DSDOCTOR_BIND_HOST") is not None:
        return None
    return LOOPBACK_NAMES | ({bound.strip("[]")} if bound else set())


def check_open_mode_origin() -> None:
    """before_request hook: in open mode, 403 for a foreign Host and for cross-site writes."""
    auth = current_app.extensions["dsdoctor"]["auth"]
    if not auth.is_open():
        return
    hosts = allowed_hosts()
    if hosts is None:
        return
    if _hostname(request.host) not in hosts:
        raise ApiError(403, "this server runs without tokens and answers only requests to a loopback address "
                       "(Host: localhost or 127.0.0.1); create a token to serve other names",
                       title="Forbidden")
    if request.method in SAFE_METHODS:
        return
    site = request.headers.get("Sec-Fetch-Site", "").strip().lower()
    origin = request.headers.get("Origin")
    foreign_origin = origin is not None and origin.strip().lower() != "null" and \
        _hostname(urlsplit(origin.strip()).netloc) not in hosts
    if site == "cross-site" or foreign_origin or (origin or "").strip().lower() == "null":
        raise ApiError(403, "a cross-site request was refused: this server runs without tokens, so only "
                       "pages and tools on this machine may change data (create a token for remote use)",
                       title="Forbidden")
