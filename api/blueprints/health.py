"""/healthz (the process answers), /readyz (ready to diagnose), /metrics (Prometheus)."""

from __future__ import annotations

from typing import Any

from flask import current_app
from flask_smorest import Blueprint

from dsdoctor.api import metrics
from dsdoctor.api.blueprints import json_response
from dsdoctor.api.errors import ApiError
from dsdoctor.api.schemas import HealthSchema, ReadySchema
from dsdoctor.api.services import services
from dsdoctor.api.version import package_version

blp = Blueprint("health", __name__, description="Liveness, readiness and metrics (no token needed).")


@blp.route("/healthz", methods=["GET"])
@blp.response(200, HealthSchema)
def healthz():
    """The process is up and answering, and which dsdoctor version answers."""
    return json_response({"status": "ok", "version": package_version()})


def readiness_checks() -> dict[str, dict[str, Any]]:
    """Warm-up done, knowledge base loaded, rules importable, diagnoses store writable, incident index
    reachable."""
    svc = services()
    checks: dict[str, dict[str, Any]] = {}
    warm = svc.warm.is_set()
    checks["warm_up"] = {"ok": warm, "detail": "rules compiled, incident store open" if warm else "warming up"}
    ok, detail = svc.kb_status()
    checks["knowledge"] = {"ok": ok, "detail": detail}
    try:
        import dsdoctor.rules.extract  # noqa: F401

        checks["rules"] = {"ok": True, "detail": "rules.extract importable"}
    except Exception as exc:
        checks["rules"] = {"ok": False, "detail": f"{type(exc).__name__}: {exc}"}
    store = svc.diagnoses()
    checks["store"] = {"ok": store.writable(), "detail": str(store.path)}
    incidents = svc.incidents_or_none()
    if incidents is None:
        checks["index"] = {"ok": False, "detail": "incident store unavailable"}
    else:
        try:
            checks["index"] = {"ok": True, "detail": f"index lag {incidents.index_lag()}"}
        except Exception as exc:
            checks["index"] = {"ok": False, "detail": f"{type(exc).__name__}: {exc}"}
    return checks


@blp.route("/readyz", methods=["GET"])
@blp.response(200, ReadySchema)
def readyz():
    """Ready to serve: knowledge base loaded, store writable, search index reachable (503 otherwise)."""
    checks = readiness_checks()
    auth = "open (no tokens configured)" if services().auth.is_open() else "bearer tokens"
    failed = [name for name, check in checks.items() if not check["ok"]]
    if failed:
        raise ApiError(503, f"not ready: {', '.join(failed)} failed", title="Service Unavailable",
                       checks=checks, auth=auth)
    return json_response({"status": "ready", "checks": checks, "auth": auth})


def _index_lag() -> float | None:
    store = services().incidents_or_none()
    if store is None:
        return None
    try:
        return float(store.index_lag())
    except Exception:
        return None


@blp.route("/metrics", methods=["GET"])
@blp.response(200, content_type="text/plain", schema={"type": "string"},
              description="Prometheus text exposition format 0.0.4")
def metrics_endpoint():
    """Prometheus metrics: requests and latency by route and status, diagnoses by top cause, log bytes
    processed, secrets redacted, search index lag."""
    body, content_type = metrics.render(_index_lag)
    return current_app.response_class(body, mimetype=None, content_type=content_type)
