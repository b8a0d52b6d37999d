"""Schemas of the knowledge-base file kinds (kb/data/template.yaml), with messages for authors.

:func:`validate_entry` checks one entry of a file kind and returns ``(data, issues)``: the
validated plain data (``None`` when invalid) and a list of ``(path, message)`` issues, where
``path`` is the tuple of keys and list indices inside the entry. The loader turns a path into a
line with :func:`kb.yamlload.line_of`. Messages say what to write, e.g.
``field 'prior.basis' is missing: write the basis of the prior, e.g. 'estimate: ...'``.

Marshmallow checks types, enums, ranges and unknown fields (``unknown=RAISE``);
:func:`entry_checks` then checks what spans fields inside one entry (the ID's domain, outcome
tables). References between entries are the loader's job.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields, validate

from dsdoctor.kb.model import (
    COMMAND_KINDS,
    DOMAINS,
    FRAMEWORKS,
    PILLARS,
    SEVERITIES,
    SYMPTOM_KINDS,
    SYMPTOM_SOURCES,
)

FIX_KINDS = ("ds_config", "env", "command", "code", "hardware", "process")
STATUSES = ("active", "deprecated")
PRECISIONS = ("fp16", "bf16", "fp32")
PHASES = ("launch", "first-step", "steady", "checkpoint", "eval", "exit")
#: file kinds: the one top-level key of a knowledge file (``patches`` only in overlays)
KINDS = ("causes", "mechanisms", "symptoms", "experiments")
OVERLAY_KINDS = (*KINDS, "patches")
ROW_TOLERANCE = 0.01

CAUSE_ID = r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$"
MECHANISM_ID = r"^m\.[a-z0-9_]+$"
SYMPTOM_ID = r"^s\.[a-z0-9_]+$"
EXPERIMENT_ID = r"^x\.[a-z0-9_]+$"
OUTCOME_ID = r"^[a-z][a-z0-9_]*$"
ANY_ID = r"^([a-z][a-z0-9_]*(\.[a-z0-9_]+)+)$"

# ---------------------------------------------------------------- strict fields


class Number(fields.Float):
    """A YAML number; quoted numbers and booleans are refused instead of converted."""

    default_error_messages = {"invalid": "must be a number written without quotes, got {input!r}"}  # noqa: RUF012

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.make_error("invalid", input=value)
        if not math.isfinite(value):
            raise self.make_error("invalid", input=value)
        return float(value)


class Integer(fields.Integer):
    """A YAML integer; quoted numbers, floats and booleans are refused."""

    default_error_messages = {"invalid": "must be a whole number written without quotes, got {input!r}"}  # noqa: RUF012

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.make_error("invalid", input=value)
        return value


class Boolean(fields.Boolean):
    """A YAML boolean (true/false); text like 'yes' in quotes is refused."""

    default_error_messages = {"invalid": "must be true or false, got {input!r}"}  # noqa: RUF012

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> bool:
        if not isinstance(value, bool):
            raise self.make_error("invalid", input=value)
        return value


class String(fields.String):
    """Text; numbers and booleans are refused (YAML reads yes/no/on/off as booleans)."""

    default_error_messages = {"invalid": "must be text, got {input!r}: quote it (YAML reads yes/no/on/off and bare numbers as non-text)"}  # noqa: RUF012

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        if not isinstance(value, str):
            raise self.make_error("invalid", input=value)
        return value


def _not_blank(value: str) -> None:
    if not value.strip():
        raise ValidationError("must not be empty")


def _one_of(choices: tuple[Any, ...]) -> validate.OneOf:
    return validate.OneOf(choices, error="must be one of " + ", ".join(map(str, choices)) + "; got {input!r}")


def _regexp(pattern: str, example: str) -> validate.Regexp:
    return validate.Regexp(pattern, error=f"{{input!r}} is not a valid ID here: write it like {example!r}")


PROBABILITY = validate.Range(
    0, 1, min_inclusive=False, max_inclusive=False,
    error="must be a probability strictly between 0 and 1 (use e.g. 0.01 or 0.99 for nearly never/always), got {input}",
)


def probability(hint: str, **kwargs: Any) -> Number:
    return Number(validate=PROBABILITY, metadata={"hint": hint}, **kwargs)


def prob_map(key_pattern: str, example: str, hint: str, **kwargs: Any) -> fields.Dict:
    return fields.Dict(
        keys=String(validate=_regexp(key_pattern, example)),
        values=Number(validate=PROBABILITY),
        metadata={"hint": hint},
        **kwargs,
    )


def _text_field(hint: str, **kwargs: Any) -> fields.Nested:
    return fields.Nested(TextSchema, metadata={"hint": hint}, **kwargs)


def _references(**kwargs: Any) -> fields.List:
    return fields.List(
        String(validate=_not_blank),
        load_default=list,
        metadata={"hint": "a list of URLs of docs or source, e.g. ['https://www.deepspeed.ai/docs/config-json/']"},
        **kwargs,
    )


def _status() -> String:
    return String(validate=_one_of(STATUSES), load_default="active",
                  metadata={"hint": "active, or deprecated for a retired entry (its ID is never reused)"})


class CommandField(fields.Field):
    """A command: a string is a shell line; ``{python: ...}``, ``{config: ...}`` (ds_config JSON) or
    ``{args: ...}`` (flags for the training command) say what else it is, so it is shown as such."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> tuple[str, str]:
        if isinstance(value, str) and value.strip():
            return ("shell", value)
        if isinstance(value, dict) and len(value) == 1:
            (key, text), = value.items()
            if key in COMMAND_KINDS and isinstance(text, str) and text.strip():
                return (key, text)
        raise ValidationError("a command is a shell line (a string) or one of {python: '...'}, {config: '{...}'}, "
                              "{args: '--flag value'}, {shell: '...'}")


