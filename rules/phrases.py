"""Free text (the evidence ``description``, chat messages) through the phrase rules, English and Chinese.

Phrase rules use the same matcher as log rules (Hyperscan in UTF-8 mode, then RE2 on the text),
caseless by default. A match is soft evidence: the rule's own ``reliability`` when it has one (an
identifier ~0.95, a vague word ~0.6), else the global one in rules/data/derive.yaml.
A match negated in its own clause ("no OOM", "没有报错") records the symptom as absent with the
strength ``negated_reliability`` (a soft "no": the parse of a sentence may be wrong).
"""

from __future__ import annotations

import re
from typing import Any

from rules.collect import Collector
from rules.lexicon import compose_description
from rules.matcher import cached_fingerprint, cached_matcher
from rules.model import Extraction
from rules.ruleset import RuleSet
from rules.settings import Settings

MAX_DESCRIPTION_CHARS = 1_000_000


_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff]")


def _negated(line: str, start: int, cfg: dict[str, Any]) -> bool:
    """Is the match at ``start`` preceded, in its clause and within a few characters, by a negation?

    The negation words are those of the text's language, not the rule's: an English term such as
    "OOM" inside a Chinese sentence (现在不 OOM 了) is negated by 不.
    """
    window = cfg["negation_window_chars"]
    before = line[max(0, start - window * 4):start]
    parts = re.split(cfg["clause_breaks"], before)
    clause = parts[-1][-window:] if parts else ""
    if _HAN.search(clause) and any(word in clause for word in cfg["negations"].get("zh", [])):
        return True
    words = re.findall(r"[a-z']+", clause.lower())
    return any(word in words for word in cfg["negations"].get("en", []))


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
    for lineno, line in enumerate(description[:MAX_DESCRIPTION_CHARS].splitlines(), 1):
        for m in matcher.match_line(line):
            sid = m.rule.symptom or ""
            if _negated(line, m.start, cfg):
                said_no.add(sid)
                continue
            seen.add(sid)
            reliability = cfg["reliability"] if m.rule.reliability is None else m.rule.reliability
            collector.observe(sid, source=source, text=line.strip(), rule=m.rule.id, reliability=reliability,
                              fields=dict(m.groups), lineno=lineno)
    compose_description(description[:MAX_DESCRIPTION_CHARS], cfg, _negated, collector, source, said_no, seen)
    for sid in said_no - seen - extraction.absent:
        extraction.absent.add(sid)  # a "no" read from words is soft: the parse may be wrong
        extraction.absent_strength[sid] = cfg["negated_reliability"]
