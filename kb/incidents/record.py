"""The incident record: marshmallow schema, validation and normalisation.

A record is a plain dict with the keys of :data:`RECORD_FIELDS`. Text fields may be Chinese,
English or both. Timestamps are stored as UTC ``YYYY-MM-DDTHH:MM:SSZ``; a date alone means
midnight UTC. ``domain`` is derived from ``root_cause`` (its first segment) and never stored
apart from it.
"""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import marshmallow
from marshmallow import RAISE, Schema, fields, validate, validates_schema

from dsdoctor.kb.incidents import ValidationError
from dsdoctor.kb.model import DOMAINS

SEVERITIES = ("critical", "high", "medium", "low")
STATUSES = ("open", "resolved")
TEXT_FIELDS = ("title", "phenomenon", "scope", "root_cause_detail", "fix", "regression", "prevention",
               "evidence_summary")
#: every key of a record, in display order
RECORD_FIELDS = ("id", "title", "phenomenon", "scope", "root_cause", "domain", "root_cause_detail", "fix",
                 "regression", "prevention", "severity", "status", "tags", "occurred_at", "created_at",
                 "updated_at", "version", "author", "source_url", "job", "diagnosis_id", "evidence_summary", "symptoms")
#: keys a patch may not change
IMMUTABLE_FIELDS = ("id", "created_at")
#: keys the store sets; a patch that sends them is refused
DERIVED_FIELDS = ("domain", "updated_at", "version")
JOB_FIELDS = ("cluster", "job_id", "world_size", "node_count", "model", "versions")

#: ids of the public incidents shipped with dsdoctor (bench/corpus -> kb/data/incidents/public.jsonl)
PUBLIC_PREFIX = "PUB-"
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,79}$"
CAUSE_PATTERN = r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$"
SYMPTOM_PATTERN = r"^s\.[a-z0-9_]+$"
TAG_PATTERN = r"^[^\s,]{1,40}$"
MAX_TEXT = 20_000

CauseSource = Iterable[str] | Callable[[], Iterable[str]] | None


def utc_now() -> str:
    """The current time as a record timestamp."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_timestamp(value: Any, *, end_of_day: bool = False) -> str:
    """Normalise an ISO date or datetime to ``YYYY-MM-DDTHH:MM:SSZ`` (UTC); raise ValueError."""
    if isinstance(value, dt.datetime):
        moment = value
    elif isinstance(value, dt.date):
        moment = dt.datetime.combine(value, dt.time.max if end_of_day else dt.time.min)
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            try:
                day = dt.date.fromisoformat(text)
            except ValueError as exc:
                raise ValueError(f"is not a valid date ({exc})") from None
            moment = dt.datetime.combine(day, dt.time.max if end_of_day else dt.time.min)
        else:
            try:
                moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
            except ValueError:
                raise ValueError("is not an ISO date or datetime such as 2024-05-01 or 2024-05-01T13:45:00Z") \
                    from None
    else:
        raise ValueError("expected an ISO date or datetime such as 2024-05-01 or 2024-05-01T13:45:00Z, got "
                         f"{type(value).__name__}")
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.UTC).replace(tzinfo=None)
    if moment.year < 1990 or moment.year > 2200:
        raise ValueError(f"year {moment.year} is out of range (1990-2200)")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class Timestamp(fields.Field):
    """An ISO date or datetime, normalised to UTC ``YYYY-MM-DDTHH:MM:SSZ``."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        try:
            return parse_timestamp(value)
        except ValueError as exc:
            raise marshmallow.ValidationError(str(exc)) from None


class Text(fields.String):
    """Text with surrounding whitespace removed; numbers and booleans are refused."""

    def __init__(self, *, max_length: int = MAX_TEXT, allow_empty: bool = True, **kwargs: Any):
        super().__init__(**kwargs)
        self.max_length = max_length
        self.allow_empty = allow_empty

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        if not isinstance(value, str):
            raise marshmallow.ValidationError(f"must be text, got {type(value).__name__}")
        text = value.strip()
        if not text and not self.allow_empty:
            raise marshmallow.ValidationError("must not be empty")
        if len(text) > self.max_length:
            raise marshmallow.ValidationError(f"is {len(text)} characters long; the limit is {self.max_length}")
        return text


