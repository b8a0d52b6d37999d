"""One error shape for the whole API: RFC 9457 problem details (``application/problem+json``).

Every 4xx/5xx response comes from :func:`problem_response`: HTTP errors raised by Flask and
Werkzeug (404, 405, 413, ...), request validation from webargs/marshmallow, errors of the
knowledge base and the incident store, :class:`ApiError` raised by the views, and anything
unexpected (a 500 whose detail names a log reference, never a traceback).

Validation problems carry ``errors``: a list of ``{"field", "location", "message"}`` objects
(``field`` is a dotted path such as ``logs.0.text``; the message says what is allowed).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable, Mapping
from http import HTTPStatus
from typing import Any

import flask_smorest
import marshmallow
from flask import Flask, current_app, json, request
from flask_smorest.utils import prepare_response
from werkzeug.exceptions import HTTPException

from dsdoctor.kb.errors import DsdoctorError, KnowledgeError
from dsdoctor.kb.redact import redact_text

PROBLEM_JSON = "application/problem+json"
VALIDATION_TYPE = "urn:dsdoctor:problem:validation"
log = logging.getLogger("dsdoctor.api")


class ApiError(Exception):
    """An error a view raises on purpose; becomes a problem document."""

    def __init__(self, status: int, detail: str, *, title: str | None = None, type_: str = "about:blank",
                 errors: list[dict[str, Any]] | None = None, headers: Mapping[str, str] | None = None,
                 **extra: Any):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.title = title or HTTPStatus(status).phrase
        self.type = type_
        self.errors = errors
        self.headers = dict(headers or {})
        self.extra = extra


def field_error(field: str, message: str, location: str = "body") -> dict[str, str]:
    """One entry of a problem's ``errors`` list."""
    return {"field": field, "location": location, "message": message}


def validation_error(errors: list[dict[str, str]], detail: str | None = None, status: int = 422) -> ApiError:
    """An ApiError for invalid input, naming each field and what it accepts."""
    if detail is None:
        first = errors[0] if errors else {"field": "", "message": "invalid input"}
        where = f"{first['field']}: " if first.get("field") else ""
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        detail = f"invalid request: {where}{first['message']}{more}"
    return ApiError(status, detail, title="Invalid request" if status == 422 else None, type_=VALIDATION_TYPE,
                    errors=errors)


def flatten_messages(messages: Any, location: str = "body", prefix: str = "") -> list[dict[str, str]]:
    """marshmallow's nested ``{"field": ["msg"], "logs": {0: {"text": [...]}}}`` as a flat list."""
    out: list[dict[str, str]] = []
    if isinstance(messages, Mapping):
        for key, sub in messages.items():
            name = "" if key == "_schema" else str(key)
            path = f"{prefix}.{name}" if prefix and name else (name or prefix)
            out.extend(flatten_messages(sub, location, path))
    elif isinstance(messages, list | tuple) and all(isinstance(m, str) for m in messages):
        out.extend(field_error(prefix, m, location) for m in messages)
    elif isinstance(messages, list | tuple):
        for i, sub in enumerate(messages):
            out.extend(flatten_messages(sub, location, f"{prefix}.{i}" if prefix else str(i)))
    else:
        out.append(field_error(prefix, str(messages), location))
    return out


def _webargs_errors(data: Mapping[str, Any]) -> list[dict[str, str]]:
    messages = data.get("errors") or data.get("messages") or {}
    out: list[dict[str, str]] = []
    for location, fields in messages.items() if isinstance(messages, Mapping) else ():
        out.extend(flatten_messages(fields, "query" if location == "querystring" else str(location)))
    return out


def _http_problem(error: HTTPException) -> ApiError:
    status = error.code or 500
    headers = {k: v for k, v in error.get_headers() if k.lower() != "content-type"}
    data = getattr(error, "data", None) or {}
    if status == 422 and data:
        return validation_error(_webargs_errors(data))
    detail = str(data.get("message") or error.description or HTTPStatus(status).phrase)
    if status == 404 and not data.get("message") and request.url_rule is None:
        detail = f"no such endpoint: {request.method} {request.path}; see /openapi.json or /docs"
    elif status == 405:
        allowed = headers.get("Allow", "")
        detail = f"{request.method} is not allowed on {request.path}; allowed: {allowed}"
    elif status == 413:
        from dsdoctor.api.limits import too_large

        limit = int(current_app.config.get("MAX_CONTENT_LENGTH") or 0)
        if request.mimetype == "multipart/form-data" and request.content_length is not None \
                and request.content_length <= limit:  # within the size: werkzeug counted too many parts
            parts = current_app.config.get("MAX_FORM_PARTS")
            return ApiError(413, f"the multipart body has more than {parts} parts (files and fields); send fewer "
                            "files, e.g. concatenate the logs of one node into one file", title="Content Too Large")
        return too_large(limit)
    return ApiError(status, detail, title=error.name, headers=headers)


