"""A small client of a running dsdoctor server, for the command line (stdlib urllib only).

Every failure becomes a ``DsdoctorError`` of one line that says what to do: the server is not
reachable, the token is missing or lacks a scope, the diagnosis does not exist, the body is too big.
"""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from dsdoctor.kb.errors import DsdoctorError

TIMEOUT_S = 300  # a large evidence document takes a while to diagnose
GZIP_ABOVE = 64 * 1024  # bodies above this are sent with Content-Encoding: gzip

_HINTS = {
    401: "the server wants a token: pass --token T (or set DSDOCTOR_TOKEN); create one with dsdoctor token create",
    403: "the token lacks the scope this needs",
    413: "the evidence is larger than the server accepts (DSDOCTOR_MAX_BODY_MB on the server)",
}


class Client:
    """JSON over HTTP to ``base_url`` with an optional bearer token."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = TIMEOUT_S):
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise DsdoctorError(f"--server must be an http(s) URL such as http://127.0.0.1:8000, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def page_url(self, diagnosis_id: str) -> str:
        """The web page of a stored diagnosis."""
        return f"{self.base_url}/diagnoses/{urllib.parse.quote(diagnosis_id, safe='')}"

    def request(self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None) -> Any:
        """Send one request and return the decoded JSON answer."""
        url = self.base_url + path
        params = {k: v for k, v in (query or {}).items() if v not in (None, "")}
        if params:
            url += "?" + urllib.parse.urlencode(params)
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            headers["Content-Type"] = "application/json"
            if len(data) > GZIP_ABOVE:
                data = gzip.compress(data, 6)
                headers["Content-Encoding"] = "gzip"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as response:
                return json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            raise DsdoctorError(self._http_message(method, path, exc)) from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ConnectionRefusedError):
                raise DsdoctorError(f"cannot reach {self.base_url}: connection refused (is `dsdoctor serve` "
                                    "running there?)") from None
            raise DsdoctorError(f"cannot reach {self.base_url}: {reason}") from None
        except (TimeoutError, ConnectionError) as exc:
            raise DsdoctorError(f"cannot reach {self.base_url}: {type(exc).__name__}: {exc}") from None
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise DsdoctorError(f"{self.base_url}{path} did not answer JSON: is it a dsdoctor server?") from None

    def _http_message(self, method: str, path: str, exc: urllib.error.HTTPError) -> str:
        detail = ""
        try:
            problem = json.loads(exc.read().decode("utf-8"))
            detail = problem.get("detail") or problem.get("title") or ""
            errors = problem.get("errors") or []
            if errors:
                detail += ": " + "; ".join(f"{e.get('field')}: {e.get('message')}" for e in errors[:5])
        except Exception:  # not a problem document (a proxy's page): the status says enough
            pass
        hint = _HINTS.get(exc.code, "")
        parts = [p for p in (detail, hint if hint and hint not in detail else "") if p]
        return f"{method} {path} -> HTTP {exc.code}" + (": " + "; ".join(parts) if parts else "")
