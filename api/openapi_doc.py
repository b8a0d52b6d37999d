"""A complete OpenAPI document: an operationId, an example and every error response on each operation.

An apispec plugin completes each operation as flask-smorest registers it, from the operation's
own shape (bearer security -> 401 and 403; a path id -> 404; a request body -> 413, 415 and 422)
plus the table below for what the shape does not tell (which operations can conflict, 409) and
the examples. Error responses point at the problem+json components of api/errors.py.
"""

from __future__ import annotations

import re
from http import HTTPStatus
from typing import Any

from apispec import BasePlugin

DIAGNOSIS_ID = "d20261201113142a459149d"
INCIDENT_ID = "INC-20261201-3FA9C1"
_CAUSE = {"id": "memory.foreign_process_on_gpu", "title": "Another process holds memory on the GPU",
          "probability": 0.84}
_DIAGNOSIS = {"id": DIAGNOSIS_ID, "summary": {"text": "Most likely memory.foreign_process_on_gpu (84%).",
                                              "verdict": "confident"},
              "causes": [_CAUSE], "scope": "single-rank", "phase": "first-step",
              "job": {"id": "48213", "cluster": "a100-east"}}
_INCIDENT = {"id": INCIDENT_ID, "title": "rank 3 OOM at the first step", "root_cause": "memory.foreign_process_on_gpu",
             "status": "resolved", "severity": "high"}
_EVIDENCE = {"description": "rank 3 ran out of GPU memory at the first step",
             "logs": [{"source": "rank3", "text": "[rank3]: torch.OutOfMemoryError: CUDA out of memory."}],
             "job": {"id": "48213", "name": "llama-sft", "cluster": "a100-east"}}

#: operationId -> extra error statuses, request example, success-response example
OPERATIONS: dict[str, dict[str, Any]] = {
    "healthz": {"response": {"status": "ok", "version": "0.1.0"}},
    "readyz": {"response": {"status": "ready", "auth": "bearer tokens",
                            "checks": {"knowledge": {"ok": True, "detail": "48 causes"}}}},
    "metricsEndpoint": {"response": "# TYPE dsdoctor_build_info gauge\n"
                                    'dsdoctor_build_info{version="0.1.0"} 1.0\n'},
    "createDiagnosis": {"request": _EVIDENCE, "response": _DIAGNOSIS},
    "listDiagnoses": {"response": {"items": [{"id": DIAGNOSIS_ID, "top_cause": _CAUSE["id"], "top_probability": 0.84,
                                              "url": f"/v1/diagnoses/{DIAGNOSIS_ID}", "job": _DIAGNOSIS["job"]}],
                                   "next_cursor": None}},
    "getDiagnosis": {"response": _DIAGNOSIS},
    "addObservations": {"errors": [409], "request": {"observations": {"x.single_gpu_repro=reproduces": True}},
                        "response": _DIAGNOSIS},
    "createIncidentFromDiagnosis": {"errors": [409], "request": {"root_cause": _CAUSE["id"], "status": "resolved"},
                                    "response": _INCIDENT},
    "createIncident": {"errors": [409], "request": {"title": _INCIDENT["title"], "root_cause": _CAUSE["id"],
                                                    "phenomenon": "torch.OutOfMemoryError on rank 3 only"},
                       "response": _INCIDENT},
    "listCauses": {"response": {"items": [{"id": _CAUSE["id"], "domain": "memory", "title": _CAUSE["title"]}]}},
    "getCause": {"response": {"id": _CAUSE["id"], "domain": "memory", "title": _CAUSE["title"], "prior": 0.02}},
    "listSymptoms": {"response": {"items": [{"id": "s.cuda_oom", "title": "CUDA out of memory"}]}},
    "listExperiments": {"response": {"items": [{"id": "x.single_gpu_repro", "title": "Reproduce on one GPU"}]}},
    "graph": {"response": {"nodes": [{"id": "s.cuda_oom", "kind": "symptom"}, {"id": _CAUSE["id"], "kind": "cause"}],
                           "edges": [{"source": "s.cuda_oom", "target": _CAUSE["id"], "kind": "explains"}]}},
    "searchIncidents": {"response": {"items": [_INCIDENT], "facets": {"root_cause": {_CAUSE["id"]: 1}},
                                     "next_cursor": None, "total": 1}},
    "getIncident": {"response": _INCIDENT},
    "updateIncident": {"request": {"status": "resolved", "fix": "kill the stray process before launch"},
                       "response": _INCIDENT},
    "deleteIncident": {},
    "similarIncidents": {"response": {"items": [{**_INCIDENT, "score": 0.71}]}},
    "slackCommand": {"errors": [401], "request": "command=/dsdoctor&text=search+OOM",
                     "response": {"response_type": "in_channel", "text": "1 incident found"}},
    "botQuery": {"request": {"text": "search OOM"}, "response": {"text": "1 incident found", "data": {}}},
}
#: endpoints whose function name alone would repeat another operationId
OPERATION_IDS = {"diagnoses.create_incident": "createIncidentFromDiagnosis"}
PATH_EXAMPLES = {"diagnosis_id": DIAGNOSIS_ID, "incident_id": INCIDENT_ID, "cause_id": _CAUSE["id"]}
ERRORS_OF_BODIES = (413, 415, 422)


