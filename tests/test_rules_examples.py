"""Every rule's own examples, run through the real matcher (one test per rule), for the real rule data and
the fixture rules. A rule without both match and no_match examples is a load error (test_rules_loader)."""

from __future__ import annotations

import functools

import pytest

from dsdoctor.rules.loader import load_rules_with_problems
from dsdoctor.rules.ruleset import RuleSet
from dsdoctor.rules.testing import ExampleRunner, run_examples
from tests.rulesfx import fixture_rules

_REAL, _ = load_rules_with_problems(compile_check=False)  # parsed only: cheap at collection time


@functools.cache
def real_runner() -> ExampleRunner:
    ruleset, _ = load_rules_with_problems()
    return ExampleRunner(ruleset)


def _describe(results) -> str:
    return "\n".join(f"{r.where} {r.rule} [{r.kind}] {r.message}: {r.line[:160]!r}" for r in results if not r.ok)


@pytest.mark.parametrize("rule_id", [r.id for r in _REAL.rules] or ["(no rules yet)"])
def test_real_rule_examples(rule_id: str) -> None:
    runner = real_runner()
    rule = runner.rules.get(rule_id)
    if rule is None:
        pytest.skip("not loaded (see test_real_rule_data_loads_without_problems)")
    results = runner.run_rule(rule)
    assert results and all(r.ok for r in results), _describe(results)


def test_fixture_rule_examples() -> None:
    results = run_examples(fixture_rules())
    assert len(results) >= 40 and all(r.ok for r in results), _describe(results)


def test_runner_reports_failures_and_todo() -> None:
    from dsdoctor.rules.ruleset import Rule

    rule = Rule(id="t.bad", title="t", kind="log", pattern=r"loss=(?P<loss>\d+)", symptom="s.loss_nan",
                fields={"loss": "int"}, match_examples=({"line": "loss=3", "fields": {"loss": 4}}, {"line": "nope", "fields": {}}),
                no_match_examples=("loss=5",), todo_examples=({"line": "loss=6", "fields": {}},))
    results = run_examples(RuleSet([rule]))
    assert [(r.kind, r.ok) for r in results] == [("match", False), ("match", False), ("no_match", False),
                                                 ("todo_match", True)]
    assert "loss=3 (expected 4)" in results[0].message and results[3].message.startswith("now matches")
