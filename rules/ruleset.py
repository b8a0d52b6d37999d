"""Rules as loaded from the data files: plain objects, no compiled state."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any


@dataclass(frozen=True)
class Rule:
    """One rule (see RULES_FORMAT.md); ``marker`` rules feed the engine's context instead of a symptom."""

    id: str
    title: str
    kind: str  # log | phrase | marker
    pattern: str
    symptom: str | None = None
    observation: str | None = None  # phrase rules: "x.EXPERIMENT=OUTCOME" the words report
    marker: str | None = None
    severity: str = "info"
    lang: str | None = None
    caseless: bool = False
    reliability: float | None = None  # phrase rules: strength of a match (None = the global default)
    fields: dict[str, str] = field(default_factory=dict)
    secondary: bool = False
    references: tuple[str, ...] = ()
    match_examples: tuple[dict[str, Any], ...] = ()
    no_match_examples: tuple[str, ...] = ()
    todo_examples: tuple[dict[str, Any], ...] = ()
    file: str = "<memory>"
    line: int = 0

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @classmethod
    def from_data(cls, data: dict[str, Any], file: str = "<memory>", line: int = 0) -> Rule:
        """Build a rule from validated schema data."""
        kind = data["kind"]
        caseless = data.get("caseless")
        examples = data.get("examples") or {}
        return cls(
            id=data["id"], title=data["title"], kind=kind, pattern=data["pattern"],
            symptom=data.get("symptom"), observation=data.get("observation"),
            marker=data.get("marker"),
            severity=data.get("severity") or "info", lang=data.get("lang"),
            caseless=(kind == "phrase") if caseless is None else bool(caseless),
            reliability=data.get("reliability"),
            fields=dict(data.get("fields") or {}), secondary=bool(data.get("secondary")),
            references=tuple(data.get("references") or ()),
            match_examples=tuple(examples.get("match") or ()),
            no_match_examples=tuple(examples.get("no_match") or ()),
            todo_examples=tuple(examples.get("todo_match") or ()),
            file=file, line=line,
        )


@dataclass
class RuleSet:
    """All rules of one load, in file order."""

    rules: list[Rule] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._by_id = {r.id: r for r in self.rules}

    def get(self, rule_id: str) -> Rule | None:
        return self._by_id.get(rule_id)

    @cached_property
    def line_rules(self) -> list[Rule]:
        """Rules scanned over log text: log rules and markers (the same list object every time)."""
        return [r for r in self.rules if r.kind in ("log", "marker")]

    @cached_property
    def phrase_rules(self) -> list[Rule]:
        return [r for r in self.rules if r.kind == "phrase"]

    def fingerprint(self, rules: list[Rule] | None = None) -> str:
        """A digest of what the compiled matcher depends on (patterns and flags)."""
        h = hashlib.sha256()
        for r in self.rules if rules is None else rules:
            h.update(f"{r.id}\0{r.kind}\0{r.pattern}\0{r.caseless}\n".encode())
        return h.hexdigest()[:16]