def operation_id(endpoint: str) -> str:
    """``diagnoses.create_diagnosis`` -> ``createDiagnosis`` (unique: see OPERATION_IDS)."""
    if endpoint in OPERATION_IDS:
        return OPERATION_IDS[endpoint]
    head, *rest = endpoint.rsplit(".", 1)[-1].split("_")
    return head + "".join(word.capitalize() for word in rest)


def error_statuses(path: str, operation: dict[str, Any], extra: list[int]) -> list[int]:
    """Which problem responses an operation can answer with."""
    statuses = set(extra)
    if operation.get("security"):
        statuses |= {401, 403}
    if re.search(r"\{\w+\}", path):
        statuses.add(404)
    if "requestBody" in operation:
        statuses |= set(ERRORS_OF_BODIES)
    if any(p.get("in") == "query" for p in operation.get("parameters") or []):
        statuses.add(422)
    return sorted(statuses)


def _set_example(content: dict[str, Any], example: Any) -> None:
    """On the JSON body when there is one (the multipart forms carry files), else the only body."""
    media = content.get("application/json") or next(iter(content.values()), None)
    if media is not None:
        media.setdefault("example", example)


class CompleteOperations(BasePlugin):
    """Adds operationId, examples and error responses to every operation (see the module docstring)."""

    def path_helper(self, path: str | None = None, operations: dict | None = None, parameters: list | None = None,
                    **kwargs: Any) -> None:
        for parameter in parameters or []:
            if isinstance(parameter, dict) and parameter.get("in") == "path":
                parameter.setdefault("example", PATH_EXAMPLES.get(parameter.get("name"), "id"))

    def operation_helper(self, path: str | None = None, operations: dict | None = None, **kwargs: Any) -> None:
        rule = kwargs.get("rule")
        if rule is None or not operations:
            return
        for method, operation in operations.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            op_id = operation.setdefault("operationId", operation_id(rule.endpoint))
            info = OPERATIONS.get(op_id, {})
            responses = operation.setdefault("responses", {})
            for status in error_statuses(path or "", operation, info.get("errors", [])):
                if status not in responses and str(status) not in responses:
                    responses[status] = HTTPStatus(status).name
            if "request" in info and "requestBody" in operation:
                _set_example(operation["requestBody"].get("content") or {}, info["request"])
            if "response" in info:
                success = next((r for code, r in responses.items() if str(code).startswith("2") and isinstance(r, dict)),
                               None)
                if success is not None:
                    _set_example(success.get("content") or {}, info["response"])