class StrictSchema(Schema):
    class Meta:
        unknown = RAISE


class TextSchema(StrictSchema):
    en = String(required=True, validate=_not_blank, metadata={"hint": "the English text"})
    zh = String(required=True, validate=_not_blank, metadata={"hint": "the Chinese text (中文)"})


# ---------------------------------------------------------------- causes


class PriorSchema(StrictSchema):
    value = probability("the prior probability of the cause among failed jobs, strictly between 0 and 1, e.g. 0.03",
                        required=True)
    basis = String(required=True, validate=_not_blank,
                   metadata={"hint": "the basis of the prior, e.g. 'estimate: share of fp16 issues in public DeepSpeed threads'"})


class ContextSchema(StrictSchema):
    precision = fields.List(String(validate=_one_of(PRECISIONS)), allow_none=True,
                            metadata={"hint": "the precisions it needs, a list of fp16, bf16, fp32 (or null)"})
    zero_stage = fields.List(Integer(validate=_one_of((0, 1, 2, 3))), allow_none=True,
                             metadata={"hint": "the ZeRO stages it needs, e.g. [2, 3] (or null)"})
    offload = Boolean(allow_none=True, metadata={"hint": "true if it needs CPU/NVMe offload (or null)"})
    min_nodes = Integer(allow_none=True, validate=validate.Range(min=1, error="must be at least {min}"),
                        metadata={"hint": "2 for a multi-node-only cause (or null)"})
    min_world_size = Integer(allow_none=True, validate=validate.Range(min=1, error="must be at least {min}"),
                             metadata={"hint": "2 for a distributed-only cause (or null)"})
    phases = fields.List(String(validate=_one_of(PHASES)), allow_none=True,
                         metadata={"hint": "where it usually shows, a list of " + ", ".join(PHASES)})


class FixSchema(StrictSchema):
    title = _text_field("{en: '...', zh: '...'}: what to change, in English and Chinese", required=True)
    kind = String(required=True, validate=_one_of(FIX_KINDS), metadata={"hint": "one of " + ", ".join(FIX_KINDS)})
    snippet = String(load_default="", metadata={"hint": "the config, command or code to apply"})


