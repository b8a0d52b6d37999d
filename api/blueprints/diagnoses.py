"""/v1/diagnoses: diagnose evidence, keep the result, add observations, turn it into an incident."""

from __future__ import annotations

from typing import Any

from flask_smorest import Blueprint
from marshmallow import Schema, ValidationError

from dsdoctor.api.auth import requires
from dsdoctor.api.blueprints import json_response
from dsdoctor.api.diagnosis_service import (
    diagnose_and_store,
    incident_from_diagnosis,
    observe_and_store,
    stored,
)
from dsdoctor.api.errors import ApiError, field_error, flatten_messages, validation_error
from dsdoctor.api.schemas import (
    DiagnoseQuerySchema,
    DiagnosisListSchema,
    DiagnosisMultipartSchema,
    DiagnosisSchema,
    EvidenceSchema,
    IncidentFromDiagnosisSchema,
    IncidentSchema,
    ListQuerySchema,
    ObservationsMultipartSchema,
    ObservationsRequestSchema,
    ReRunQuerySchema,
    explain_errors,
)
from dsdoctor.api.services import services
from dsdoctor.api.uploads import evidence_from_form, is_multipart, json_body, request_evidence
from dsdoctor.kb.storage.diagnoses import InvalidCursor

blp = Blueprint("diagnoses", __name__, url_prefix="/v1/diagnoses",
                description="Diagnose evidence of a failed job; add observations; record it as an incident.")

_EVIDENCE = EvidenceSchema()
_OBSERVATIONS = ObservationsRequestSchema()
_INCIDENT_OVERRIDES = IncidentFromDiagnosisSchema()
MAX_RETRIES = 5


def _evidence_body(schema_doc: dict[str, Any]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": schema_doc}}


_DIAGNOSE_BODY = _evidence_body({"application/json": {"schema": EvidenceSchema},
                                 "multipart/form-data": {"schema": DiagnosisMultipartSchema}})
_OBSERVE_BODY = _evidence_body({"application/json": {"schema": ObservationsRequestSchema},
                                "multipart/form-data": {"schema": ObservationsMultipartSchema}})
_INCIDENT_BODY = {"requestBody": {"required": False,
                                  "content": {"application/json": {"schema": IncidentFromDiagnosisSchema}}}}


def _load(schema: Schema, data: Any, location: str = "body") -> dict[str, Any]:
    """Validate a request document; a 422 problem naming every bad field and what it accepts."""
    if not isinstance(data, dict):
        raise validation_error([field_error("", f"expected a JSON object, got {type(data).__name__}", location)])
    try:
        return schema.load(data)
    except ValidationError as exc:
        raise validation_error(flatten_messages(explain_errors(schema, exc.messages), location)) from None


@blp.route("", methods=["POST"])
@requires("diagnose")
@blp.arguments(DiagnoseQuerySchema, location="query")
@blp.doc(**_DIAGNOSE_BODY)
@blp.response(201, DiagnosisSchema, headers={"Location": {"description": "URL of the stored diagnosis",
                                                          "schema": {"type": "string"}}})
def create_diagnosis(query: dict[str, Any]):
    """Diagnose evidence (JSON document, or multipart log files) and store the result.

    Secrets in the evidence are redacted before it is stored or echoed. Bodies may be sent
    with `Content-Encoding: gzip`.
    """
    evidence = _load(_EVIDENCE, request_evidence(), "form" if is_multipart() else "body")
    result, text = diagnose_and_store(evidence, lang=query["lang"], top=query["top"])
    return json_response(text, 201, {"Location": f"/v1/diagnoses/{result['id']}"})


@blp.route("", methods=["GET"])
@requires("diagnose")
@blp.arguments(ListQuerySchema, location="query")
@blp.response(200, DiagnosisListSchema)
def list_diagnoses(query: dict[str, Any]):
    """Stored diagnoses, newest first; pass `next_cursor` back as `cursor` for the next page.

    Filter by the evidence's job with `job_id` and `cluster`."""
    try:
        items, next_cursor = services().diagnoses().list(since=query.get("since"), limit=query["limit"],
                                                         cursor=query.get("cursor"), job_id=query.get("job_id"),
                                                         cluster=query.get("cluster"))
    except InvalidCursor as exc:
        raise validation_error([field_error("cursor", str(exc), "query")]) from None
    return json_response({"items": items, "next_cursor": next_cursor})


@blp.route("/<diagnosis_id>", methods=["GET"])
@requires("diagnose")
@blp.response(200, DiagnosisSchema)
def get_diagnosis(diagnosis_id: str):
    """One stored diagnosis, as last computed (with its observation history)."""
    text = services().diagnoses().get_json(diagnosis_id)
    if text is None:
        raise ApiError(404, f"no diagnosis with id {diagnosis_id!r}", title="Not Found")
    return json_response(text)


def _observation_request() -> dict[str, Any]:
    if is_multipart():
        raw = evidence_from_form()
        raw = {k: v for k, v in raw.items() if k in ("observations", "logs", "description")}
        return _load(_OBSERVATIONS, raw, "form")
    return _load(_OBSERVATIONS, json_body("the observations"))


@blp.route("/<diagnosis_id>/observations", methods=["POST"])
@requires("diagnose")
@blp.arguments(ReRunQuerySchema, location="query")
@blp.doc(**_OBSERVE_BODY)
@blp.response(200, DiagnosisSchema)
def add_observations(query: dict[str, Any], diagnosis_id: str):
    """Add what was observed (experiment outcomes `x.exp=outcome`, symptoms true/false) and/or more
    evidence; the diagnosis is re-ranked and the history of observations kept."""
    current = stored(diagnosis_id)
    _result, text = observe_and_store(current, _observation_request(), lang=query.get("lang"))
    return json_response(text)


@blp.route("/<diagnosis_id>/incident", methods=["POST"])
@requires("incidents:write")
@blp.doc(**_INCIDENT_BODY)
@blp.response(201, IncidentSchema, headers={"Location": {"description": "URL of the new incident",
                                                         "schema": {"type": "string"}}})
def create_incident(diagnosis_id: str):
    """Record the diagnosis as an incident, pre-filled: phenomenon from the first error and summary,
    scope, root cause = top cause, fix = its first fix, symptoms, diagnosis_id. The optional body
    overrides fields (e.g. the confirmed `root_cause`, `status`, `fix`)."""
    current = stored(diagnosis_id)
    body = json_body("the incident overrides", allow_empty=True)
    overrides = _load(_INCIDENT_OVERRIDES, body) if body is not None else {}
    record = incident_from_diagnosis(current.diagnosis, overrides)
    incident = services().incidents().add(record)
    return json_response(incident, 201, {"Location": f"/v1/incidents/{incident['id']}"})
