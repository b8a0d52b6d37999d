"""Free text (the evidence ``description``, chat messages) through the phrase rules, English and Chinese.

Phrase rules use the same matcher as log rules (Hyperscan in UTF-8 mode, then RE2 on the text),
caseless by default. A match is soft evidence: the rule's own ``reliability`` when it has one (an
identifier ~0.95, a vague word ~0.6), else the global one in rules/data/derive.yaml.
A match negated in its own clause ("no OOM", "没有报错") records the symptom as absent with the
strength ``negated_reliability`` (a soft "no": the parse of a sentence may be wrong).

A rule with an ``observation`` (``x.EXPERIMENT=OUTCOME``) reports an experiment the person already
ran ("with NCCL_P2P_DISABLE=1 it completes"); it becomes a :class:`~rules.model.ReportedOutcome` with
the rule's ``reliability`` (default ``outcome_reliability``), and a negated match says the outcome did
not happen, no stronger than ``negated_reliability``.
"""

from __future__ import annotations

import functools
import re
from typing import Any, NamedTuple

from dsdoctor.rules.collect import Collector
from dsdoctor.rules.lexicon import compose_description
from dsdoctor.rules.matcher import cached_fingerprint, cached_matcher
from dsdoctor.rules.model import Extraction, ReportedOutcome
from dsdoctor.rules.ruleset import RuleSet
from dsdoctor.rules.settings import Settings

MAX_DESCRIPTION_CHARS = 1_000_000


_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff]")


def _negated(line: str, start: int, cfg: dict[str, Any], lists: tuple[str, ...] = ("negations", "motives")) -> bool:
    """Is the match at ``start`` preceded, in its clause and within a few characters, by a negation
    (or, for a symptom, a motive: "to avoid OOM")? ``lists`` names the word lists of ``cfg`` to use.

    The negation words are those of the text's language, not the rule's: an English term such as
    "OOM" inside a Chinese sentence (现在不 OOM 了) is negated by 不.
    """
    window = cfg["negation_window_chars"]
    before = _without_pseudo_negations(line[max(0, start - window * 4):start], cfg)
    parts = re.split(cfg["clause_breaks"], before)
    clause = parts[-1][-window:] if parts else ""
    chosen = [cfg.get(name) or {} for name in lists]
    if _HAN.search(clause) and any(word in clause for words in chosen for word in words.get("zh", [])):
        return True
    found = re.findall(r"[a-z']+", clause.lower())
    return any(word in found for words in chosen for word in words.get("en", []))


def _negated_outcome(line: str, start: int, cfg: dict[str, Any]) -> bool:
    """The negation test of an experiment's outcome: negations only, no motive words."""
    return _negated(line, start, cfg, ("negations",))


@functools.lru_cache(maxsize=8)
def _pseudo(patterns: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)


def _without_pseudo_negations(text: str, cfg: dict[str, Any]) -> str:
    """``text`` with the negation-shaped words that negate nothing blanked out: 不到 (less than), 不断
    (on and on), 不知道为什么 / "not sure why" (the speaker's doubt), an aside such as （不是显存）."""
    patterns = tuple(cfg.get("pseudo_negations") or ())
    return _pseudo(patterns).sub(lambda m: " " * len(m.group(0)), text) if patterns else text


def asserted(line: str, m: Any, cfg: dict[str, Any]) -> bool | None:
    """Does the match state its rule (True), deny it (False), or straddle two clauses (None, ignored)?

    Every phrase is denied by a negation shortly before it. An outcome phrase ("lowering the LR did not
    help") spans the experiment and its result, so a negation inside the span denies it too, and a span
    that runs across "but" (".. hangs with nccl but works with gloo") joins two statements and says neither.
    """
    if not m.rule.observation:
        return not _negated(line, m.start, cfg)
    if _negated_outcome(line, m.start, cfg):
        return False
    span = line[m.start:m.end]
    if re.search(cfg["outcome_span_breaks"], span, re.IGNORECASE):
        return None
    words = set(re.findall(r"[a-z']+", span.lower()))
    negations = cfg["outcome_span_negations"]
    return not (words & set(negations.get("en", [])) or any(word in span for word in negations.get("zh", [])))