class WholeNumber(fields.Integer):
    """A whole number; floats, booleans and quoted numbers are refused."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise marshmallow.ValidationError(f"must be a whole number, got {type(value).__name__}")
        return value


class JobSchema(Schema):
    """Facts about the job the incident happened in (all optional)."""

    class Meta:
        unknown = RAISE

    cluster = Text(max_length=200, metadata={"description": "cluster or site name"})
    job_id = Text(max_length=200, metadata={"description": "scheduler job id"})
    world_size = WholeNumber(validate=validate.Range(1, 10_000_000), metadata={"description": "number of ranks"})
    node_count = WholeNumber(validate=validate.Range(1, 1_000_000), metadata={"description": "number of nodes"})
    model = Text(max_length=200, metadata={"description": "model trained, e.g. llama-70b"})
    versions = fields.Dict(
        keys=fields.String(validate=validate.Regexp(r"^[A-Za-z0-9_.+-]{1,40}$", error="version names are "
                                                    "short words such as torch, deepspeed, nccl, cuda, driver")),
        values=Text(max_length=100),
        metadata={"description": "software versions, e.g. {torch: 2.3.0, nccl: 2.20.5}"},
    )

    @validates_schema
    def _nodes_within_world(self, data: dict[str, Any], **kwargs: Any) -> None:
        nodes, world = data.get("node_count"), data.get("world_size")
        if nodes is not None and world is not None and nodes > world:
            raise marshmallow.ValidationError(f"node_count {nodes} exceeds world_size {world}", "node_count")


class IncidentSchema(Schema):
    """What a client may send for an incident (``add``, ``import``; ``update`` with partial=True)."""

    class Meta:
        unknown = RAISE

    id = fields.String(validate=validate.Regexp(ID_PATTERN, error="ids are 1-80 characters of letters, digits and "
                                                ". _ : - (starting with a letter or digit), e.g. INC-2024-0042"),
                       metadata={"description": "incident id; generated when absent"})
    title = Text(required=True, allow_empty=False, max_length=300, metadata={"description": "one-line summary"})
    phenomenon = Text(required=True, allow_empty=False, metadata={"description": "what was seen (messages, ranks, timing)"})
    scope = Text(load_default="", metadata={"description": "which ranks/nodes/jobs were affected"})
    root_cause = fields.String(required=True, metadata={"description": "root-cause ID of the knowledge base"})
    domain = fields.String(metadata={"description": "derived from root_cause; accepted only when it agrees"})
    root_cause_detail = Text(load_default="", metadata={"description": "the root cause in this site's own words"})
    fix = Text(load_default="", metadata={"description": "what fixed it (required once resolved)"})
    regression = Text(load_default="", metadata={"description": "how the fix was verified"})
    prevention = Text(load_default="", metadata={"description": "what prevents a recurrence"})
    severity = fields.String(load_default="medium", validate=validate.OneOf(SEVERITIES))
    status = fields.String(load_default="open", validate=validate.OneOf(STATUSES))
    tags = fields.List(fields.String(validate=validate.Regexp(TAG_PATTERN, error="tags are 1-40 characters "
                                                              "without spaces or commas")),
                       load_default=list, validate=validate.Length(max=30))
    occurred_at = Timestamp(metadata={"description": "when it happened; defaults to created_at"})
    created_at = Timestamp(metadata={"description": "set by the store; kept on import"})
    updated_at = Timestamp(metadata={"description": "set by the store; kept on import"})
    version = WholeNumber(metadata={"description": "set by the store: 1, then +1 on every change"})
    author = Text(load_default="", max_length=200)
    source_url = fields.String(load_default="", validate=validate.Regexp(
        r"^(https?://[^\s<>\"']{1,500})?$", error="source_url is an http(s) address (at most 500 characters)"),
        metadata={"description": "where the failure was reported (public incidents: its issue thread)"})
    job = fields.Nested(JobSchema, load_default=dict)
    diagnosis_id = fields.String(load_default=None, allow_none=True, validate=validate.Regexp(
        r"^[A-Za-z0-9._:-]{1,100}$", error="a diagnosis id is 1-100 characters of letters, digits and . _ : -"))
    evidence_summary = Text(load_default="", metadata={"description": "summary of the diagnosis evidence"})
    symptoms = fields.List(fields.String(validate=validate.Regexp(SYMPTOM_PATTERN, error="symptom IDs look like "
                                                                  "s.cuda_oom")),
                           load_default=list, validate=validate.Length(max=200),
                           metadata={"description": "observed symptom IDs (used by similar())"})


_FULL = IncidentSchema()
_PARTIAL = IncidentSchema(partial=True)


def resolve_causes(source: CauseSource) -> frozenset[str] | None:
    """The valid cause IDs (``None`` means: check only the ID's shape and domain)."""
    if source is None:
        return None
    values = source() if callable(source) else source
    return frozenset(values)


def cause_problem(cause: str, valid: frozenset[str] | None) -> str | None:
    """Why ``cause`` is not an acceptable root cause, or None when it is."""
    if valid is not None:
        if cause in valid:
            return None
        close = difflib.get_close_matches(cause, sorted(valid), n=1, cutoff=0.6)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return f"unknown root cause {cause!r}.{hint} Valid IDs: {', '.join(sorted(valid))}"
    if not re.match(CAUSE_PATTERN, cause):
        return f"root cause {cause!r} is not a cause ID such as memory.fragmentation"
    if cause.split(".", 1)[0] not in DOMAINS:
        return f"root cause {cause!r} has an unknown domain; domains: {', '.join(DOMAINS)}"
    return None


def _marshmallow_messages(exc: marshmallow.ValidationError) -> dict[str, list[str]]:
    """Flatten marshmallow's nested messages to ``{"job.world_size": [...], "tags.0": [...]}``."""
    out: dict[str, list[str]] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for key, sub in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), sub)
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            out.setdefault(prefix or "_schema", []).extend(value)
        elif isinstance(value, list):
            for i, sub in enumerate(value):
                walk(f"{prefix}.{i}", sub)
        else:
            out.setdefault(prefix or "_schema", []).append(str(value))

    walk("", exc.messages)
    return {("record" if k == "_schema" else k): v for k, v in out.items()}


