"""The "new diagnosis" form -> an evidence document (pasted logs, uploaded files, ds_config, metrics)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from flask import current_app
from werkzeug.datastructures import FileStorage, ImmutableMultiDict

from dsdoctor.api.errors import ApiError
from dsdoctor.api.web.backend import FormProblem

#: the form's field names (the template uses the same)
LOGS_TEXT, LOG_FILES = "logs_text", "log_files"
CONFIG_TEXT, CONFIG_FILE = "config_text", "config_file"
METRICS_FILE, DESCRIPTION = "metrics_file", "description"
SUFFIXES = (".gz", ".log", ".txt", ".out", ".err")
#: the message of an empty form (the page shows its translation)
NEED_INPUT = "paste log lines, upload a log file or write a description"


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _limit() -> int:
    return int(current_app.config.get("MAX_CONTENT_LENGTH") or 32 * 1024 * 1024)


def file_text(upload: FileStorage, what: str) -> str:
    """An uploaded file as text; gzip files are inflated within the body size limit."""
    stream = upload.stream
    head = stream.read(2)
    stream.seek(0)
    if head == b"\x1f\x8b" or (upload.filename or "").endswith(".gz"):
        from dsdoctor.api.limits import inflate

        with inflate(stream, _limit(), what) as inflated:
            return _decode(inflated.read())
    return _decode(stream.read())


def source_name(upload: FileStorage, index: int) -> str:
    """``rank3.log.gz`` -> ``rank3``: the file name as the log's source hint."""
    name = PurePosixPath((upload.filename or "").replace("\\", "/")).name
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name[:200] or f"upload{index + 1}"


def _uploads(files: ImmutableMultiDict, name: str) -> list[FileStorage]:
    return [f for f in files.getlist(name) if f and (f.filename or "")]


def _problem(field: str, exc: ApiError) -> FormProblem:
    detail = exc.detail
    if exc.errors:
        detail = "; ".join(e.get("message", "") for e in exc.errors) or detail
    return FormProblem({field: detail}, 413 if exc.status == 413 else 422)


def evidence_from_form(form: ImmutableMultiDict, files: ImmutableMultiDict) -> dict[str, Any]:
    """Build the evidence document; FormProblem names the field that cannot be used and why."""
    from dsdoctor.api.uploads import parse_json_text, parse_metrics_text

    evidence: dict[str, Any] = {}
    logs: list[dict[str, str]] = []
    pasted = form.get(LOGS_TEXT, "")
    if pasted.strip():
        logs.append({"source": "pasted", "text": pasted})
    for i, upload in enumerate(_uploads(files, LOG_FILES)):
        try:
            logs.append({"source": source_name(upload, i), "text": file_text(upload, f"log file {upload.filename!r}")})
        except ApiError as exc:
            raise _problem(LOG_FILES, exc) from None
    if logs:
        evidence["logs"] = logs

    config_uploads = _uploads(files, CONFIG_FILE)
    config_text = form.get(CONFIG_TEXT, "")
    field = CONFIG_FILE if config_uploads else CONFIG_TEXT
    try:
        if config_uploads:
            config_text = file_text(config_uploads[0], "ds_config file")
        if config_text.strip():
            config = parse_json_text(config_text, "the ds_config")
            if not isinstance(config, dict):
                raise FormProblem({field: "the ds_config must be a JSON object such as {\"train_batch_size\": 32}"})
            evidence["config"] = config
    except ApiError as exc:
        raise _problem(field, exc) from None

    metrics_uploads = _uploads(files, METRICS_FILE)
    if metrics_uploads:
        try:
            evidence["metrics"] = parse_metrics_text(file_text(metrics_uploads[0], "metrics file"))
        except ApiError as exc:
            raise _problem(METRICS_FILE, exc) from None

    description = form.get(DESCRIPTION, "")
    if description.strip():
        evidence["description"] = description
    if not evidence.get("logs") and not evidence.get("description"):
        raise FormProblem({LOGS_TEXT: NEED_INPUT})
    return evidence