def _as_problem(exc: BaseException) -> ApiError:
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, HTTPException):
        return _http_problem(exc)
    if isinstance(exc, marshmallow.ValidationError):
        return validation_error(flatten_messages(exc.messages))
    if isinstance(exc, KnowledgeError):
        return ApiError(503, f"the knowledge base failed to load: {exc}", title="Knowledge base unavailable",
                        problems=[str(p) for p in exc.problems[:50]])
    if isinstance(exc, DsdoctorError):
        status = int(getattr(exc, "http_status", 422))
        messages = getattr(exc, "messages", None)
        if isinstance(messages, Mapping):
            return validation_error(flatten_messages(messages), detail=str(exc), status=status)
        return ApiError(status, str(exc))
    reference = secrets.token_hex(6)
    log.error("internal error %s on %s %s", reference, request.method, request.path, exc_info=exc)
    return ApiError(500, f"an internal error occurred; the server log has the details under reference {reference}",
                    reference=reference)


def problem_response(exc: BaseException):
    """The one error handler: any exception -> an RFC 9457 ``application/problem+json`` response."""
    problem = _as_problem(exc)
    # messages never quote submitted values on purpose; ids a client sent (an unknown cause, a path)
    # still could hold a secret, so the text of every problem passes the redactor too
    body: dict[str, Any] = {"type": problem.type, "title": problem.title, "status": problem.status,
                            "detail": redact_text(problem.detail), "instance": redact_text(request.path)}
    if problem.errors is not None:
        body["errors"] = [{**e, "field": redact_text(str(e.get("field", ""))),
                           "message": redact_text(str(e.get("message", "")))} for e in problem.errors]
    body.update(problem.extra)
    response = current_app.response_class(json.dumps(body), status=problem.status, mimetype=PROBLEM_JSON)
    for key, value in problem.headers.items():
        response.headers[key] = value
    return response


class DsdoctorApi(flask_smorest.Api):
    """flask-smorest's Api with problem+json errors (Allow and WWW-Authenticate headers kept)."""

    def handle_http_exception(self, error):
        return problem_response(error)

    def _register_responses(self):
        """Document every error response as application/problem+json with :class:`ProblemSchema`."""
        for status in HTTPStatus:
            response: dict[str, Any] = {"description": status.phrase}
            if status >= 400:
                response["schema"] = ProblemSchema
            prepare_response(response, self.spec, PROBLEM_JSON)
            self.spec.components.response(status.name, response, lazy=True)
        response = {"description": "Error (RFC 9457 problem details)", "schema": ProblemSchema}
        prepare_response(response, self.spec, PROBLEM_JSON)
        self.spec.components.response(self.DEFAULT_ERROR_RESPONSE_NAME, response, lazy=True)


class FieldErrorSchema(marshmallow.Schema):
    field = marshmallow.fields.String(required=True, metadata={"description": "dotted path, e.g. logs.0.text"})
    location = marshmallow.fields.String(required=True, metadata={"description": "body, query, path, form, files"})
    message = marshmallow.fields.String(required=True, metadata={"description": "what is wrong and what is allowed"})


class ProblemSchema(marshmallow.Schema):
    """RFC 9457 problem details; extension members (reference, checks, problems, auth) may follow."""

    class Meta:
        unknown = marshmallow.INCLUDE

    type = marshmallow.fields.String(required=True)
    title = marshmallow.fields.String(required=True)
    status = marshmallow.fields.Integer(required=True)
    detail = marshmallow.fields.String(required=True)
    instance = marshmallow.fields.String(required=True)
    errors = marshmallow.fields.List(marshmallow.fields.Nested(FieldErrorSchema))


def register_error_handlers(app: Flask, exceptions: Iterable[type[BaseException]] = (Exception,)) -> None:
    """Route every exception (HTTP ones come through :class:`DsdoctorApi`) to :func:`problem_response`."""
    for exc in exceptions:
        app.register_error_handler(exc, problem_response)