class CauseSchema(StrictSchema):
    id = String(required=True, validate=_regexp(CAUSE_ID, "compute.fp16_overflow"),
                metadata={"hint": "the catalog ID, or <domain>.<name> for a finer cause, e.g. 'compute.fp16_overflow'"})
    domain = String(required=True, validate=_one_of(DOMAINS), metadata={"hint": "one of " + ", ".join(DOMAINS)})
    parent = String(allow_none=True, load_default=None, validate=_regexp(CAUSE_ID, "comm.network_interface"),
                    metadata={"hint": "the catalog cause this finer cause refines (or null)"})
    title = _text_field("{en: '...', zh: '...'}: a short name in English and Chinese", required=True)
    description = _text_field("{en: '...', zh: '...'}: what goes wrong, in English and Chinese", required=True)
    prior = fields.Nested(PriorSchema, required=True,
                          metadata={"hint": "{value: 0.03, basis: 'estimate: ...'}"})
    context = fields.Nested(ContextSchema, load_default=dict,
                            metadata={"hint": "where the cause can apply, e.g. {precision: [fp16]}"})
    mechanisms = prob_map(MECHANISM_ID, "m.fp16_grad_overflow",
                          "a map of mechanism ID to P(mechanism | cause), e.g. {m.fp16_grad_overflow: 0.95}",
                          required=True)
    fixes = fields.List(fields.Nested(FixSchema), load_default=list,
                        metadata={"hint": "a list of {title: {en, zh}, kind, snippet}"})
    regression = _text_field("{en: '...', zh: '...'}: what to rerun, for how long, which curve to compare",
                             allow_none=True, load_default=None)
    prevention = _text_field("{en: '...', zh: '...'}: what to monitor or gate", allow_none=True, load_default=None)
    references = _references()
    status = _status()


# ---------------------------------------------------------------- mechanisms, symptoms


class MechanismSchema(StrictSchema):
    id = String(required=True, validate=_regexp(MECHANISM_ID, "m.fp16_grad_overflow"),
                metadata={"hint": "m.<name>, e.g. 'm.fp16_grad_overflow'"})
    pillar = String(required=True, validate=_one_of(PILLARS), metadata={"hint": "one of " + ", ".join(PILLARS)})
    title = _text_field("{en: '...', zh: '...'}: a short name in English and Chinese", required=True)
    description = _text_field("{en: '...', zh: '...'}: how the fault propagates, in English and Chinese",
                              required=True)
    symptoms = prob_map(SYMPTOM_ID, "s.fp16_overflow_repeated",
                        "a map of symptom ID to P(symptom | mechanism active), e.g. {s.fp16_overflow_repeated: 0.9}",
                        required=True)
    references = _references()
    status = _status()


class SymptomSchema(StrictSchema):
    id = String(required=True, validate=_regexp(SYMPTOM_ID, "s.cuda_oom"), metadata={"hint": "s.<name>, e.g. 's.cuda_oom'"})
    title = _text_field("{en: '...', zh: '...'}: a short name in English and Chinese", required=True)
    description = _text_field("{en: '...', zh: '...'}: what is observed and where, in English and Chinese",
                              required=True)
    kind = String(required=True, validate=_one_of(SYMPTOM_KINDS), metadata={"hint": "one of " + ", ".join(SYMPTOM_KINDS)})
    source = String(required=True, validate=_one_of(SYMPTOM_SOURCES),
                    metadata={"hint": "one of " + ", ".join(SYMPTOM_SOURCES)})
    severity = String(required=True, validate=_one_of(SEVERITIES), metadata={"hint": "one of " + ", ".join(SEVERITIES)})
    leak = probability("P(symptom | no modelled cause), strictly between 0 and 1, e.g. 0.01", required=True)
    absent_reliability = Number(
        required=True,
        validate=validate.Range(0, 1, error="must be between 0 and 1, got {input}"),
        metadata={"hint": "0..1, how much 'not seen although its source was supplied' counts, e.g. 0.5"},
    )
    question = _text_field("{en: '...?', zh: '...？'} for symptoms a person answers (or null)",
                           allow_none=True, load_default=None)
    printed_by = fields.List(
        String(validate=_one_of(FRAMEWORKS)), load_default=list,
        metadata={"hint": "the training frameworks that print this message, e.g. [pytorch]; empty = any. Logs of a "
                          "job on another framework do not count it as missing"})
    references = _references()
    status = _status()


