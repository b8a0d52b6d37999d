"""/v1/incidents: record, read, change, delete and search past incidents (Chinese and English)."""

from __future__ import annotations

from typing import Any

from flask_smorest import Blueprint

from api.auth import requires
from api.blueprints import json_response
from api.errors import field_error, validation_error
from api.redact import redact_value
from api.schemas import (
    IncidentListSchema,
    IncidentPatchSchema,
    IncidentQuerySchema,
    IncidentRequestSchema,
    IncidentSchema,
    SimilarListSchema,
    SimilarQuerySchema,
)
from api.services import services
from api.uploads import json_body

blp = Blueprint("incidents", __name__, url_prefix="/v1/incidents",
                description="Completed incidents: the site's memory, searchable and used as priors.")


def _object_body(what: str) -> dict[str, Any]:
    body = json_body(what)
    if not isinstance(body, dict):
        raise validation_error([field_error("", f"expected a JSON object, got {type(body).__name__}")])
    return redact_value(body)


@blp.route("", methods=["POST"])
@requires("incidents:write")
@blp.doc(requestBody={"required": True, "content": {"application/json": {"schema": IncidentRequestSchema}}})
@blp.response(201, IncidentSchema, headers={"Location": {"description": "URL of the new incident",
                                                         "schema": {"type": "string"}}})
def create_incident():
    """Record an incident (title, phenomenon and root_cause are required; the id is generated if absent)."""
    incident = services().incidents().add(_object_body("the incident"))
    return json_response(incident, 201, {"Location": f"/v1/incidents/{incident['id']}"})


@blp.route("", methods=["GET"])
@requires("incidents:read")
@blp.arguments(IncidentQuerySchema, location="query")
@blp.response(200, IncidentListSchema)
def search_incidents(query: dict[str, Any]):
    """Search incidents: free text `q` (English or Chinese) ranked by relevance, or newest first without
    `q`; filters combine; `facets` count root causes and domains over all matches."""
    found = services().incidents().search(
        q=query.get("q", ""), cause=query.get("cause"), domain=query.get("domain"), severity=query.get("severity"),
        tag=query.get("tag"), since=query.get("since"), until=query.get("until"), limit=query["limit"],
        cursor=query.get("cursor"))
    return json_response(found)


@blp.route("/<incident_id>", methods=["GET"])
@requires("incidents:read")
@blp.response(200, IncidentSchema)
def get_incident(incident_id: str):
    """One incident."""
    return json_response(services().incidents().get(incident_id))


@blp.route("/<incident_id>", methods=["PATCH"])
@requires("incidents:write")
@blp.doc(requestBody={"required": True, "content": {"application/json": {"schema": IncidentPatchSchema}}})
@blp.response(200, IncidentSchema)
def update_incident(incident_id: str):
    """Change some fields of an incident (`job` merges key by key; id and created_at never change)."""
    return json_response(services().incidents().update(incident_id, _object_body("the changes")))


@blp.route("/<incident_id>", methods=["DELETE"])
@requires("admin")
@blp.response(204)
def delete_incident(incident_id: str):
    """Delete an incident (admin scope)."""
    services().incidents().delete(incident_id)
    return "", 204


@blp.route("/<incident_id>/similar", methods=["GET"])
@requires("incidents:read")
@blp.arguments(SimilarQuerySchema, location="query")
@blp.response(200, SimilarListSchema)
def similar_incidents(query: dict[str, Any], incident_id: str):
    """Incidents most like this one (shared symptoms and text), best first, with a score in [0, 1]."""
    return json_response({"items": services().incidents().similar(incident_id, limit=query["limit"])})
