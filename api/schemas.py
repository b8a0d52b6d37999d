"""Request and response schemas (marshmallow) of the REST API; flask-smorest turns them into OpenAPI 3.

Request schemas refuse unknown fields (``additionalProperties: false``) and say what each field
accepts; response schemas allow extra fields so that the diagnosis object can grow.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from marshmallow import INCLUDE, RAISE, Schema, ValidationError, fields, validate, validates_schema

from dsdoctor.kb.incidents.record import IncidentSchema as _IncidentRecordSchema
from dsdoctor.kb.model import DOMAINS

LANGS = ("en", "zh")
GRAPH_FORMATS = ("json", "dot", "mermaid")
MAX_LOGS = 10_000


# ---------------------------------------------------------------- custom fields



def _kind(value: Any) -> str:
    """What a value is, for an error message (never the value: it may hold a secret)."""
    return "text" if isinstance(value, str) else type(value).__name__

class StrictBoolean(fields.Boolean):
    """true or false only (no "yes", 1 or "true" strings)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> bool:
        if not isinstance(value, bool):
            raise ValidationError(f"must be true or false, got {_kind(value)}")
        return value


class MetricValue(fields.Field):
    """A number, or one of the strings "nan", "inf", "-inf"."""

    SPECIAL = ("nan", "inf", "-inf")

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> float | str:
        if isinstance(value, bool):
            raise ValidationError(f"must be a number or one of {', '.join(self.SPECIAL)}, got {_kind(value)}")
        if isinstance(value, int | float):
            return value
        if isinstance(value, str) and value.strip().lower() in self.SPECIAL:
            return value.strip().lower()
        raise ValidationError(f"must be a number or one of \"nan\", \"inf\", \"-inf\", got {_kind(value)}")