def _clean_lists(record: dict[str, Any]) -> None:
    """Tags lower-cased and de-duplicated; symptoms de-duplicated and sorted; versions as text."""
    if "tags" in record:
        record["tags"] = list(dict.fromkeys(t.strip().lower() for t in record["tags"]))
    if "symptoms" in record:
        record["symptoms"] = sorted(set(record["symptoms"]))


def _check_record(record: dict[str, Any], valid: frozenset[str] | None) -> dict[str, list[str]]:
    """Checks that span fields: the cause exists, domain agrees, a resolved incident has a fix."""
    problems: dict[str, list[str]] = {}
    cause = record.get("root_cause", "")
    why = cause_problem(cause, valid)
    if why:
        problems["root_cause"] = [why]
    domain = record.pop("domain", None)
    if domain is not None and not why and domain != cause.split(".", 1)[0]:
        problems["domain"] = [f"domain {domain!r} disagrees with root cause {cause!r}; leave domain out"]
    if record.get("status") == "resolved" and not record.get("fix"):
        problems["fix"] = ["a resolved incident needs a fix: write what fixed it"]
    return problems


def validate_new(data: Any, valid: frozenset[str] | None, now: str | None = None,
                 content_ids: bool = False) -> dict[str, Any]:
    """Validate a whole record; fill defaults, timestamps and (when absent) the id.

    A missing id is random, or with ``content_ids`` derived from the content (for imports).
    """
    if not isinstance(data, Mapping):
        raise ValidationError({"record": [f"expected a JSON object, got {type(data).__name__}"]})
    try:
        record = _FULL.load(dict(data))
    except marshmallow.ValidationError as exc:
        problems = _marshmallow_messages(exc)
        cause = data.get("root_cause")
        if isinstance(cause, str) and "root_cause" not in problems and (why := cause_problem(cause, valid)):
            problems["root_cause"] = [why]
        raise ValidationError(problems) from None
    problems = _check_record(record, valid)
    if problems:
        raise ValidationError(problems)
    _clean_lists(record)
    if "id" not in record and content_ids:
        record["id"] = content_id(record)  # from the content as given, before defaults
    now = now or utc_now()
    record.setdefault("created_at", now)
    record.setdefault("updated_at", record["created_at"])
    record.setdefault("occurred_at", record["created_at"])
    record.setdefault("id", random_id(record["occurred_at"]))
    record["version"] = 1  # the store counts changes from here; a sent version is ignored
    return normalise(record)


