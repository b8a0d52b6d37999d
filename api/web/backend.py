"""What the pages do: read the services ``create_app`` built, and run the same actions as the REST API.

A diagnosis made here is stored exactly like one from ``POST /v1/diagnoses`` (evidence validated by
the same schema, secrets redacted before anything is stored), an outcome recorded here re-runs the
diagnosis like ``POST /v1/diagnoses/{id}/observations``, and "record as incident" pre-fills the
record with the REST layer's :func:`~api.blueprints.diagnoses.incident_from_diagnosis`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from flask import current_app
from marshmallow import ValidationError as SchemaError

from api.errors import ApiError
from api.redact import Redactions, redact_value
from api.schemas import EvidenceSchema, explain_errors
from api.store import StoredDiagnosis

_EVIDENCE = EvidenceSchema()
MAX_RETRIES = 5


class FormProblem(Exception):
    """Input a form cannot accept: ``errors`` maps a form field to what is wrong with it."""

    def __init__(self, errors: dict[str, str], status: int = 422):
        self.errors = errors
        self.status = status
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))


def services() -> Any:
    """The :class:`api.services.Services` of this app."""
    return current_app.extensions["dsdoctor"]["services"]


def authenticator() -> Any:
    """The app's :class:`api.auth.Authenticator` (the same tokens as the REST API)."""
    ext = current_app.extensions["dsdoctor"]
    return ext.get("auth") or ext["services"].auth


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _record_metrics(kind: str, value: Any) -> None:
    try:
        from api import metrics

        if kind == "diagnosis":
            metrics.record_diagnosis(value)
        else:
            metrics.record_redactions(value)
    except Exception:  # metrics must never break a page
        current_app.logger.debug("metrics not recorded", exc_info=True)


# ---------------------------------------------------------------- diagnoses


def validate_evidence(evidence: dict[str, Any]) -> dict[str, Any]:
    """The evidence checked by the REST API's schema; FormProblem names each bad field."""
    try:
        return _EVIDENCE.load(evidence)
    except SchemaError as exc:
        messages = explain_errors(_EVIDENCE, exc.messages)
        raise FormProblem(_flat(messages)) from None


def _flat(messages: Any, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    if isinstance(messages, dict):
        for key, value in messages.items():
            name = prefix if key == "_schema" else (f"{prefix}.{key}" if prefix else str(key))
            out.update(_flat(value, name))
    elif isinstance(messages, list) and all(isinstance(m, str) for m in messages):
        out[prefix or "evidence"] = " ".join(messages)
    elif isinstance(messages, list):
        for i, value in enumerate(messages):
            out.update(_flat(value, f"{prefix}.{i}"))
    else:
        out[prefix or "evidence"] = str(messages)
    return out


def redact(value: dict[str, Any]) -> tuple[dict[str, Any], Redactions]:
    """``value`` without secrets, and what was removed."""
    found = Redactions()
    clean = redact_value(value, found)
    if found.total:
        _record_metrics("redactions", dict(found.counts))
    return clean, found


def _run(evidence: dict[str, Any], *, lang: str, top: int, diagnosis_id: str | None) -> dict[str, Any]:
    svc = services()
    result = svc.diagnose(evidence, kb=svc.kb(), site_counts=svc.site_counts(), similar=svc.similar,
                          lang=lang, top=top, diagnosis_id=diagnosis_id)
    _record_metrics("diagnosis", result)
    return result


def create_diagnosis(evidence: dict[str, Any], *, lang: str, top: int = 5) -> dict[str, Any]:
    """Validate, redact, diagnose and store evidence; return the stored diagnosis."""
    clean, found = redact(validate_evidence(evidence))
    result = _run(clean, lang=lang, top=top, diagnosis_id=None)
    created = now()
    result["created_at"] = created
    result["updated_at"] = created
    result["observation_history"] = []
    if found.total:
        result.setdefault("warnings", []).append(found.summary())
    services().diagnoses().add(result, clean, lang=lang, top=top, created_at=created)
    return result


def stored_diagnosis(diagnosis_id: str) -> StoredDiagnosis | None:
    return services().diagnoses().get(diagnosis_id)


def add_observations(diagnosis_id: str, observations: dict[str, bool], lang: str | None = None
                     ) -> tuple[StoredDiagnosis, dict[str, Any]]:
    """Record observations (``{"x.exp=outcome": True}``) and re-rank; return (before, after).

    Retries on a concurrent change like the REST API; raises ApiError 404/409.
    """
    stored = stored_diagnosis(diagnosis_id)
    if stored is None:
        raise ApiError(404, f"no diagnosis with id {diagnosis_id!r}")
    first = stored
    for _attempt in range(MAX_RETRIES):
        evidence = dict(stored.evidence)
        evidence["observations"] = {**(evidence.get("observations") or {}), **observations}
        result = _run(evidence, lang=lang or stored.lang, top=stored.top, diagnosis_id=stored.id)
        history = [*stored.history, {
            "at": now(), "observations": observations, "logs_added": [], "description_added": False,
            "top_cause_before": _top_id(stored.diagnosis), "top_cause_after": _top_id(result),
        }]
        result["created_at"] = stored.created_at
        result["updated_at"] = now()
        result["observation_history"] = history
        if services().diagnoses().replace(stored, result, evidence, history):
            return first, result
        stored = stored_diagnosis(diagnosis_id) or stored
    raise ApiError(409, f"diagnosis {diagnosis_id!r} kept changing while the outcome was recorded; try again")


def _top_id(diagnosis: dict[str, Any]) -> str | None:
    causes = diagnosis.get("causes") or []
    return causes[0].get("id") if causes else None


# ---------------------------------------------------------------- incidents


def record_incident(diagnosis_id: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """Create an incident pre-filled from a stored diagnosis (overrides win); return it."""
    from api.blueprints.diagnoses import incident_from_diagnosis

    stored = stored_diagnosis(diagnosis_id)
    if stored is None:
        raise ApiError(404, f"no diagnosis with id {diagnosis_id!r}")
    record = incident_from_diagnosis(stored.diagnosis, overrides)
    clean, _found = redact(record)
    return services().incidents().add(clean)


def update_incident(incident_id: str, patch: dict[str, Any]) -> dict[str, Any]:
    """Change an incident (secrets redacted first, as the REST API does)."""
    clean, _found = redact(patch)
    return services().incidents().update(incident_id, clean)