# ---------------------------------------------------------------- experiments


class CostSchema(StrictSchema):
    minutes = Number(required=True, validate=validate.Range(min=0, min_inclusive=False, error="must be more than 0"),
                     metadata={"hint": "wall-clock minutes the experiment takes, e.g. 30"})
    gpus = Integer(required=True, validate=validate.Range(min=0, error="must be 0 or more"),
                   metadata={"hint": "GPUs it occupies, e.g. 8 (0 for a check without GPUs)"})


class OutcomeSchema(StrictSchema):
    id = String(required=True, validate=_regexp(OUTCOME_ID, "issue_gone"), metadata={"hint": "a short name, e.g. issue_gone"})
    title = _text_field("{en: '...', zh: '...'}: what the person observes", required=True)
    settled_by = fields.List(String(validate=_regexp(SYMPTOM_ID, "s.gpu_lost_nvidia_smi")), load_default=list,
                             metadata={"hint": "symptoms whose presence in the evidence already gives this outcome, "
                                               "e.g. [s.gpu_lost_nvidia_smi]: the experiment is then not proposed"})


def outcome_row(hint: str, **kwargs: Any) -> fields.Dict:
    return fields.Dict(keys=String(validate=_regexp(OUTCOME_ID, "issue_gone")), values=Number(validate=PROBABILITY),
                       metadata={"hint": hint}, **kwargs)


class ExperimentSchema(StrictSchema):
    id = String(required=True, validate=_regexp(EXPERIMENT_ID, "x.disable_mixed_precision"),
                metadata={"hint": "x.<name>, e.g. 'x.disable_mixed_precision'"})
    title = _text_field("{en: '...', zh: '...'}: a short name in English and Chinese", required=True)
    how = _text_field("{en: '...', zh: '...'}: how to run it and what to look at", required=True)
    commands = fields.List(CommandField(), load_default=list,
                           metadata={"hint": "a list of commands to run, e.g. ['NCCL_DEBUG=INFO deepspeed train.py', "
                                             "{python: 'torch.cuda.memory._record_memory_history()'}]"})
    cost = fields.Nested(CostSchema, required=True, metadata={"hint": "{minutes: 30, gpus: 8}"})
    outcomes = fields.List(fields.Nested(OutcomeSchema), required=True,
                           validate=validate.Length(min=2, error="needs at least 2 outcomes"),
                           metadata={"hint": "a list of at least 2 {id, title: {en, zh}}"})
    default = outcome_row("P(outcome) under causes not listed in expects, e.g. {issue_gone: 0.2, issue_persists: 0.8}",
                          required=True)
    expects = fields.Dict(
        keys=String(validate=_regexp(CAUSE_ID, "compute.fp16_overflow")),
        values=outcome_row("P(outcome | cause) for every outcome, summing to 1"),
        load_default=dict,
        metadata={"hint": "a map of cause ID to {outcome: P(outcome | cause)}"},
    )
    references = _references()
    status = _status()


# ---------------------------------------------------------------- overlay patches