def validate_patch(existing: dict[str, Any], patch: Any, valid: frozenset[str] | None) -> dict[str, Any]:
    """Apply a partial update to ``existing`` and return the validated new record."""
    if not isinstance(patch, Mapping):
        raise ValidationError({"record": [f"expected a JSON object, got {type(patch).__name__}"]})
    problems: dict[str, list[str]] = {}
    for key in IMMUTABLE_FIELDS:
        if key in patch and patch[key] != existing.get(key):
            problems[key] = [f"{key} cannot be changed"]
    for key in DERIVED_FIELDS:
        if key in patch and patch[key] != existing.get(key):
            problems[key] = [f"{key} is set by the store; leave it out"]
    body = {k: v for k, v in patch.items() if k not in IMMUTABLE_FIELDS + DERIVED_FIELDS}
    try:
        changes = _PARTIAL.load(body)
    except marshmallow.ValidationError as exc:
        problems.update(_marshmallow_messages(exc))
        changes = {}
    if problems:
        raise ValidationError(problems)
    if "job" in changes:  # job facts merge key by key; send null-free values to change them
        changes["job"] = {**existing.get("job", {}), **changes["job"]}
    merged = {k: v for k, v in existing.items() if k != "domain"}
    merged.update({k: v for k, v in changes.items() if k in body})
    problems = _check_record(merged, valid if "root_cause" in body else None)
    if problems:
        raise ValidationError(problems)
    _clean_lists(merged)
    return normalise(merged)


def normalise(record: dict[str, Any]) -> dict[str, Any]:
    """The record with every key of :data:`RECORD_FIELDS`, in order, ``domain`` derived."""
    out: dict[str, Any] = {}
    for key in RECORD_FIELDS:
        if key == "domain":
            out[key] = record["root_cause"].split(".", 1)[0]
        elif key in ("tags", "symptoms"):
            out[key] = list(record.get(key) or [])
        elif key == "job":
            job = record.get("job") or {}
            out[key] = {k: job[k] for k in JOB_FIELDS if job.get(k) not in (None, "", {})}
        elif key == "diagnosis_id":
            out[key] = record.get(key) or None
        elif key == "version":
            out[key] = int(record.get(key) or 1)
        else:
            out[key] = record.get(key, "")
    return out


def random_id(occurred_at: str | None = None) -> str:
    """A new id such as ``INC-20240501-3FA9C1`` (the date is when it happened, else today)."""
    day = (occurred_at or utc_now())[:10].replace("-", "")
    return f"INC-{day}-{secrets.token_hex(3).upper()}"


def content_id(record: Mapping[str, Any]) -> str:
    """An id derived from the content, so importing the same id-less line twice adds it once."""
    basis = "\x1f".join(str(record.get(k) or "") for k in ("title", "phenomenon", "root_cause", "occurred_at"))
    digest = hashlib.sha1(basis.encode("utf-8")).hexdigest().upper()
    occurred = record.get("occurred_at")
    return f"INC-{occurred[:10].replace('-', '')}-{digest[:6]}" if occurred else f"INC-{digest[:10]}"


def same_content(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """True when two records differ at most in their bookkeeping (timestamps, version)."""
    skip = {"created_at", "updated_at", "version"}
    return all(a.get(k) == b.get(k) for k in RECORD_FIELDS if k not in skip)
