"""Evidence from request bodies: a JSON document, or multipart/form-data with raw files.

Pipelines have files, not JSON: ``logs`` (repeatable; ``.gz`` files are inflated with the same
size limit as the body), ``config`` (ds_config.json), ``metrics`` (JSON array, JSON Lines or
CSV ``name,rank,step,value``), ``environment`` (JSON), ``evidence`` (a whole evidence document
to start from), ``description`` and ``observations`` (a JSON object) as text fields or files.
"""

from __future__ import annotations

import csv
from pathlib import PurePosixPath
from typing import Any

from flask import current_app, request
from werkzeug.datastructures import FileStorage

from dsdoctor.api import strictjson
from dsdoctor.api.errors import ApiError, field_error, validation_error
from dsdoctor.api.limits import inflate, read_body

FORM_FIELDS = ("logs", "config", "metrics", "environment", "evidence", "description", "observations")
MAX_DEPTH = strictjson.MAX_DEPTH


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def parse_json_text(text: str, what: str) -> Any:
    """JSON text -> value (:func:`api.strictjson.parse`: 400 when malformed, 422 naming a bad field)."""
    return strictjson.parse(text, what, "form" if is_multipart() else "body")


def json_body(what: str = "the request body", *, allow_empty: bool = False) -> Any:
    """The request's JSON body (415 for other media types, 400 when malformed)."""
    if not request.mimetype or not (request.mimetype == "application/json" or request.mimetype.endswith("+json")):
        if allow_empty and not request.content_length and not request.headers.get("Transfer-Encoding"):
            return None
        raise ApiError(415, f"send {what} as JSON with 'Content-Type: application/json' "
                       f"(got {request.mimetype or 'no Content-Type'})", title="Unsupported Media Type")
    data = read_body()
    if not data.strip():
        if allow_empty:
            return None
        raise ApiError(400, f"{what} is empty; send a JSON object", title="Malformed JSON")
    return parse_json_text(_decode(data), what)


def is_multipart() -> bool:
    return request.mimetype == "multipart/form-data"


def _file_text(upload: FileStorage, what: str) -> str:
    """A file's text; gzip files (by name or magic bytes) are inflated within the body limit."""
    stream = upload.stream
    head = stream.read(2)
    stream.seek(0)
    if head == b"\x1f\x8b" or (upload.filename or "").endswith(".gz"):
        limit = int(current_app.config["MAX_CONTENT_LENGTH"])
        with inflate(stream, limit, what) as inflated:
            return _decode(inflated.read())
    return _decode(stream.read())


def _source_name(upload: FileStorage, index: int) -> str:
    name = PurePosixPath((upload.filename or "").replace("\\", "/")).name
    for suffix in (".gz", ".log", ".txt", ".out", ".err"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name[:200] or f"upload{index}"


def _text_part(name: str) -> str | None:
    """A part sent as a text field or as a file."""
    if name in request.files:
        return _file_text(request.files[name], f"file '{name}'")
    if name in request.form:
        return request.form[name]
    return None


def parse_metrics_text(text: str) -> list[Any]:
    """Metrics as a JSON array, JSON Lines, or CSV with columns name,rank,step,value."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        data = parse_json_text(text, "file 'metrics'")
        if not isinstance(data, list):
            raise validation_error([field_error("metrics", "must be a JSON array of objects", "form")])
        return data
    if stripped.startswith("{"):
        return [parse_json_text(line, f"file 'metrics' line {n}")
                for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    reader = csv.DictReader(text.splitlines())
    if not reader.fieldnames or not {"name", "value"} <= set(reader.fieldnames):
        raise validation_error([field_error("metrics", "expected a JSON array, JSON Lines, or CSV with columns "
                                            "name,rank,step,value", "form")])
    rows = []
    for row in reader:
        item: dict[str, Any] = {"name": row.get("name") or ""}
        for key in ("rank", "step"):
            if (row.get(key) or "").strip():
                item[key] = _number(row[key], key, int)
        item["value"] = _metric_value(row.get("value") or "")
        rows.append(item)
    return rows


def _number(text: str, field: str, kind: type) -> Any:
    try:
        return kind(text.strip())
    except ValueError:
        raise validation_error([field_error(f"metrics.{field}", "must be a whole number", "form")]) \
            from None


def _metric_value(text: str) -> Any:
    value = text.strip().lower()
    if value in ("nan", "inf", "-inf", "+inf"):
        return value.lstrip("+")
    try:
        return float(value)
    except ValueError:
        return text  # the schema reports it with the allowed forms


def _check_multipart() -> None:
    """400 for a multipart body werkzeug could not split: it reads one as empty rather than saying so."""
    boundary = request.mimetype_params.get("boundary", "")
    if not boundary:
        raise ApiError(400, "multipart/form-data needs a boundary: Content-Type: multipart/form-data; "
                       "boundary=<text that separates the parts> (curl -F sets it)", title="Malformed multipart body")
    if not request.form and not request.files and (request.content_length or 0) > 0:
        raise ApiError(400, "the multipart body could not be read: no part starts with the boundary named in "
                       "Content-Type, or the body ends before its closing boundary", title="Malformed multipart body")


def evidence_from_form() -> dict[str, Any]:
    """Build an evidence document from a multipart/form-data request."""
    _check_multipart()
    unknown = sorted((set(request.form) | set(request.files)) - set(FORM_FIELDS))
    if unknown:
        raise validation_error([field_error(k, f"unknown form field; allowed: {', '.join(FORM_FIELDS)}", "form")
                                for k in unknown])
    evidence: dict[str, Any] = {}
    base = _text_part("evidence")
    if base is not None:
        evidence = parse_json_text(base, "part 'evidence'")
        if not isinstance(evidence, dict):
            raise validation_error([field_error("evidence", "must be a JSON object (an evidence document)", "form")])
    uploads = request.files.getlist("logs")
    for i, upload in enumerate(uploads):
        evidence.setdefault("logs", []).append({"source": _source_name(upload, i),
                                                "text": _file_text(upload, f"log file {upload.filename!r}")})
    for text in request.form.getlist("logs"):
        evidence.setdefault("logs", []).append({"source": "form", "text": text})
    for name in ("config", "environment", "observations"):
        text = _text_part(name)
        if text is not None:
            value = parse_json_text(text, f"part '{name}'")
            if not isinstance(value, dict):
                raise validation_error([field_error(name, "must be a JSON object", "form")])
            evidence[name] = value
    metrics = _text_part("metrics")
    if metrics is not None:
        evidence["metrics"] = parse_metrics_text(metrics)
    description = _text_part("description")
    if description is not None:
        evidence["description"] = description
    return evidence


def request_evidence(what: str = "the evidence document") -> Any:
    """The evidence of a POST: JSON document or multipart files (415 for anything else)."""
    if is_multipart():
        return evidence_from_form()
    if request.mimetype == "application/x-www-form-urlencoded":
        raise ApiError(415, "send the evidence as application/json, or files as multipart/form-data "
                       "(curl -F logs=@rank0.log)", title="Unsupported Media Type")
    return json_body(what)
