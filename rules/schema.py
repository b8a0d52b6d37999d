"""Schema of rule files (rules/data/**/*.yaml, format in RULES_FORMAT.md), with messages for authors.

:func:`validate_rule` checks one entry and returns ``(data, issues)`` where each issue is
``(path inside the entry, message)``; the loader turns paths into ``file:line``. Unknown fields
are errors (marshmallow ``unknown=RAISE``); duplicate YAML keys are caught by kb/yamlload.py.

Rule kinds:

* ``log``: machine-printed lines; asserts ``symptom``.
* ``phrase``: human words in the description / chat text (``lang: en|zh``), caseless by default. A
  phrase rule may name an ``observation`` (``x.EXPERIMENT=OUTCOME``, an experiment the reporter
  already ran) instead of, or besides, a symptom; ``reliability`` says how far its words are trusted.
* ``marker``: context the engine itself reads (training progress, checkpoint/eval/exit markers,
  traceback frames, OOM figures, world size); names a ``marker`` instead of a symptom. Markers
  live in rules/data/context/ and are an extension of the shared format owned by the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from marshmallow import ValidationError, validate
from marshmallow import fields as mf

from dsdoctor.kb.schema import Boolean, Number, StrictSchema, String
from dsdoctor.kb.schema import _flatten as flatten_errors  # one message style for every data file
from dsdoctor.rules.ids import FIELD_NAME, OBSERVATION_KEY, RULE_ID, SYMPTOM_ID
from dsdoctor.rules.units import FIELD_TYPES

KINDS = ("log", "phrase", "marker")
SEVERITIES = ("error", "warning", "info")
LANGS = ("en", "zh")
MARKERS = (
    "progress",  # a training step went by: step / loss / grad_norm / loss_scale / lr fields
    "init",  # launch and initialisation lines (NCCL init, DeepSpeed engine set-up)
    "train_start",  # the training loop starts
    "checkpoint_start", "checkpoint_end",
    "eval_start", "eval_end",
    "exit",  # the job finished or tears down
    "traceback",  # "Traceback (most recent call last):"
    "frame",  # one Python traceback frame: file / line / func fields
    "overflow",  # fp16 overflow / skipped step: rank, attempted_scale / new_scale fields
    "memory",  # allocated / reserved memory snapshot (DeepSpeed MA / CA lines)
    "world_size",  # a printed world size: world_size field
    "launch_command",  # the job's launch command line: command field (script, launcher, config file)
    "version",  # a printed library version: nccl_version / torch_version / ... fields
    "framework",  # a line only one training framework prints: a field named after it (paddle, ...)
    "source_dmesg", "source_nvidia_smi",  # content that shows which kind of source a text is
)

Issue = tuple[tuple[Any, ...], str]


def _one_of(choices: tuple[str, ...]) -> validate.OneOf:
    return validate.OneOf(choices, error="must be one of " + ", ".join(choices) + "; got {input!r}")


def _regexp(pattern: str, example: str) -> validate.Regexp:
    return validate.Regexp(pattern, error=f"{{input!r}} is not valid here: write it like {example!r}")


def _not_blank(value: str) -> None:
    if not value.strip():
        raise ValidationError("must not be empty")


class ExampleField(mf.Field):
    """A match example: ``{line: "...", fields: {...}}`` or just the line as text."""

    default_error_messages = {  # noqa: RUF012
        "invalid": "must be a line of text or {line: '...', fields: {name: value}}, got {input!r}",
        "unknown": "unknown key(s) {keys}: an example has only 'line' and 'fields'",
    }

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> dict[str, Any]:
        if isinstance(value, str):
            return {"line": value, "fields": {}}
        if not isinstance(value, Mapping) or not isinstance(value.get("line"), str):
            raise self.make_error("invalid", input=value)
        extra = set(value) - {"line", "fields"}
        if extra:
            raise self.make_error("unknown", keys=", ".join(sorted(map(str, extra))))
        example_fields = value.get("fields") or {}
        if not isinstance(example_fields, Mapping):
            raise self.make_error("invalid", input=value)
        return {"line": value["line"], "fields": dict(example_fields)}


class ExamplesSchema(StrictSchema):
    match = mf.List(ExampleField(), load_default=list,
                        metadata={"hint": "a list of lines the rule must match, e.g. [{line: '...', fields: {...}}]"})
    no_match = mf.List(String(), load_default=list,
                           metadata={"hint": "a list of near-miss lines the rule must NOT match"})
    todo_match = mf.List(ExampleField(), load_default=list,
                             metadata={"hint": "known misses, recorded instead of hidden (not run as failures)"})


class RuleSchema(StrictSchema):
    id = String(required=True, validate=_regexp(RULE_ID, "oom.cuda_allocator"),
                metadata={"hint": "a stable ID <family>.<name>, e.g. 'oom.cuda_allocator'"})
    title = String(required=True, validate=_not_blank, metadata={"hint": "a short title"})
    kind = String(required=True, validate=_one_of(KINDS), metadata={"hint": "one of " + ", ".join(KINDS)})
    marker = String(load_default=None, allow_none=True, validate=_one_of(MARKERS),
                    metadata={"hint": "for kind: marker, one of " + ", ".join(MARKERS)})
    symptom = String(load_default=None, allow_none=True, validate=_regexp(SYMPTOM_ID, "s.cuda_oom"),
                     metadata={"hint": "the knowledge-base symptom it asserts, e.g. 's.cuda_oom'"})
    observation = String(load_default=None, allow_none=True,
                         validate=_regexp(OBSERVATION_KEY, "x.nccl_p2p_disable=issue_gone"),
                         metadata={"hint": "for phrase rules: the experiment outcome the words report, "
                                           "e.g. 'x.nccl_p2p_disable=issue_gone'"})
    severity = String(load_default="info", validate=_one_of(SEVERITIES),
                      metadata={"hint": "one of " + ", ".join(SEVERITIES)})
    lang = String(load_default=None, allow_none=True, validate=_one_of(LANGS),
                  metadata={"hint": "for phrase rules: en or zh"})
    pattern = String(required=True, validate=_not_blank,
                     metadata={"hint": "an RE2 pattern that Hyperscan also compiles (no backreferences or lookaround)"})
    caseless = Boolean(load_default=None, allow_none=True, metadata={"hint": "true or false"})
    reliability = Number(load_default=None, allow_none=True,
                         validate=validate.Range(0, 1, min_inclusive=False, error="must be in (0, 1], got {input}"),
                         metadata={"hint": "for phrase rules: how sure a match is, e.g. 0.95 for an identifier, "
                                           "0.6 for a vague word (default: phrases.reliability in derive.yaml)"})
    fields = mf.Dict(keys=String(validate=_regexp(FIELD_NAME, "requested")),
                         values=String(validate=_one_of(FIELD_TYPES)), load_default=dict,
                         metadata={"hint": "capture -> type, e.g. {requested: size}; types: " + ", ".join(FIELD_TYPES)})
    secondary = Boolean(load_default=False, metadata={"hint": "true for a victim/consequence line"})
    references = mf.List(String(validate=_not_blank), load_default=list,
                             metadata={"hint": "a list of URLs of the source that prints the message"})
    examples = mf.Nested(ExamplesSchema, required=True,
                             metadata={"hint": "{match: [...], no_match: [...]}: at least one of each"})


_SCHEMA = RuleSchema()


def _cross_checks(data: Mapping[str, Any]) -> list[Issue]:
    issues: list[Issue] = []
    kind = data["kind"]
    if kind == "marker":
        if not data["marker"]:
            issues.append((("marker",), "field 'marker' is missing: a marker rule names what it marks, one of "
                           + ", ".join(MARKERS)))
        if data["symptom"]:
            issues.append((("symptom",), "a marker rule asserts no symptom: remove 'symptom' or use kind: log"))
    else:
        if not data["symptom"] and not (kind == "phrase" and data["observation"]):
            issues.append((("symptom",), f"field 'symptom' is missing: a {kind} rule asserts a knowledge-base "
                                         "symptom, e.g. 's.cuda_oom'" + (" (or, for a phrase rule, an "
                                         "observation 'x.EXPERIMENT=OUTCOME')" if kind == "phrase" else "")))
        if data["marker"]:
            issues.append((("marker",), f"'marker' is only for kind: marker, not {kind}"))
    if kind != "phrase" and data["reliability"] is not None:
        issues.append((("reliability",), f"'reliability' is only for phrase rules: a {kind} rule's lines are "
                                         "as reliable as their source"))
    if data["observation"] and kind != "phrase":
        issues.append((("observation",), "'observation' is only for kind: phrase (what a person says they tried)"))
    if kind == "phrase" and not data["lang"]:
        issues.append((("lang",), "field 'lang' is missing: a phrase rule says its language, en or zh"))
    examples = data["examples"]
    if not examples["match"]:
        issues.append((("examples", "match"), "the rule has no match example: add at least one line it must match"))
    if not examples["no_match"]:
        issues.append((("examples", "no_match"),
                       "the rule has no no_match example: add at least one near-miss line it must not match"))
    for index, example in enumerate(examples["match"]):
        for name in example["fields"]:
            if name not in data["fields"] and f"(?P<{name}>" not in data["pattern"]:
                issues.append((("examples", "match", index, "fields", name),
                               f"example field {name!r} is not a named group of the pattern: "
                               f"capture it with (?P<{name}>...)"))
    return issues


def validate_rule(raw: Any) -> tuple[dict[str, Any] | None, list[Issue]]:
    """Validate one rule entry; return ``(data or None, issues)``."""
    if not isinstance(raw, dict):
        return None, [((), f"each entry of 'rules' must be a mapping of fields starting with 'id:', got {raw!r}")]
    try:
        data = _SCHEMA.load(raw)
    except ValidationError as exc:
        messages = exc.messages if isinstance(exc.messages, dict) else {"_schema": exc.messages}
        return None, list(flatten_errors(messages, _SCHEMA, ()))
    issues = _cross_checks(data)
    return (None if issues else data), issues
