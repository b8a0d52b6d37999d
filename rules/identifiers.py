"""The vocabulary of identifiers recognised in prose (rules/data/identifiers.yaml), compiled into phrase rules.

Each entry names one identifier family member (a CUDA or NCCL error enum, an exception class, an exit
code, an Xid number, a compiler failure) and the symptom it shows. :func:`compile_vocabulary` turns
every entry into a ``kind: phrase`` rule ``ident.<id>`` with the vocabulary's reliability, so the
matcher, negation, ``dsdoctor rules test`` and the KB lint read them like any other rule. ``names``
are literal identifiers (matched caseless as whole words); ``pattern`` is for families that need one
(exit codes, Xid numbers, compiler lines).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from marshmallow import ValidationError
from marshmallow import fields as mf

from dsdoctor.kb.errors import Problem
from dsdoctor.kb.schema import Number, StrictSchema, String
from dsdoctor.kb.schema import _flatten as flatten_errors
from dsdoctor.kb.yamlload import display_path, line_of, load_file
from dsdoctor.rules.ruleset import Rule

FILE_NAME = "identifiers.yaml"
RULE_PREFIX = "ident."


class _EntrySchema(StrictSchema):
    id = String(required=True, metadata={"hint": "<family>.<name>, e.g. 'nccl.system_error'"})
    title = String(required=True, metadata={"hint": "the identifier and what it means, in a few words"})
    symptom = String(required=True, metadata={"hint": "the knowledge-base symptom it shows, e.g. 's.nccl_system_error'"})
    names = mf.List(String(), load_default=list, metadata={"hint": "literal identifiers, e.g. [ncclSystemError]"})
    pattern = String(load_default=None, allow_none=True, metadata={"hint": "an RE2 pattern, when names do not suffice"})
    meaning = String(required=True, metadata={"hint": "what the defining source says it means"})
    reliability = Number(load_default=None, allow_none=True, metadata={"hint": "in (0, 1]; default: the file's"})
    references = mf.List(String(), required=True, metadata={"hint": "where the identifier is defined"})
    examples = mf.Dict(required=True, metadata={"hint": "{match: [...], no_match: [...]}: sentences of our own"})


_SCHEMA = _EntrySchema()


def names_pattern(names: list[str]) -> str:
    """Whole-word alternation of literal identifiers (escaped for RE2 and Hyperscan)."""
    return r"\b(?:" + "|".join(re.escape(n) for n in names) + r")\b"


def _rule_data(entry: dict[str, Any], default_reliability: float) -> dict[str, Any]:
    return {
        "id": RULE_PREFIX + entry["id"], "title": entry["title"], "kind": "phrase", "symptom": entry["symptom"],
        "severity": "error", "lang": "en",
        "pattern": entry["pattern"] or names_pattern(entry["names"]),
        "reliability": default_reliability if entry["reliability"] is None else entry["reliability"],
        "references": entry["references"], "examples": entry["examples"],
    }


def compile_vocabulary(path: Path, problems: list[Problem]) -> list[Rule]:
    """The phrase rules of one vocabulary file; problems are appended as ``file:line: message``."""
    data, yaml_problems = load_file(path)
    problems.extend(yaml_problems)
    file = display_path(path)
    if data is None:
        return []
    if not isinstance(data, dict) or set(data) != {"reliability", "identifiers"}:
        problems.append(Problem(file, 1, "a vocabulary file has exactly the keys 'reliability:' and 'identifiers:'"))
        return []
    default = data["reliability"]
    entries = data["identifiers"]
    if isinstance(default, bool) or not isinstance(default, (int, float)) or not 0 < default <= 1:
        problems.append(Problem(file, line_of(data, ["reliability"]), f"'reliability' must be in (0, 1], got {default!r}"))
        return []
    if not isinstance(entries, list):
        problems.append(Problem(file, line_of(data, ["identifiers"]), "'identifiers:' must be a list of entries"))
        return []
    rules: list[Rule] = []
    for index, raw in enumerate(entries):
        where = line_of(entries, [index])
        try:
            entry = _SCHEMA.load(raw if isinstance(raw, dict) else {})
        except ValidationError as exc:
            messages = exc.messages if isinstance(exc.messages, dict) else {"_schema": exc.messages}
            for sub, message in flatten_errors(messages, _SCHEMA, ()):
                problems.append(Problem(file, line_of(entries, [index, *sub]), message))
            continue
        if bool(entry["names"]) == bool(entry["pattern"]):
            problems.append(Problem(file, where, f"identifier {entry['id']!r}: give either 'names' or 'pattern'"))
            continue
        from dsdoctor.rules.schema import validate_rule  # marshmallow: only when the vocabulary is compiled

        valid, issues = validate_rule(_rule_data(entry, float(default)))
        for sub, message in issues:
            problems.append(Problem(file, line_of(entries, [index, *sub]), f"identifier {entry['id']!r}: {message}"))
        if valid is not None:
            rules.append(Rule.from_data(valid, file, where))
    return rules
