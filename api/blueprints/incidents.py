"""/v1/incidents: record, read, change, delete and search past incidents (Chinese and English)."""

from __future__ import annotations

from typing import Any

from flask import request
from flask_smorest import Blueprint

from dsdoctor.api.auth import requires
from dsdoctor.api.blueprints import json_response
from dsdoctor.api.errors import ApiError, field_error, validation_error
from dsdoctor.api.schemas import (
    IncidentListSchema,
    IncidentPatchSchema,
    IncidentQuerySchema,
    IncidentRequestSchema,
    IncidentSchema,
    SimilarListSchema,
    SimilarQuerySchema,
)
from dsdoctor.api.services import services
from dsdoctor.api.uploads import json_body

blp = Blueprint("incidents", __name__, url_prefix="/v1/incidents",
                description="Completed incidents: the site's memory, searchable and used as priors.")

_ETAG = {"ETag": {"description": 'the incident\'s version, e.g. "3"; send it back in If-Match to change '
                                 'exactly that version', "schema": {"type": "string"}}}
_IF_MATCH = {"name": "If-Match", "in": "header", "required": False, "schema": {"type": "string"},
             "description": 'the ETag of the version this change applies to (e.g. "3"); a changed incident '
                            "answers 412 Precondition Failed"}


def etag(incident: dict[str, Any]) -> str:
    """The ETag of an incident: its version, quoted."""
    return f'"{incident["version"]}"'


def _if_match() -> int | None:
    """The version named by If-Match (None when absent or ``*``); 400 when it is no ETag of ours."""
    header = request.headers.get("If-Match")
    if header is None or header.strip() == "*":
        return None
    tag = header.strip().removeprefix("W/")
    if len(tag) < 3 or not (tag[0] == tag[-1] == '"') or not tag[1:-1].isascii() or not tag[1:-1].isdigit():
        raise ApiError(400, 'If-Match must be the ETag of the incident, e.g. "3" (from GET or the last PATCH)')
    return int(tag[1:-1])


def _object_body(what: str) -> dict[str, Any]:
    body = json_body(what)
    if not isinstance(body, dict):
        raise validation_error([field_error("", f"expected a JSON object, got {type(body).__name__}")])
    return body  # the store redacts secrets on every write


@blp.route("", methods=["POST"])
@requires("incidents:write")
@blp.doc(requestBody={"required": True, "content": {"application/json": {"schema": IncidentRequestSchema}}})
@blp.response(201, IncidentSchema, headers={"Location": {"description": "URL of the new incident",
                                                         "schema": {"type": "string"}}, **_ETAG})
def create_incident():
    """Record an incident (title, phenomenon and root_cause are required; the id is generated if absent)."""
    incident = services().incidents().add(_object_body("the incident"))
    return json_response(incident, 201, {"Location": f"/v1/incidents/{incident['id']}", "ETag": etag(incident)})


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
@blp.response(200, IncidentSchema, headers=_ETAG)
def get_incident(incident_id: str):
    """One incident; its ETag names the version (send it as If-Match when changing it)."""
    incident = services().incidents().get(incident_id)
    return json_response(incident, headers={"ETag": etag(incident)})


@blp.route("/<incident_id>", methods=["PATCH"])
@requires("incidents:write")
@blp.doc(requestBody={"required": True, "content": {"application/json": {"schema": IncidentPatchSchema}}},
         parameters=[_IF_MATCH])
@blp.response(200, IncidentSchema, headers=_ETAG)
@blp.alt_response(412, "PRECONDITION_FAILED")  # If-Match names a version that is no longer current
def update_incident(incident_id: str):
    """Change some fields of an incident (`job` merges key by key; id and created_at never change).

    Send `If-Match: "<version>"` (the ETag of GET) so that a change made meanwhile by someone else
    is not overwritten: a stale version answers 412 and changes nothing."""
    expected = _if_match()
    incident = services().incidents().update(incident_id, _object_body("the changes"), expected_version=expected)
    return json_response(incident, headers={"ETag": etag(incident)})


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