def read_description(description: Any, rules: RuleSet, collector: Collector, settings: Settings,
                     extraction: Extraction, source: str = "description") -> None:
    """Match the phrase rules against a description; add symptoms (or known-absent ones)."""
    if description is None:
        return
    if not isinstance(description, str):
        extraction.warnings.append("'description' must be text; ignored")
        return
    if not description.strip():
        return
    extraction.supplied_sources.add("description")
    phrase_rules = rules.phrase_rules
    if not phrase_rules:
        return
    cfg = settings.derive["phrases"]
    matcher = cached_matcher(cached_fingerprint(rules, phrase_rules), phrase_rules, utf8=True)
    said_no: set[str] = set()
    seen: set[str] = set()
    outcomes: dict[str, ReportedOutcome] = {}
    for lineno, line in enumerate(description[:MAX_DESCRIPTION_CHARS].splitlines(), 1):
        for m in matcher.match_line(line):
            said = asserted(line, m, cfg)
            if said is None:
                continue
            negated = not said
            if m.rule.observation:
                _record_outcome(outcomes, m.rule, said, line, lineno, source, cfg)
            if not m.rule.symptom:
                continue
            sid = m.rule.symptom
            reliability = cfg["reliability"] if m.rule.reliability is None else m.rule.reliability
            if negated:
                said_no.add(sid)
                continue
            seen.add(sid)
            collector.observe(sid, source=source, text=line.strip(), rule=m.rule.id, reliability=reliability,
                              fields=dict(m.groups), lineno=lineno)
    def composed_outcome(comp: Any, happened: bool, line: str, lineno: int) -> None:
        _record_outcome(outcomes, comp, happened, line, lineno, source, cfg)

    compose_description(description[:MAX_DESCRIPTION_CHARS], cfg, _negated, collector, source, said_no, seen,
                        negated_outcome=_negated_outcome, on_outcome=composed_outcome)
    _read_versions(description[:MAX_DESCRIPTION_CHARS], outcomes, source, cfg)
    for sid in said_no - seen - extraction.absent:
        extraction.absent.add(sid)  # a "no" read from words is soft: the parse may be wrong
        extraction.absent_strength[sid] = cfg["negated_reliability"]
    extraction.outcomes.extend(outcomes.values())


class _VersionRule(NamedTuple):
    id: str
    observation: str
    reliability: float


def _read_versions(text: str, outcomes: dict[str, ReportedOutcome], source: str, cfg: dict[str, Any]) -> None:
    """Two releases compared in words ("runs with 0.5.8, throws with 0.6.1"): x.other_release's outcome."""
    from dsdoctor.rules import version_outcomes

    for said in version_outcomes.read(text):
        rule = _VersionRule("versions.compare", f"x.other_release={said.outcome}", version_outcomes.reliability())
        _record_outcome(outcomes, rule, True, said.text, said.lineno, source, cfg)


def _record_outcome(found: dict[str, ReportedOutcome], rule: Any, happened: bool, line: str, lineno: int,
                    source: str, cfg: dict[str, Any]) -> None:
    """Keep one reported outcome per experiment=outcome: a plain statement beats a denied one, then the surer."""
    experiment, outcome = rule.observation.split("=", 1)
    reliability = rule.reliability or cfg["outcome_reliability"]
    if not happened:
        reliability = min(reliability, cfg["negated_reliability"])
    new = ReportedOutcome(experiment, outcome, happened, reliability, rule.id, line.strip()[:500], source, lineno)
    old = found.get(new.key)
    if old is None or (new.happened, new.reliability) > (old.happened, old.reliability):
        found[new.key] = new
