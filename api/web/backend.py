"""What the pages do: read the services ``create_app`` built, and run the same actions as the REST API.

A diagnosis made here is stored exactly like one from ``POST /v1/diagnoses`` (evidence validated by
the same schema, secrets redacted before anything is stored), an outcome recorded here re-runs the
diagnosis like ``POST /v1/diagnoses/{id}/observations``, and "record as incident" pre-fills the
record with the REST layer's :func:`~api.blueprints.diagnoses.incident_from_diagnosis`.
"""

from __future__ import annotations

from typing import Any

from marshmallow import ValidationError as SchemaError

from dsdoctor.api import diagnosis_service
from dsdoctor.api.schemas import EvidenceSchema, explain_errors
from dsdoctor.api.services import services
from dsdoctor.kb.storage.diagnoses import StoredDiagnosis

_EVIDENCE = EvidenceSchema()


class FormProblem(Exception):
    """Input a form cannot accept: ``errors`` maps a form field to what is wrong with it."""

    def __init__(self, errors: dict[str, str], status: int = 422):
        self.errors = errors
        self.status = status
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))


def authenticator() -> Any:
    """The app's :class:`api.auth.Authenticator` (the same tokens as the REST API)."""
    return services().auth


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


def create_diagnosis(evidence: dict[str, Any], *, lang: str, top: int = 5) -> dict[str, Any]:
    """Validate, redact, diagnose and store evidence exactly as POST /v1/diagnoses does."""
    return diagnosis_service.create(validate_evidence(evidence), lang=lang, top=top)


def stored_diagnosis(diagnosis_id: str) -> StoredDiagnosis | None:
    return services().diagnoses().get(diagnosis_id)


def add_observations(diagnosis_id: str, observations: dict[str, bool], lang: str | None = None
                     ) -> tuple[StoredDiagnosis, dict[str, Any]]:
    """Record observations (``{"x.exp=outcome": True}``) and re-rank; return (before, after)."""
    before = diagnosis_service.stored(diagnosis_id)
    after, _text = diagnosis_service.observe_and_store(before, {"observations": observations}, lang=lang)
    return before, after


# ---------------------------------------------------------------- incidents


def record_incident(diagnosis_id: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """Create an incident pre-filled from a stored diagnosis (overrides win); return it."""
    record = diagnosis_service.incident_from_diagnosis(diagnosis_service.stored(diagnosis_id).diagnosis, overrides)
    return services().incidents().add(record)  # the store redacts secrets on every write


def update_incident(incident_id: str, patch: dict[str, Any], version: int | None = None) -> dict[str, Any]:
    """Change an incident if it is still at ``version`` (StaleVersionError otherwise); the store redacts."""
    return services().incidents().update(incident_id, patch, expected_version=version)
