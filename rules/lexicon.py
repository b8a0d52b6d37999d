"""Phrases by meaning: a bilingual lexicon of concepts composed into symptoms (rules/data/lexicon.yaml).

A phrase rule is one regular expression shaped like one sentence. A composition instead names
concepts ("the loss", "NaN", "only", "a card with a number") and asserts its symptom when one hit
of every concept falls in the same clause (or sentence) within ``window`` characters, in any order
unless ``order: listed``. Adverbs, an English message inside a Chinese sentence or a different word
order do not matter. Concept terms are regular expressions (Python ``re``); English terms get
ASCII word boundaries, so they also hold next to Chinese characters; a term may capture a named
field (``(?P<rank>\\d+)``). Negation and clause breaks are those of rules/phrases.py: the caller
passes its negation test in, so they are the same by construction.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsdoctor.kb.errors import KnowledgeError, Problem
from dsdoctor.kb.yamlload import display_path, line_of, load_file
from dsdoctor.rules.ids import OBSERVATION_KEY, RULE_ID, SYMPTOM_ID

LEXICON_FILE = Path(__file__).resolve().parent / "data" / "lexicon.yaml"
MAX_HITS = 8  # hits per concept and span considered when pairing (bounds the search)
_COMPOSITION_KEYS = {"id", "title", "symptom", "observation", "all", "none", "window", "order", "span", "reliability", "present",
                     "negatable", "examples"}

_GROUP = re.compile(r"\(\?P<[a-z_][a-z0-9_]*>")
Negated = Callable[[str, int, dict[str, Any]], bool]


@dataclass(frozen=True)
class Concept:
    id: str
    terms: tuple[re.Pattern[str], ...]
    any: re.Pattern[str] | None = None  # all terms in one pattern without fields: most lines hit no term

    def hits(self, text: str) -> list[tuple[int, int, dict[str, str]]]:
        if self.any is not None and self.any.search(text) is None:
            return []
        out = []
        for term in self.terms:
            for m in term.finditer(text):
                out.append((m.start(), m.end(), {k: v for k, v in m.groupdict().items() if v is not None}))
        return sorted(out)


@dataclass(frozen=True)
class Composition:
    id: str
    title: str
    symptom: str | None  # what the words show, or ...
    observation: str | None  # ... an experiment the person already ran: "x.EXPERIMENT=OUTCOME"
    concepts: tuple[str, ...]
    excluded: tuple[str, ...]  # concepts whose presence in the span stops the composition
    window: int
    ordered: bool
    span: str  # clause | sentence
    reliability: float
    present: bool  # False: a hit says the symptom is absent ("one workstation" -> not multi-node)
    negatable: bool  # False when a concept is itself negative-shaped ("cannot both be set", 不能)
    match: tuple[str, ...]
    no_match: tuple[str, ...]
    where: str


@dataclass(frozen=True)
class Hit:
    """One composed match in one line."""

    composition: Composition
    start: int
    end: int
    negated: bool
    fields: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Lexicon:
    concepts: dict[str, Concept]
    compositions: tuple[Composition, ...]
    sentence_breaks: re.Pattern[str]
    max_chars: int = 50_000  # the words of a report come first; a long paste is for the log rules
    max_line_chars: int = 4_000

    def get(self, composition_id: str) -> Composition | None:
        return next((c for c in self.compositions if c.id == composition_id), None)

    def _spans(self, line: str, breaks: re.Pattern[str]) -> list[tuple[int, int]]:
        spans, start = [], 0
        for m in breaks.finditer(line):
            if m.start() > start:
                spans.append((start, m.start()))
            start = m.end()
        if start < len(line):
            spans.append((start, len(line)))
        return spans

    def compose(self, line: str, cfg: dict[str, Any], negated: Negated,
                negated_outcome: Negated | None = None) -> Iterator[Hit]:
        """Every composition that holds in ``line``: the tightest hit per composition, negated or not.

        ``negated_outcome`` is the negation test of the compositions that report an experiment's
        outcome (a motive word, "to avoid the hang", denies a symptom but not what an experiment did).
        """
        clause_breaks = re.compile(cfg["clause_breaks"], re.IGNORECASE)
        spans = {"clause": self._spans(line, clause_breaks), "sentence": self._spans(line, self.sentence_breaks)}
        found_in_line = {cid: concept.hits(line) for cid, concept in self.concepts.items()}

        def within(cid: str, start: int, end: int) -> list[tuple[int, int, dict[str, str]]]:
            # hits are found on the whole line (a decimal point is no clause break), kept by where they start
            return [h for h in found_in_line[cid] if start <= h[0] < end][:MAX_HITS]

        for comp in self.compositions:
            if not all(found_in_line[c] for c in comp.concepts):
                continue
            # the tightest hit per polarity: a "yes" in one span of the line wins over a "no" in another
            # ("I thought it never went above 90 C; it actually reached 98 C")
            best: dict[bool, tuple[int, int, list[tuple[int, int, dict[str, str]]]]] = {}
            test = negated_outcome if comp.observation and negated_outcome else negated
            for start, end in spans[comp.span]:
                if any(within(c, start, end) for c in comp.excluded):
                    continue
                found = _tightest(comp, [within(c, start, end) for c in comp.concepts])
                if found is None:
                    continue
                no = _is_negated(comp, line, found[0], found[2], cfg, test)
                if no not in best or found[1] - found[0] < best[no][1] - best[no][0]:
                    best[no] = found
            if not best:
                continue
            no = False not in best
            start, end, picked = best[no]
            fields: dict[str, str] = {}
            for _, _, groups in picked:
                fields.update(groups)
            yield Hit(comp, start, end, no, fields)


def _is_negated(comp: Composition, line: str, start: int, picked: list[tuple[int, int, dict[str, str]]],
                cfg: dict[str, Any], negated: Negated) -> bool:
    """A negation shortly before any hit; in a clause, also one between the hits ("loss never turns into NaN")."""
    if not comp.negatable:
        return False
    if any(negated(line, s, cfg) for s, _, _ in picked):
        return True
    if comp.span != "clause":
        return False  # a sentence may quote a machine message whose own "no" negates nothing
    last = max(s for s, _, _ in picked)
    wide = dict(cfg, negation_window_chars=cfg["negation_window_chars"] + last - start)
    return negated(line, last, wide)


def _tightest(comp: Composition, hits: list[list[tuple[int, int, dict[str, str]]]]
              ) -> tuple[int, int, list[tuple[int, int, dict[str, str]]]] | None:
    """The combination (one hit per concept, hits not overlapping) with the smallest extent within the window."""
    if any(not h for h in hits):
        return None
    best = None
    for combo in itertools.product(*hits):
        if comp.ordered and any(a[1] > b[0] for a, b in itertools.pairwise(combo)):
            continue
        ordered = sorted(combo)
        if any(a[1] > b[0] for a, b in itertools.pairwise(ordered)):
            continue  # one stretch of text is one concept, never two
        start, end = ordered[0][0], max(h[1] for h in combo)
        if end - start <= comp.window and (best is None or end - start < best[1] - best[0]):
            best = (start, end, list(combo))
    return best


def _term(text: str, lang: str) -> re.Pattern[str]:
    if lang == "en":
        text = rf"(?<![A-Za-z0-9_])(?:{text})(?![A-Za-z0-9_])"
    return re.compile(text, re.IGNORECASE)


def _union(raw: dict[str, list[str]]) -> re.Pattern[str] | None:
    """One pattern for every term of a concept (fields dropped, English boundaries written once)."""
    parts = []
    if raw["en"]:
        parts.append(_term("|".join(f"(?:{_GROUP.sub('(?:', t)})" for t in raw["en"]), "en").pattern)
    parts += [f"(?:{_GROUP.sub('(?:', t)})" for t in raw["zh"]]
    return re.compile("|".join(parts), re.IGNORECASE) if parts else None


def _load(path: Path) -> tuple[Lexicon | None, list[Problem]]:
    data, problems = load_file(path)
    file = display_path(path)
    if not isinstance(data, dict) or not {"concepts", "compositions", "sentence_breaks"} <= set(data):
        problems.append(Problem(file, 1, "the lexicon has 'sentence_breaks', 'concepts' and 'compositions'"))
        return None, problems
    concepts: dict[str, Concept] = {}
    for cid, entry in data["concepts"].items():
        terms = []
        raw: dict[str, list[str]] = {"en": [], "zh": []}
        for lang in ("en", "zh"):
            for index, text in enumerate((entry or {}).get(lang) or []):
                try:
                    terms.append(_term(str(text), lang))
                    raw[lang].append(str(text))
                except re.error as exc:
                    problems.append(Problem(file, line_of(data, ["concepts", cid, lang, index]),
                                            f"concept {cid}: term {text!r} does not compile: {exc}"))
        if not terms:
            problems.append(Problem(file, line_of(data, ["concepts", cid]), f"concept {cid} has no en or zh terms"))
        concepts[cid] = Concept(cid, tuple(terms), _union(raw))
    compositions: list[Composition] = []
    seen: set[str] = set()
    for index, entry in enumerate(data["compositions"]):
        where = f"{file}:{line_of(data, ['compositions', index])}"
        issues = _check_composition(entry, concepts, seen)
        problems.extend(Problem(file, line_of(data, ["compositions", index]), message) for message in issues)
        if issues:
            continue
        seen.add(entry["id"])
        examples = entry["examples"]
        compositions.append(Composition(
            id=entry["id"], title=entry["title"], symptom=entry.get("symptom"),
            observation=entry.get("observation"), concepts=tuple(entry["all"]),
            excluded=tuple(entry.get("none") or ()),
            window=int(entry["window"]), ordered=entry.get("order", "any") == "listed",
            span=entry.get("span", "clause"), reliability=float(entry["reliability"]),
            present=bool(entry.get("present", True)), negatable=bool(entry.get("negatable", True)), match=tuple(examples["match"]), no_match=tuple(examples["no_match"]), where=where))
    try:
        breaks = re.compile(data["sentence_breaks"])
    except re.error as exc:
        problems.append(Problem(file, line_of(data, ["sentence_breaks"]), f"sentence_breaks does not compile: {exc}"))
        return None, problems
    limits = data.get("limits") or {}
    return Lexicon(concepts, tuple(compositions), breaks, int(limits.get("max_chars", 50_000)),
                   int(limits.get("max_line_chars", 4_000))), problems


def _check_composition(entry: Any, concepts: dict[str, Concept], seen: set[str]) -> list[str]:
    if not isinstance(entry, dict):
        return ["a composition is a mapping starting with 'id:'"]
    issues = [f"unknown key {k!r}" for k in sorted(set(entry) - _COMPOSITION_KEYS)]
    issues += [f"'{k}' is missing" for k in ("id", "title", "all", "window", "reliability", "examples")
               if k not in entry]
    if ("symptom" in entry) == ("observation" in entry):
        issues.append("a composition names one 'symptom' (s.ID) or one 'observation' (x.EXPERIMENT=OUTCOME)")
    if issues:
        return issues
    if not re.match(RULE_ID, str(entry["id"])) or entry["id"] in seen:
        issues.append(f"id {entry['id']!r} must look like 'lexicon.loss_nan' and be unique")
    if "symptom" in entry and not re.match(SYMPTOM_ID, str(entry["symptom"])):
        issues.append(f"symptom {entry['symptom']!r} must look like 's.loss_nan'")
    if "observation" in entry and not re.match(OBSERVATION_KEY, str(entry["observation"])):
        issues.append(f"observation {entry['observation']!r} must look like 'x.nccl_p2p_disable=issue_gone'")
    if "observation" in entry and entry.get("present", True) is False:
        issues.append("'present: false' is for symptoms; an outcome that did not happen is a negated one")
    issues += [f"unknown concept {c!r}" for c in [*entry["all"], *(entry.get("none") or [])] if c not in concepts]
    if entry.get("order", "any") not in ("any", "listed") or entry.get("span", "clause") not in ("clause", "sentence"):
        issues.append("order is 'any' or 'listed'; span is 'clause' or 'sentence'")
    if not 0 < float(entry["reliability"]) < 1:
        issues.append("reliability is soft evidence: between 0 and 1")
    examples = entry["examples"] if isinstance(entry["examples"], dict) else {}
    if not examples.get("match") or not examples.get("no_match"):
        issues.append("examples need at least one 'match' and one 'no_match' paraphrase")
    return issues


@functools.lru_cache(maxsize=4)
def load_lexicon(path: Path = LEXICON_FILE) -> Lexicon:
    """The lexicon (once per process); raise :class:`KnowledgeError` listing every problem."""
    lexicon, problems = _load(path)
    if problems or lexicon is None:
        raise KnowledgeError(problems)
    return lexicon


Outcome = Callable[[Composition, bool, str, int], None]


def compose_description(text: str, cfg: dict[str, Any], negated: Negated, collector: Any, source: str,
                        said_no: set[str], seen: set[str], negated_outcome: Negated | None = None,
                        on_outcome: Outcome | None = None) -> None:
    """Observe every composed symptom of ``text`` (negated ones go to ``said_no``), line by line; an
    experiment's outcome goes to ``on_outcome(composition, happened, line, lineno)``."""
    lexicon = load_lexicon()
    for lineno, line in enumerate(text[:lexicon.max_chars].splitlines(), 1):
        if len(line) > lexicon.max_line_chars:
            continue  # a pasted blob, not a sentence
        for hit in lexicon.compose(line, cfg, negated, negated_outcome):
            if hit.composition.observation:
                if on_outcome is not None:
                    on_outcome(hit.composition, not hit.negated, line, lineno)
                continue
            sid = hit.composition.symptom
            if not hit.composition.present:
                if not hit.negated:
                    said_no.add(sid)  # a cue for the opposite: a soft "no", overruled by any "yes"
                continue
            if hit.negated:
                said_no.add(sid)
                continue
            seen.add(sid)
            collector.observe(sid, source=source, text=line.strip(), rule=hit.composition.id,
                              reliability=hit.composition.reliability, fields=dict(hit.fields), lineno=lineno)