class CountOrWords(fields.Field):
    """A whole number in ``bounds``, or how a person says it ("2x DGX A100", "two nodes"): the engine
    reads the count from the words (rules/env_normalize.py)."""

    def __init__(self, bounds: tuple[int, int], max_chars: int = 200, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bounds, self.max_chars = bounds, max_chars

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> int | str:
        low, high = self.bounds
        if isinstance(value, int) and not isinstance(value, bool):
            if not low <= value <= high:
                raise ValidationError(f"must be from {low} to {high}")
            return value
        if isinstance(value, str) and value.strip() and len(value) <= self.max_chars:
            return value
        raise ValidationError(f"must be a whole number from {low} to {high} or a short text such as "
                              f"\"2x DGX A100\" (at most {self.max_chars} characters), got {_kind(value)}")


class Moment(fields.String):
    """An ISO 8601 date or datetime, normalised to UTC ``YYYY-MM-DDTHH:MM:SSZ``."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs).strip()
        try:
            if len(text) == 10:
                moment = dt.datetime.combine(dt.date.fromisoformat(text), dt.time.min)
            else:
                moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ValidationError("must be an ISO date or datetime such as 2024-05-01 or 2024-05-01T13:45:00Z") \
                from None
        if moment.tzinfo is not None:
            moment = moment.astimezone(dt.UTC).replace(tzinfo=None)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def openapi_field_properties(field: fields.Field, **kwargs: Any) -> dict[str, Any]:
    """apispec attribute function: OpenAPI types of the custom fields above."""
    if isinstance(field, MetricValue):
        return {"oneOf": [{"type": "number"}, {"type": "string", "enum": list(MetricValue.SPECIAL)}]}
    return {}


def explain_errors(schema: Schema, messages: Any) -> Any:
    """marshmallow messages with "Unknown field." replaced by the list of allowed fields."""
    if not isinstance(messages, dict):
        return messages
    out: dict[Any, Any] = {}
    for key, value in messages.items():
        field = schema.fields.get(key) if isinstance(key, str) else None
        if value == ["Unknown field."]:
            allowed = ", ".join(f.data_key or name for name, f in schema.fields.items())
            out[key] = [f"unknown field; allowed fields here: {allowed}"]
        elif isinstance(field, fields.Nested) and isinstance(field.schema, Schema):
            out[key] = explain_errors(field.schema, value)
        elif isinstance(field, fields.List) and isinstance(field.inner, fields.Nested) and isinstance(value, dict):
            out[key] = {i: explain_errors(field.inner.schema, v) for i, v in value.items()}
        else:
            out[key] = value
    return out


def _one_of(choices: tuple[str, ...] | list[str], what: str) -> validate.OneOf:
    return validate.OneOf(choices, error=f"{what} must be one of: {', '.join(choices)}; got {{input}}")


# ---------------------------------------------------------------- evidence (request)


class LogSchema(Schema):
    class Meta:
        unknown = RAISE

    source = fields.String(load_default="log", validate=validate.Length(1, 200),
                           metadata={"description": "where the text came from: rank37, node2, launcher, dmesg, ..."})
    text = fields.String(required=True, metadata={"description": "the lines as the job printed them"})


class EnvironmentSchema(Schema):
    class Meta:
        unknown = INCLUDE

    world_size = fields.Integer(strict=True, validate=validate.Range(1, 10_000_000), allow_none=True)
    nodes = CountOrWords((1, 1_000_000), allow_none=True,
                         metadata={"description": "how many nodes: a number, or words such as \"2x DGX A100\""})
    gpu = fields.String(allow_none=True, metadata={"description": "e.g. A100-80GB"})
    versions = fields.Dict(keys=fields.String(), values=fields.String(),
                           metadata={"description": "torch, deepspeed, nccl, cuda, driver, ..."})
    per_node = fields.Dict(keys=fields.String(), values=fields.Dict(),
                           metadata={"description": "node name -> {versions: {...}} where nodes differ"})


class MetricSchema(Schema):
    class Meta:
        unknown = INCLUDE

    name = fields.String(required=True, validate=validate.Length(1, 200),
                         metadata={"description": "step_time_s, loss, grad_norm, loss_scale, lr, gpu_util, "
                                                  "mem_allocated_gb, mem_reserved_gb, samples_per_sec, tflops, ..."})
    rank = fields.Integer(strict=True, allow_none=True, validate=validate.Range(0, 10_000_000))
    step = fields.Integer(strict=True, allow_none=True, validate=validate.Range(0))
    value = MetricValue(required=True, metadata={"description": 'a number or "nan", "inf", "-inf"'})


def _observation_key() -> fields.String:
    return fields.String(validate=validate.Length(1, 200, error="observation keys are 1-200 characters: "
                                                  "a symptom id (s.cuda_oom) or experiment=outcome"))


class EvidenceJobSchema(Schema):
    """Which job the evidence came from; stored with the diagnosis and filterable in listings."""

    class Meta:
        unknown = RAISE

    id = fields.String(validate=validate.Length(1, 200), metadata={"description": "scheduler job id, e.g. 48213"})
    name = fields.String(validate=validate.Length(1, 200), metadata={"description": "e.g. llama-70b-sft"})
    cluster = fields.String(validate=validate.Length(1, 200), metadata={"description": "e.g. a100-east"})
    run_url = fields.String(validate=[validate.Length(max=2000),
                                      validate.URL(schemes={"http", "https"}, require_tld=False,
                                                   error="run_url must be an http(s) URL")],
                            metadata={"description": "the run in the tracker or scheduler (http/https)"})
    labels = fields.Dict(keys=fields.String(validate=validate.Length(1, 100)),
                         values=fields.String(validate=validate.Length(max=200)),
                         validate=validate.Length(max=50, error="at most 50 labels"),
                         metadata={"description": 'free key/value pairs, e.g. {"team": "pretrain"}'})


class EvidenceSchema(Schema):
    """The evidence document (see the README): at least one of description or logs."""

    class Meta:
        unknown = RAISE

    description = fields.String(metadata={"description": "free text: what ran, what was seen (English or Chinese)"})
    logs = fields.List(fields.Nested(LogSchema), validate=validate.Length(max=MAX_LOGS))
    config = fields.Dict(metadata={"description": "the ds_config.json object as the job used it"})
    environment = fields.Nested(EnvironmentSchema)
    metrics = fields.List(fields.Nested(MetricSchema))
    observations = fields.Dict(keys=_observation_key(), values=StrictBoolean(),
                               metadata={"description": 'known facts: {"s.cuda_oom": true, '
                                                        '"x.single_gpu_repro=reproduces": true}'})
    job = fields.Nested(EvidenceJobSchema, metadata={"description": "the job's identity: id, name, cluster, run_url, labels"})

    @validates_schema
    def _something_to_diagnose(self, data: dict[str, Any], **kwargs: Any) -> None:
        has_logs = any(log.get("text", "").strip() for log in data.get("logs") or ())
        if not (data.get("description", "").strip() or has_logs):
            raise ValidationError("give at least one of 'description' (text) or 'logs' (non-empty text)",
                                  "description")


class ObservationsRequestSchema(Schema):
    """New facts for an existing diagnosis: observations and/or more evidence."""

    class Meta:
        unknown = RAISE

    observations = fields.Dict(keys=_observation_key(), values=StrictBoolean(),
                               metadata={"description": 'e.g. {"x.single_gpu_repro=reproduces": true, '
                                                        '"s.cuda_oom": false}'})
    logs = fields.List(fields.Nested(LogSchema), validate=validate.Length(max=MAX_LOGS))
    description = fields.String(metadata={"description": "more free text; appended to the description"})

    @validates_schema
    def _something_new(self, data: dict[str, Any], **kwargs: Any) -> None:
        if not (data.get("observations") or data.get("logs") or (data.get("description") or "").strip()):
            raise ValidationError("give at least one of 'observations', 'logs' or 'description'", "observations")


class DiagnosisMultipartSchema(Schema):
    """multipart/form-data: raw files, for pipelines that have files rather than JSON."""

    logs = fields.List(fields.Raw(metadata={"type": "string", "format": "binary"}),
                       metadata={"description": "log files (repeat the field; .gz files are inflated)"})
    config = fields.Raw(metadata={"type": "string", "format": "binary", "description": "ds_config.json"})
    metrics = fields.Raw(metadata={"type": "string", "format": "binary",
                                   "description": "metrics: JSON array, JSON Lines or CSV name,rank,step,value"})
    environment = fields.Raw(metadata={"type": "string", "format": "binary", "description": "environment JSON"})
    description = fields.String(metadata={"description": "free text"})
    observations = fields.String(metadata={"description": "JSON object of observations"})


class ObservationsMultipartSchema(Schema):
    """multipart/form-data for observations: more log files, text, and observations as JSON text."""

    logs = fields.List(fields.Raw(metadata={"type": "string", "format": "binary"}),
                       metadata={"description": "more log files (repeat the field)"})
    description = fields.String()
    observations = fields.String(metadata={"description": "JSON object of observations"})


# ---------------------------------------------------------------- query strings


class DiagnoseQuerySchema(Schema):
    lang = fields.String(load_default="en", validate=_one_of(LANGS, "lang"),
                         metadata={"description": "language of titles and explanations"})
    top = fields.Integer(load_default=5, validate=validate.Range(1, 50, error="top must be between 1 and 50"),
                         metadata={"description": "how many causes to return"})


class ReRunQuerySchema(Schema):
    lang = fields.String(validate=_one_of(LANGS, "lang"),
                         metadata={"description": "language of the new result (default: the diagnosis' language)"})


class ListQuerySchema(Schema):
    job_id = fields.String(validate=validate.Length(1, 200), metadata={"description": "only diagnoses of this job.id"})
    cluster = fields.String(validate=validate.Length(1, 200), metadata={"description": "only this job.cluster"})
    since = Moment(metadata={"description": "only diagnoses created at or after this ISO date/datetime (UTC)"})
    limit = fields.Integer(load_default=20, validate=validate.Range(1, 200, error="limit must be between 1 and 200"))
    cursor = fields.String(validate=validate.Length(1, 200),
                           metadata={"description": "next_cursor from the previous page"})


class LangQuerySchema(Schema):
    lang = fields.String(load_default="en", validate=_one_of(LANGS, "lang"))


class CausesQuerySchema(LangQuerySchema):
    domain = fields.String(validate=_one_of(DOMAINS, "domain"))


class GraphQuerySchema(LangQuerySchema):
    around = fields.String(validate=validate.Length(1, 200),
                           metadata={"description": "a cause, mechanism, symptom or experiment id"})
    depth = fields.Integer(load_default=1, validate=validate.Range(0, 6, error="depth must be between 0 and 6"))
    format = fields.String(load_default="json", validate=_one_of(GRAPH_FORMATS, "format"))
    experiments = fields.Boolean(load_default=False, metadata={"description": "include experiment nodes"})


class IncidentQuerySchema(Schema):
    q = fields.String(validate=validate.Length(max=1000), metadata={"description": "full-text query (en/zh)"})
    cause = fields.String(validate=validate.Length(1, 200), metadata={"description": "root-cause id"})
    domain = fields.String(validate=_one_of(DOMAINS, "domain"))
    severity = fields.String(validate=_one_of(("critical", "high", "medium", "low"), "severity"))
    tag = fields.String(validate=validate.Length(1, 40))
    since = fields.String(validate=validate.Length(1, 40),
                          metadata={"description": "occurred at or after (ISO date or datetime, UTC)"})
    until = fields.String(validate=validate.Length(1, 40),
                          metadata={"description": "occurred at or before (ISO date, inclusive, or datetime)"})
    limit = fields.Integer(load_default=20, validate=validate.Range(1, 200, error="limit must be between 1 and 200"))
    cursor = fields.String(validate=validate.Length(1, 200))


class SimilarQuerySchema(Schema):
    limit = fields.Integer(load_default=5, validate=validate.Range(1, 50, error="limit must be between 1 and 50"))


class IncidentFromDiagnosisSchema(Schema):
    """Optional overrides of the pre-filled incident."""

    class Meta:
        unknown = RAISE

    title = fields.String(validate=validate.Length(1, 300))
    root_cause = fields.String(validate=validate.Length(1, 200))
    severity = fields.String(validate=_one_of(("critical", "high", "medium", "low"), "severity"))
    status = fields.String(validate=_one_of(("open", "resolved"), "status"))
    author = fields.String(validate=validate.Length(max=200))
    tags = fields.List(fields.String(validate=validate.Length(1, 40)), validate=validate.Length(max=30))
    fix = fields.String()
    root_cause_detail = fields.String()


class IncidentRequestSchema(_IncidentRecordSchema):
    """An incident as a client sends it (POST); the store validates it again against the knowledge base."""


class IncidentPatchSchema(_IncidentRecordSchema):
    """Any subset of the incident fields (PATCH); id and created_at cannot change."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs["partial"] = True
        super().__init__(*args, **kwargs)


# ---------------------------------------------------------------- responses


class _Open(Schema):
    class Meta:
        unknown = INCLUDE


class SummarySchema(_Open):
    verdict = fields.String(metadata={"description": "confident | uncertain | unexplained | no_fault_found"})
    text = fields.String()


class WeightSchema(_Open):
    symptom = fields.String()
    state = fields.String(metadata={"description": "present | absent | unseen"})
    weight = fields.Float()
    likelihood = fields.Float()
    mechanism = fields.String(allow_none=True)


class FixSchema(_Open):
    title = fields.String()
    kind = fields.String()
    snippet = fields.String()


class CauseResultSchema(_Open):
    id = fields.String()
    probability = fields.Float()
    domain = fields.String()
    parent = fields.String(allow_none=True)
    title = fields.String()
    description = fields.String()
    prior = fields.Float()
    site_incidents = fields.Integer()
    supporting = fields.List(fields.String())
    contradicting = fields.List(fields.String())
    path = fields.List(fields.String(), metadata={"description": "symptom -> mechanism -> cause"})
    paths = fields.List(fields.List(fields.String()))
    weights = fields.List(fields.Nested(WeightSchema))
    fixes = fields.List(fields.Nested(FixSchema))
    regression = fields.String()
    prevention = fields.String()
    references = fields.List(fields.String())


class LineRefSchema(_Open):
    source = fields.String()
    lineno = fields.Integer()
    rank = fields.Integer(allow_none=True)
    node = fields.String(allow_none=True)
    time = fields.String(allow_none=True)
    rule = fields.String(allow_none=True)
    text = fields.String()
    fields_ = fields.Dict(data_key="fields")


class SymptomResultSchema(_Open):
    id = fields.String()
    title = fields.String()
    severity = fields.String()
    ranks = fields.List(fields.Integer())
    nodes = fields.List(fields.String())
    count = fields.Integer()
    first_seen = fields.String(allow_none=True)
    secondary = fields.Boolean()
    reliability = fields.Float()
    rules = fields.List(fields.String())
    lines = fields.List(fields.String())
    line_refs = fields.List(fields.Nested(LineRefSchema))


class FirstErrorSchema(_Open):
    rank = fields.Integer(allow_none=True)
    node = fields.String(allow_none=True)
    time = fields.String(allow_none=True, metadata={
        "description": "the line's own stamp (ISO 8601; '--MM-DDThh:mm:ss' when it has no year), or null"})
    time_shown = fields.String(allow_none=True, metadata={"description": "the time for people, e.g. "
                                                          "'07-02 13:20:41.220 (year unknown)'"})
    year = fields.String(allow_none=True, metadata={"description": "stated | borrowed (from other lines of the "
                                                    "same source) | unknown"})
    line = fields.String(metadata={"description": "the whole line"})
    source = fields.String()
    lineno = fields.Integer()
    symptom = fields.String(allow_none=True)
    rule = fields.String(allow_none=True)


class ContextSchema(_Open):
    precision = fields.String(allow_none=True)
    zero_stage = fields.Integer(allow_none=True)
    offload = fields.Boolean(allow_none=True)
    nodes = fields.Integer(allow_none=True)
    world_size = fields.Integer(allow_none=True)
    gpu = fields.String(allow_none=True)
    versions = fields.Dict(keys=fields.String(), values=fields.String())
    script = fields.String(allow_none=True)
    launcher = fields.String(allow_none=True)
    config_file = fields.String(allow_none=True)
    frameworks = fields.List(fields.String())  # pytorch | paddle | ... read from the logs and versions


class ConfigFindingSchema(_Open):
    id = fields.String()
    severity = fields.String()
    message = fields.String()
    key_path = fields.String()
    symptom = fields.String(allow_none=True)


class OutcomeResultSchema(_Open):
    id = fields.String()
    observe = fields.String(metadata={"description": "the key to send in observations, e.g. x.exp=outcome"})
    title = fields.String()
    probability = fields.Float()
    leading_cause = fields.String(allow_none=True)
    leading_probability = fields.Float()


class ExperimentProposalSchema(_Open):
    id = fields.String()
    title = fields.String()
    how = fields.String()
    commands = fields.List(fields.String())
    steps = fields.List(fields.Dict(), metadata={"description": "[{kind: shell|python|config|args, text, note?}]"})
    cost = fields.String()
    cost_minutes = fields.Float()
    cost_gpus = fields.Integer()
    information_gain = fields.Float()
    score = fields.Float()
    why = fields.String()
    separates = fields.List(fields.String())
    outcomes = fields.List(fields.Nested(OutcomeResultSchema))


class HistoryEntrySchema(_Open):
    at = fields.String()
    observations = fields.Dict(keys=fields.String(), values=fields.Boolean())
    logs_added = fields.List(fields.String())
    description_added = fields.Boolean()
    top_cause_before = fields.String(allow_none=True)
    top_cause_after = fields.String(allow_none=True)


class DiagnosisSchema(_Open):
    """The diagnosis object (see the evidence contract); ``causes`` sorted by probability."""

    id = fields.String(required=True)
    created_at = fields.String()
    updated_at = fields.String()
    lang = fields.String()
    summary = fields.Nested(SummarySchema)
    causes = fields.List(fields.Nested(CauseResultSchema), required=True)
    unexplained = fields.Float()
    ruled_out = fields.List(fields.Dict())
    symptoms = fields.List(fields.Nested(SymptomResultSchema))
    first_error = fields.Nested(FirstErrorSchema, allow_none=True)
    scope = fields.String()
    scope_detail = fields.Dict(metadata={"description": "{origin: {ranks, nodes}, victims: {ranks, nodes}, "
                                                        "world_size, nodes}"})
    phase = fields.String()
    context = fields.Nested(ContextSchema)
    config_findings = fields.List(fields.Nested(ConfigFindingSchema))
    next_step = fields.Dict(allow_none=True, metadata={
        "description": "above the confidence threshold: {kind: fix, cause, title, fix, regression}"})
    next_experiments = fields.List(fields.Nested(ExperimentProposalSchema))
    settled_experiments = fields.List(fields.Dict(), metadata={
        "description": "experiments the evidence already answers: [{id, outcome, by, observe}]"})
    observations = fields.Dict(keys=fields.String(), values=fields.Boolean())
    observation_history = fields.List(fields.Nested(HistoryEntrySchema))
    similar_incidents = fields.List(fields.Dict())
    warnings = fields.List(fields.String())
    stats = fields.Dict()
    job = fields.Nested(EvidenceJobSchema, metadata={"description": "the job the evidence named, when it named one"})


class DiagnosisSummarySchema(_Open):
    id = fields.String()
    created_at = fields.String()
    updated_at = fields.String()
    top_cause = fields.String(allow_none=True)
    top_probability = fields.Float(allow_none=True)
    verdict = fields.String(allow_none=True)
    summary = fields.String()
    lang = fields.String()
    url = fields.String()
    job = fields.Nested(EvidenceJobSchema, allow_none=True)


class DiagnosisListSchema(_Open):
    items = fields.List(fields.Nested(DiagnosisSummarySchema), required=True)
    next_cursor = fields.String(allow_none=True, required=True)


class KbCauseSchema(_Open):
    id = fields.String()
    domain = fields.String()
    parent = fields.String(allow_none=True)
    status = fields.String()
    title = fields.String()
    description = fields.String()
    prior = fields.Float()
    site_count = fields.Integer()
    mechanisms = fields.Dict(keys=fields.String(), values=fields.Float())
    symptoms = fields.Dict(keys=fields.String(), values=fields.Float())
    experiments = fields.List(fields.String())
    fixes = fields.List(fields.Nested(FixSchema))
    regression = fields.String()
    prevention = fields.String()
    references = fields.List(fields.String())


class KbSymptomSchema(_Open):
    id = fields.String()
    title = fields.String()
    description = fields.String()
    kind = fields.String()
    source = fields.String()
    severity = fields.String()
    leak = fields.Float()
    status = fields.String()
    question = fields.String(allow_none=True)


class KbOutcomeSchema(_Open):
    id = fields.String()
    title = fields.String()
    observe = fields.String()


class KbExperimentSchema(_Open):
    id = fields.String()
    title = fields.String()
    how = fields.String()
    commands = fields.List(fields.String())
    cost_minutes = fields.Float()
    cost_gpus = fields.Integer()
    outcomes = fields.List(fields.Nested(KbOutcomeSchema))
    tests = fields.List(fields.String(), metadata={"description": "causes whose outcome probabilities it lists"})
    status = fields.String()


class KbCauseListSchema(_Open):
    items = fields.List(fields.Nested(KbCauseSchema), required=True)


class KbSymptomListSchema(_Open):
    items = fields.List(fields.Nested(KbSymptomSchema), required=True)


class KbExperimentListSchema(_Open):
    items = fields.List(fields.Nested(KbExperimentSchema), required=True)


class GraphNodeSchema(_Open):
    id = fields.String()
    kind = fields.String()
    title = fields.String()


class GraphEdgeSchema(_Open):
    source = fields.String()
    target = fields.String()
    kind = fields.String()
    strength = fields.Float()


class GraphSchema(_Open):
    nodes = fields.List(fields.Nested(GraphNodeSchema), required=True)
    edges = fields.List(fields.Nested(GraphEdgeSchema), required=True)


class IncidentSchema(_Open):
    """An incident record as stored."""

    id = fields.String(required=True)
    title = fields.String()
    phenomenon = fields.String()
    scope = fields.String()
    root_cause = fields.String()
    domain = fields.String()
    root_cause_detail = fields.String()
    fix = fields.String()
    regression = fields.String()
    prevention = fields.String()
    severity = fields.String()
    status = fields.String()
    tags = fields.List(fields.String())
    occurred_at = fields.String()
    created_at = fields.String()
    updated_at = fields.String()
    version = fields.Integer(metadata={"description": "1 when recorded, +1 with every change; the ETag is "
                                                      "\"<version>\""})
    author = fields.String()
    source_url = fields.String(metadata={"description": "where a public incident was reported (its issue thread)"})
    job = fields.Dict()
    diagnosis_id = fields.String(allow_none=True)
    evidence_summary = fields.String()
    symptoms = fields.List(fields.String())


class IncidentListSchema(_Open):
    items = fields.List(fields.Dict(), required=True, metadata={"description": "incidents, best match first"})
    facets = fields.Dict(required=True, metadata={"description": "counts by root_cause, domain, severity, tag"})
    next_cursor = fields.String(allow_none=True, required=True)
    total = fields.Integer(metadata={"description": "number of matching incidents"})
    total_is_estimate = fields.Boolean(metadata={"description": "true when total and facets of a very common "
                                                                "quoted phrase are estimated from a sample"})


class SimilarListSchema(_Open):
    items = fields.List(fields.Dict(), required=True)


class HealthSchema(_Open):
    status = fields.String(required=True)
    version = fields.String(metadata={"description": "the dsdoctor package version"})


class ReadySchema(_Open):
    status = fields.String(required=True)
    checks = fields.Dict(required=True)

