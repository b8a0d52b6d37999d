"""Load rule files into a :class:`~rules.ruleset.RuleSet`, collecting every problem as ``file:line: message``.

Rule files are the ``*.yaml`` files in the subfolders of a rules data directory (default
rules/data: ``logs/``, ``phrases/``, ``context/``); YAML files directly in the data directory
are engine settings, not rules. Each rule file has one top-level key ``rules:`` with a list.

A data directory's ``identifiers.yaml`` (rules/identifiers.py) adds the vocabulary of identifiers
as phrase rules.

Checks: the schema (rules/schema.py), unique IDs across files, at least one match and one
no_match example per rule, and every pattern compiles in RE2 and in Hyperscan (in the form the
matcher uses). A rule with a problem is left out; :func:`load_rules` raises
:class:`~kb.errors.KnowledgeError` listing every problem.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from pathlib import Path

import hyperscan
import re2

from dsdoctor.kb import snapshot
from dsdoctor.kb.errors import KnowledgeError, Problem
from dsdoctor.kb.yamlload import display_path, line_of, load_file
from dsdoctor.rules.matcher import cached_matcher, compile_hyperscan, compile_re2
from dsdoctor.rules.ruleset import Rule, RuleSet

DATA_DIR = Path(__file__).resolve().parent / "data"


def rule_files(dirs: Iterable[Path]) -> list[Path]:
    """Rule files under each directory's subfolders, sorted; ``template.yaml`` files are skipped."""
    files: list[Path] = []
    for d in dirs:
        d = Path(d)
        if d.is_file():
            files.append(d)
            continue
        for path in sorted(d.glob("*/**/*.yaml")):
            if path.name != "template.yaml" and path.is_file():
                files.append(path)
    return files


def _load_file(path: Path, problems: list[Problem]) -> list[Rule]:
    from dsdoctor.rules.schema import (
        validate_rule,  # marshmallow: only when files are parsed, not for a snapshot
    )

    data, yaml_problems = load_file(path)
    problems.extend(yaml_problems)
    file = display_path(path)
    if data is None:
        return []
    if not isinstance(data, dict) or set(data) != {"rules"}:
        keys = ", ".join(map(str, data)) if isinstance(data, dict) else type(data).__name__
        problems.append(Problem(file, 1, f"a rule file has exactly one top-level key 'rules:' with a list; found {keys}"))
        return []
    entries = data["rules"]
    if not isinstance(entries, list):
        problems.append(Problem(file, line_of(data, ["rules"]), "'rules:' must be a list of rules (each starting '- id:')"))
        return []
    rules = []
    for index, raw in enumerate(entries):
        valid, issues = validate_rule(raw)
        for path_in_entry, message in issues:
            problems.append(Problem(file, line_of(entries, [index, *path_in_entry]), message))
        if valid is not None:
            rules.append(Rule.from_data(valid, file, line_of(entries, [index])))
    return rules


def _compile_problems(rules: list[Rule]) -> tuple[list[Rule], list[Problem]]:
    """Drop rules whose pattern does not compile in RE2 or Hyperscan; say why."""
    problems: list[Problem] = []
    good: list[Rule] = []
    bad: set[str] = set()
    for rule in rules:
        try:
            regex = compile_re2(rule)
        except re2.error as exc:
            detail = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
            problems.append(Problem(rule.file, rule.line, f"rule {rule.id}: pattern does not compile in RE2: {detail}"))
            continue
        if regex.search("" if rule.kind == "phrase" else b"") is not None:
            problems.append(Problem(rule.file, rule.line, f"rule {rule.id}: pattern matches empty text, so it would "
                                    "hit every line: require at least one character"))
            continue
        good.append(rule)
    for utf8 in (False, True):
        group = [r for r in good if (r.kind == "phrase") == utf8]
        if not group:
            continue
        try:
            cached_matcher(RuleSet(group).fingerprint(), group, utf8=utf8)  # compiled once, reused by the engine
            continue
        except hyperscan.error:
            pass
        for rule in group:  # find the culprits one by one
            try:
                compile_hyperscan([rule], utf8=utf8)
            except hyperscan.error as exc:
                bad.add(rule.id)
                problems.append(Problem(rule.file, rule.line, f"rule {rule.id}: pattern does not compile in Hyperscan "
                                        f"({exc}); avoid backreferences, lookaround and patterns that match empty text"))
    return [r for r in good if r.id not in bad], problems


def load_rules_with_problems(dirs: Sequence[Path] | None = None, *, compile_check: bool = True
                             ) -> tuple[RuleSet, list[Problem]]:
    """Load every rule file; return the valid rules and the problems found (never raises for data)."""
    problems: list[Problem] = []
    rules: list[Rule] = []
    for path in rule_files(dirs or [DATA_DIR]):
        rules.extend(_load_file(path, problems))
    from dsdoctor.rules.identifiers import (
        FILE_NAME as VOCABULARY_FILE,  # marshmallow: only when files are parsed
    )
    from dsdoctor.rules.identifiers import compile_vocabulary

    for d in dirs or [DATA_DIR]:  # the vocabulary of identifiers, compiled into phrase rules
        vocabulary = Path(d) / VOCABULARY_FILE
        if Path(d).is_dir() and vocabulary.is_file():
            rules.extend(compile_vocabulary(vocabulary, problems))
    first: dict[str, Rule] = {}
    unique: list[Rule] = []
    for rule in rules:
        if rule.id in first:
            problems.append(Problem(rule.file, rule.line, f"duplicate rule id {rule.id!r} (first at "
                                    f"{first[rule.id].where}): IDs are unique and never reused"))
            continue
        first[rule.id] = rule
        unique.append(rule)
    if compile_check:
        unique, compile_problems = _compile_problems(unique)
        problems.extend(compile_problems)
    return RuleSet(unique), problems


def load_rules(dirs: Sequence[Path] | None = None) -> RuleSet:
    """Load and check every rule file; raise :class:`KnowledgeError` listing all problems."""
    ruleset, problems = load_rules_with_problems(dirs)
    if problems:
        raise KnowledgeError(problems)
    return ruleset


_DEFAULT_KEY = (str(DATA_DIR.resolve()),)


#: modules whose code shapes a loaded rule set (a change of any of them invalidates its snapshot)
_CODE = ("dsdoctor.rules.loader", "dsdoctor.rules.ruleset", "dsdoctor.rules.schema", "dsdoctor.kb.yamlload")


@functools.lru_cache(maxsize=4)
def _cached(key: tuple[str, ...]) -> RuleSet:
    dirs = [Path(k) for k in key]
    return snapshot.cached("rules", lambda: rule_files(dirs), _CODE, lambda: load_rules(dirs))


def default_rules(dirs: Sequence[Path] | None = None) -> RuleSet:
    """The rule set of ``dirs`` (default rules/data), loaded once per process."""
    if not dirs:
        return _cached(_DEFAULT_KEY)
    return _cached(tuple(str(Path(d).resolve()) for d in dirs))
