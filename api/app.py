"""Flask application factory."""

from __future__ import annotations

from typing import Any

from flask import Flask, jsonify


def create_app(test_config: dict[str, Any] | None = None) -> Flask:
    """Build the dsdoctor WSGI application; the knowledge base is loaded once per process."""
    app = Flask(__name__)
    app.config.from_mapping(JSON_SORT_KEYS=False)
    if test_config:
        app.config.update(test_config)

    @app.get("/healthz")
    def healthz():
        return jsonify(status="ok")

    return app
