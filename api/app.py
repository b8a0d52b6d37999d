"""Flask application factory: the REST API (flask-smorest, OpenAPI 3 at /openapi.json, docs at /docs).

``create_app`` builds everything a worker needs once: the knowledge base is loaded here (so each
gunicorn worker loads it once, at start) and the diagnoses database is created in WAL mode.
Each thread keeps one SQLite connection open (closing the last connection of a WAL database
checkpoints it: a disk sync per request).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from flask import Flask

from dsdoctor.api import logs, metrics
from dsdoctor.api.auth import Authenticator, check_request
from dsdoctor.api.errors import DsdoctorApi, problem_response, register_error_handlers
from dsdoctor.api.limits import close_request_files, decode_content_encoding, max_body_bytes
from dsdoctor.api.openapi_doc import CompleteOperations
from dsdoctor.api.origin import check_open_mode_origin
from dsdoctor.api.schemas import MetricValue, openapi_field_properties
from dsdoctor.api.services import Services
from dsdoctor.api.settings import home as default_home
from dsdoctor.api.version import package_version
from dsdoctor.kb.errors import KnowledgeError
from dsdoctor.kb.storage.diagnoses import DiagnosisStore
from dsdoctor.kb.storage.tokens import TokenStore

log = logging.getLogger("dsdoctor.api")

API_DESCRIPTION = """Diagnose failed DeepSpeed / PyTorch-distributed / NCCL training jobs.

POST evidence (logs, ds_config, metrics, versions, a description) to `/v1/diagnoses` and get the
root causes ranked with the reasons for and against each, the first error, the scope, and the
next isolation experiment; report its outcome to `/v1/diagnoses/{id}/observations`.
Errors are RFC 9457 `application/problem+json`. Authenticate with `Authorization: Bearer <token>`
(tokens come from `dsdoctor token create`).
"""


def create_app(test_config: dict[str, Any] | None = None) -> Flask:
    """Build the dsdoctor WSGI application.

    ``test_config`` keys (all optional): ``DSDOCTOR_HOME`` (data directory), ``MAX_CONTENT_LENGTH``
    (bytes), ``DSDOCTOR_OPEN_WITHOUT_TOKENS`` (default True: no tokens = open API),
    ``DSDOCTOR_KB`` (a KnowledgeBase to use instead of the built-in one), ``DSDOCTOR_DIAGNOSE``
    (a replacement for kb.diagnosis.diagnose), ``DSDOCTOR_SEED_INCIDENTS`` (default True),
    ``DSDOCTOR_PRELOAD`` (default True: load the knowledge base now), ``DSDOCTOR_BIND_HOST`` (the
    address `dsdoctor serve` binds; open mode also serves that host name, see :mod:`api.origin`).
    """
    app = Flask(__name__)
    limit = max_body_bytes()
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.json.ensure_ascii = False  # type: ignore[attr-defined]
    app.config.from_mapping(
        MAX_CONTENT_LENGTH=limit,
        MAX_FORM_MEMORY_SIZE=limit,
        MAX_FORM_PARTS=2000,
        API_TITLE="dsdoctor",
        API_VERSION=package_version(),
        OPENAPI_VERSION="3.0.3",
        OPENAPI_URL_PREFIX="/",
        OPENAPI_JSON_PATH="openapi.json",
        API_SPEC_OPTIONS={"info": {"description": API_DESCRIPTION}},
        DSDOCTOR_OPEN_WITHOUT_TOKENS=True,
        DSDOCTOR_SEED_INCIDENTS=True,
        DSDOCTOR_PRELOAD=True,
    )
    if test_config:
        app.config.update(test_config)
    app.config["MAX_FORM_MEMORY_SIZE"] = app.config["MAX_CONTENT_LENGTH"]

    data_home = Path(app.config.get("DSDOCTOR_HOME") or default_home())
    data_home.mkdir(parents=True, exist_ok=True)
    DiagnosisStore.initialise(data_home)
    auth = Authenticator(TokenStore(data_home), open_without_tokens=bool(app.config["DSDOCTOR_OPEN_WITHOUT_TOKENS"]))
    svc = Services(data_home, auth, kb=app.config.get("DSDOCTOR_KB"), diagnose=app.config.get("DSDOCTOR_DIAGNOSE"),
                   seed_incidents=bool(app.config["DSDOCTOR_SEED_INCIDENTS"]))

    api = DsdoctorApi(app, spec_kwargs={"extra_plugins": [CompleteOperations()]})
    api.register_field(MetricValue, None, None)
    api.ma_plugin.converter.add_attribute_function(lambda self, field, **kw: openapi_field_properties(field))
    api.spec.components.security_scheme("bearerAuth", {"type": "http", "scheme": "bearer",
                                                       "description": "a token from `dsdoctor token create`"})
    app.extensions["dsdoctor"] = {"services": svc, "auth": auth, "api": api}

    register_error_handlers(app)
    logs.install(app)  # first: refused requests get a request id too
    metrics.install(app)  # before the hooks below, so that requests they refuse are counted too
    app.before_request(check_open_mode_origin)
    app.before_request(check_request)
    app.before_request(decode_content_encoding)
    app.teardown_request(close_request_files)

    from dsdoctor.api.blueprints import chatops, diagnoses, docs, health, incidents, kb_routes

    for blueprint in (health.blp, diagnoses.blp, kb_routes.blp, incidents.blp, chatops.blp):
        api.register_blueprint(blueprint)
    app.register_blueprint(docs.blp)
    _register_web_pages(app)

    if app.config["DSDOCTOR_PRELOAD"]:
        _preload(svc)
    return app


def _register_web_pages(app: Flask) -> None:
    """The engineers' web pages (api/web), when that package is present."""
    try:
        from dsdoctor.api.web import register_web
    except ModuleNotFoundError as exc:
        if exc.name not in ("dsdoctor.api.web",):
            raise
        return
    register_web(app)


def _preload(svc: Services) -> None:
    """Load the knowledge base now; compile the rules and open the incident store on a background
    thread, so that /healthz answers at once and the first diagnosis is not the slow one.
    /readyz reports ``warm_up`` until the thread is done. Errors are logged and reported by
    /readyz, never fatal."""
    try:
        svc.kb()
    except KnowledgeError as exc:
        log.error("knowledge base failed to load; /readyz reports it: %s", exc)
    svc.warm.clear()
    threading.Thread(target=_warm_up, args=(svc,), name="dsdoctor-warm-up", daemon=True).start()


def _warm_up(svc: Services) -> None:
    try:
        from dsdoctor.rules.extract import extract
        from dsdoctor.rules.matcher import configure_disk_cache

        configure_disk_cache(svc.home / "cache")  # workers after the first load compiled rules

        extract({"description": "warm-up", "logs": [{"source": "warm-up", "text": "warm-up\n"}]})
    except Exception as exc:  # reported by /readyz and by the first diagnosis
        log.error("rules failed to load: %s: %s", type(exc).__name__, exc)
    store = svc.incidents_or_none()
    if store is not None:
        try:
            store.warm_up()  # Chinese segmentation loads once per worker, not on its first Chinese query
        except Exception as exc:
            log.error("search warm-up failed: %s: %s", type(exc).__name__, exc)
    svc.warm.set()


__all__ = ["create_app", "problem_response"]