class PatchSchema(StrictSchema):
    """An overlay's change to an existing entry; which fields apply depends on the target's kind."""

    target = String(required=True, validate=_regexp(ANY_ID, "comm.network_interface"),
                    metadata={"hint": "the ID of the entry to change, e.g. 'comm.network_interface'"})
    prior = fields.Nested(PriorSchema, metadata={"hint": "{value: 0.1, basis: 'site: 12 of 40 incidents in 2024'}"})
    mechanisms = prob_map(MECHANISM_ID, "m.wrong_interface_selected",
                          "mechanism ID -> P(mechanism | cause) to add or change")
    symptoms = prob_map(SYMPTOM_ID, "s.suspicious_interface", "symptom ID -> P(symptom | mechanism) to add or change")
    leak = probability("the new leak of the symptom, e.g. 0.02")
    absent_reliability = Number(validate=validate.Range(0, 1, error="must be between 0 and 1, got {input}"))
    expects = fields.Dict(keys=String(validate=_regexp(CAUSE_ID, "compute.fp16_overflow")),
                          values=outcome_row("P(outcome | cause) for every outcome"),
                          metadata={"hint": "cause ID -> {outcome: P} rows to add or replace"})
    fixes = fields.List(fields.Nested(FixSchema), metadata={"hint": "fixes to append"})
    references = fields.List(String(validate=_not_blank), metadata={"hint": "references to append"})
    status = String(validate=_one_of(STATUSES), metadata={"hint": "active or deprecated"})


#: fields a patch may set, per kind of target
PATCHABLE = {
    "causes": ("prior", "mechanisms", "fixes", "references", "status"),
    "mechanisms": ("symptoms", "references", "status"),
    "symptoms": ("leak", "absent_reliability", "references", "status"),
    "experiments": ("expects", "references", "status"),
}

SCHEMAS: dict[str, Schema] = {
    "causes": CauseSchema(),
    "mechanisms": MechanismSchema(),
    "symptoms": SymptomSchema(),
    "experiments": ExperimentSchema(),
    "patches": PatchSchema(),
}

Issue = tuple[tuple[Any, ...], str]


# ---------------------------------------------------------------- messages


def format_path(path: tuple[Any, ...]) -> str:
    """``('fixes', 0, 'kind')`` -> ``fixes[0].kind``; map keys with dots -> ``mechanisms[m.x]``."""
    out = ""
    for step in path:
        if isinstance(step, int) or "." in str(step) or not str(step).isidentifier():
            out += f"[{step}]"
        else:
            out += f".{step}" if out else str(step)
    return out


def _hint(field: fields.Field | None) -> str:
    return (field.metadata.get("hint") if field is not None else None) or "a value"


def _allowed(schema: Schema) -> str:
    return ", ".join(schema.fields)


def _flatten(messages: Any, schema: Schema, path: tuple[Any, ...]) -> Iterator[Issue]:
    """Walk marshmallow's nested error dict alongside the schema; yield ``(path, message)``."""
    if isinstance(messages, list):
        for msg in messages:
            yield path, str(msg)
        return
    for key, sub in messages.items():
        field = schema.fields.get(key) if isinstance(key, str) else None
        if field is None and key != "_schema":
            where = format_path((*path, key))
            yield (*path, key), f"unknown field '{where}'; allowed: {_allowed(schema)}"
            continue
        if key == "_schema":
            yield from ((path, str(m)) for m in (sub if isinstance(sub, list) else [sub]))
            continue
        yield from _field_issues(sub, field, (*path, key))


def _field_issues(messages: Any, field: fields.Field, path: tuple[Any, ...]) -> Iterator[Issue]:
    where = format_path(path)
    if isinstance(messages, list):
        for msg in map(str, messages):
            yield path, _rewrite(msg, where, field)
        return
    if isinstance(field, fields.Nested):
        yield from _flatten(messages, field.schema, path)
    elif isinstance(field, fields.List):
        for index, sub in messages.items():
            if isinstance(index, int):
                yield from _field_issues(sub, field.inner, (*path, index))
            else:
                yield from _field_issues(sub, field, path)
    elif isinstance(field, fields.Dict):
        for key, sub in messages.items():
            for part, msgs in sub.items():
                target = field.key_field if part == "key" else field.value_field
                if part == "key":
                    for msg in msgs:
                        yield (*path, key), f"key {key!r} in '{where}': {_key_message(str(msg), key)}"
                else:
                    yield from _field_issues(msgs, target, (*path, key))
    else:
        yield path, f"field '{where}': {messages}"


