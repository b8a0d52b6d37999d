"""Web pages for engineers, served by the API's Flask app: incident search, incident records,
diagnoses (with their causal paths and next experiments) and root causes.

Server-rendered Jinja templates; the small ``static/web.js`` only enhances (the pages work
without JavaScript). Every asset is served by the app itself, under ``/assets/``.
"""

from __future__ import annotations

from pathlib import Path

from flask import Flask


def register_web(app: Flask) -> None:
    """Add the ``web`` blueprint to an app made by :func:`api.app.create_app` (idempotent)."""
    if "web" in app.blueprints:
        return
    from dsdoctor.api.web.security import configure_csrf, configure_session
    from dsdoctor.api.web.views import bp

    ext = app.extensions.get("dsdoctor")
    if not ext or "services" not in ext:
        raise RuntimeError("register_web(app) needs the services create_app sets up; call it inside create_app")
    configure_session(app, Path(ext["services"].home))
    configure_csrf(app)
    app.register_blueprint(bp)


__all__ = ["register_web"]
