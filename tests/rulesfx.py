"""Helpers for the rules-engine tests: the fixture rule set and a one-call extraction."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from dsdoctor.rules.extract import extract
from dsdoctor.rules.loader import load_rules
from dsdoctor.rules.model import Extraction
from dsdoctor.rules.ruleset import RuleSet

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
MARKERS = ROOT / "rules" / "data" / "context" / "markers.yaml"


@functools.cache
def fixture_rules() -> RuleSet:
    """tests/fixtures/rules plus the engine's own context markers."""
    return load_rules([FIXTURES / "rules", MARKERS])


def run(logs: dict[str, str] | str | None = None, **evidence: Any) -> Extraction:
    """Extract with the fixture rules; ``logs`` is one text or {source: text}."""
    if isinstance(logs, str):
        logs = {"stdout": logs}
    doc: dict[str, Any] = dict(evidence)
    if logs:
        doc["logs"] = [{"source": name, "text": text} for name, text in logs.items()]
    return extract(doc, rules=fixture_rules())


def lines(*items: str) -> str:
    return "\n".join(items) + "\n"