def _key_message(msg: str, key: Any) -> str:
    if not isinstance(key, str):
        return (f"must be text, got {type(key).__name__} {key!r} "
                "(YAML reads yes/no/on/off/true/false and bare numbers as non-text: quote the key)")
    return msg


def _rewrite(msg: str, where: str, field: fields.Field | None) -> str:
    if msg == "Missing data for required field.":
        return f"field '{where}' is missing: write {_hint(field)}"
    if msg == "Field may not be null.":
        return f"field '{where}' is null: write {_hint(field)}"
    if msg in ("Invalid input type.", "Not a valid list.", "Not a valid mapping type.", "Invalid type."):
        return f"field '{where}' has the wrong type: write {_hint(field)}"
    if msg == "must not be empty":
        return f"field '{where}' must not be empty: write {_hint(field)}"
    return f"field '{where}': {msg}"


# ---------------------------------------------------------------- checks across fields


def row_issues(row: Mapping[str, float], outcomes: list[str], path: tuple[Any, ...]) -> Iterator[Issue]:
    where = format_path(path)
    for outcome in row:
        if outcome not in outcomes:
            yield (*path, outcome), (f"outcome {outcome!r} in '{where}' is not one of this experiment's outcomes: "
                                     + ", ".join(outcomes))
    missing = [o for o in outcomes if o not in row]
    if missing:
        yield path, (f"'{where}' gives no probability for outcome(s) {', '.join(missing)}: "
                     "give every outcome a probability strictly between 0 and 1")
    total = sum(row.values())
    if abs(total - 1.0) > ROW_TOLERANCE:
        yield path, f"the probabilities in '{where}' sum to {total:.3f}: they must sum to 1 (±{ROW_TOLERANCE})"


def entry_checks(kind: str, data: Mapping[str, Any]) -> list[Issue]:
    """Checks across the fields of one valid entry (the ID's domain, outcome tables)."""
    issues: list[Issue] = []
    if kind == "causes":
        first = data["id"].split(".", 1)[0]
        if first != data["domain"]:
            issues.append((("id",), f"cause ID {data['id']!r} must start with its domain '{data['domain']}.' "
                                    f"(or set domain: {first} if that domain is meant)"))
        if data.get("parent") == data["id"]:
            issues.append((("parent",), "a cause cannot be its own parent: write the catalog cause it refines"))
    elif kind == "experiments":
        outcomes = [o["id"] for o in data["outcomes"]]
        seen: set[str] = set()
        for index, outcome in enumerate(outcomes):
            if outcome in seen:
                issues.append((("outcomes", index, "id"), f"outcome {outcome!r} is listed twice: outcome IDs must be unique"))
            seen.add(outcome)
        issues.extend(row_issues(data["default"], outcomes, ("default",)))
        for cause_id, row in data["expects"].items():
            issues.extend(row_issues(row, outcomes, ("expects", cause_id)))
    return issues


def validate_entry(kind: str, raw: Any) -> tuple[dict[str, Any] | None, list[Issue]]:
    """Validate one entry of a file kind; return ``(data or None, issues)``."""
    schema = SCHEMAS[kind]
    if not isinstance(raw, dict):
        return None, [((), f"each entry of '{kind}' must be a mapping of fields starting with 'id:', got {raw!r}")]
    try:
        data = schema.load(raw)
    except ValidationError as exc:
        messages = exc.messages if isinstance(exc.messages, dict) else {"_schema": exc.messages}
        return None, list(_flatten(messages, schema, ()))
    issues = entry_checks(kind, data)
    return (None if issues else data), issues
