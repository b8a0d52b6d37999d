"""Run every rule's own examples through the real matcher (used by ``dsdoctor rules test`` and pytest).

A ``match`` example must be hit by Hyperscan and confirmed by RE2 with the listed fields
(captured values converted to their types; numbers compare with a relative tolerance of 1e-6,
``nan`` equals ``nan``). A ``no_match`` example must not match. ``todo_match`` examples are known
misses: they are run and reported, never counted as failures. Phrase rules are tested the way
descriptions are read, negation included (an outcome phrase denied in its own words does not match);
so are the paraphrases of the lexicon's compositions (rules/data/lexicon.yaml).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dsdoctor.rules.context import parse_prefix
from dsdoctor.rules.lexicon import Composition, Lexicon, load_lexicon
from dsdoctor.rules.matcher import LineMatcher, cached_matcher
from dsdoctor.rules.phrases import _negated, _negated_outcome, asserted
from dsdoctor.rules.ruleset import Rule, RuleSet
from dsdoctor.rules.settings import Settings, load_settings
from dsdoctor.rules.units import convert, parse_float


@dataclass(frozen=True)
class ExampleResult:
    rule: str
    kind: str  # match | no_match | todo_match
    line: str
    ok: bool
    message: str = ""
    where: str = ""


def _same(expected: Any, actual: Any) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected == actual
    e_num, a_num = parse_float(expected), parse_float(actual)
    if e_num is not None and a_num is not None and (isinstance(expected, (int, float)) or isinstance(actual, (int, float))):
        if math.isnan(e_num) or math.isnan(a_num):
            return math.isnan(e_num) and math.isnan(a_num)
        return math.isclose(e_num, a_num, rel_tol=1e-6, abs_tol=1e-9)
    return str(expected) == str(actual)


class ExampleRunner:
    """Holds the compiled matchers for one rule set."""

    def __init__(self, rules: RuleSet, settings: Settings | None = None, lexicon: Lexicon | None = None):
        self.rules = rules
        self.settings = settings or load_settings()
        self.lexicon = lexicon  # the compositions to test as well (the engine's own: load_lexicon())
        line_rules, phrase_rules = rules.line_rules, rules.phrase_rules
        self.lines: LineMatcher = cached_matcher(rules.fingerprint(line_rules), line_rules, utf8=False)
        self.phrases: LineMatcher = cached_matcher(rules.fingerprint(phrase_rules), phrase_rules, utf8=True)

    def fields_of(self, rule: Rule, line: str) -> dict[str, Any] | None:
        """The converted fields when ``rule`` matches ``line`` as the engine would read it, else ``None``."""
        if rule.kind == "phrase":
            cfg = self.settings.derive["phrases"]
            for m in self.phrases.match_line(line):
                if m.rule.id == rule.id and asserted(line, m, cfg):
                    return {k: convert(v, rule.fields.get(k, "str")) for k, v in m.groups.items()}
            return None
        data = line.encode("utf-8")
        ctx = parse_prefix(data)
        for m in self.lines.match_line(data, ctx.message_start):
            if m.rule.id == rule.id:
                return {k: convert(v, rule.fields.get(k, "str")) for k, v in m.groups.items()}
        return None

    def run_rule(self, rule: Rule) -> list[ExampleResult]:
        out = []
        for example in rule.match_examples:
            line, expected = example["line"], example.get("fields") or {}
            got = self.fields_of(rule, line)
            if got is None:
                out.append(ExampleResult(rule.id, "match", line, False, "does not match", rule.where))
                continue
            wrong = [f"{k}={got.get(k)!r} (expected {v!r})" for k, v in expected.items()
                     if k not in got or not _same(v, got[k])]
            out.append(ExampleResult(rule.id, "match", line, not wrong,
                                     ("wrong fields: " + ", ".join(wrong)) if wrong else "", rule.where))
        for line in rule.no_match_examples:
            got = self.fields_of(rule, line)
            out.append(ExampleResult(rule.id, "no_match", line, got is None,
                                     "" if got is None else "matches but must not", rule.where))
        for example in rule.todo_examples:
            got = self.fields_of(rule, example["line"])
            out.append(ExampleResult(rule.id, "todo_match", example["line"], True,
                                     "now matches: move it to match" if got is not None else "known miss", rule.where))
        return out

    def composes(self, comp: Composition, line: str) -> bool:
        """Does the lexicon composition hold in ``line``, not negated, as a description is read?"""
        cfg = self.settings.derive["phrases"]
        lexicon = self.lexicon or load_lexicon()
        return any(hit.composition.id == comp.id and not hit.negated
                   for hit in lexicon.compose(line, cfg, _negated, _negated_outcome))

    def run_composition(self, comp: Composition) -> list[ExampleResult]:
        out = [ExampleResult(comp.id, "match", line, ok, "" if ok else "does not compose", comp.where)
               for line in comp.match for ok in [self.composes(comp, line)]]
        out += [ExampleResult(comp.id, "no_match", line, not hit, "composes but must not" if hit else "", comp.where)
                for line in comp.no_match for hit in [self.composes(comp, line)]]
        return out

    def run(self, rule_id: str | None = None) -> list[ExampleResult]:
        """The examples of every rule and lexicon composition, or of the one named ``rule_id``."""
        rules = [r for r in self.rules.rules if rule_id is None or r.id == rule_id]
        results: list[ExampleResult] = []
        for rule in rules:
            results.extend(self.run_rule(rule))
        for comp in self.lexicon.compositions if self.lexicon else ():
            if rule_id is None or comp.id == rule_id:
                results.extend(self.run_composition(comp))
        if self.lexicon and rule_id in (None, VERSION_RULE):
            results.extend(run_version_examples())
        return results


VERSION_RULE = "versions.compare"


def run_version_examples() -> list[ExampleResult]:
    """The examples of rules/data/version_outcomes.yaml through the reader descriptions use."""
    from dsdoctor.rules import version_outcomes

    where = str(version_outcomes.DATA)
    match, no_match = version_outcomes.examples()
    out = []
    for line, outcome in match:
        got = [s.outcome for s in version_outcomes.read(line)]
        out.append(ExampleResult(VERSION_RULE, "match", line, got == [outcome],
                                 "" if got == [outcome] else f"reads {got or 'nothing'}, expected {outcome}", where))
    for line in no_match:
        got = [s.outcome for s in version_outcomes.read(line)]
        out.append(ExampleResult(VERSION_RULE, "no_match", line, not got, f"reads {got}" if got else "", where))
    return out


def run_examples(rules: RuleSet, rule_id: str | None = None) -> list[ExampleResult]:
    """Run the examples of every rule (or one); return one result per example."""
    return ExampleRunner(rules).run(rule_id)
