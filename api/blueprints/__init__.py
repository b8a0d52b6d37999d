"""One blueprint per resource: diagnoses, knowledge base, incidents, health, docs."""

from __future__ import annotations

import json
from typing import Any

from flask import current_app

JSON = "application/json"


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None):
    """A JSON response (UTF-8, Chinese kept as is); ``body`` may already be JSON text or UTF-8 bytes."""
    text = body if isinstance(body, str | bytes) else json.dumps(body, ensure_ascii=False)
    response = current_app.response_class(text, status=status, mimetype=JSON)
    for key, value in (headers or {}).items():
        response.headers[key] = value
    return response
