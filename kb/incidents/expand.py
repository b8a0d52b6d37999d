"""Cross-language query expansion: 显存不足 also searches "out of memory", and the reverse.

Concepts come from two sources, both data: the knowledge base's own bilingual titles (every
cause, mechanism and symptom has ``title: {en, zh}``) and the glossary
(``kb/data/glossary.yaml``: everyday words in both languages, optionally tied to root causes).
Each form found in the free-text part of a query (not inside "quotes", not a ``field:value``)
is replaced by ``(form OR other forms ...)``; a cause title or a glossary entry with ``causes``
adds ``root_cause:<id>`` to that group, so 显存碎片 also finds incidents recorded with the cause
memory.fragmentation. Longer forms win over the shorter ones inside them.

The concept table is built once per process from the shipped knowledge base.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
GLOSSARY_PATH = DATA_DIR / "glossary.yaml"
#: knowledge folders whose titles are concepts, and whether their ids are root causes
TITLE_SOURCES = (("causes", "causes", True), ("mechanisms", "mechanisms", False), ("symptoms", "symptoms", False))
#: titles shorter than this are too generic to stand for a concept on their own
MIN_FORM_CHARS = 2
_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_SPACE = re.compile(r"\s+")
#: characters with a meaning in the query syntax, dropped from a title before it becomes a group
_SYNTAX = re.compile(r"[\"'()\[\]{}:^~*?+\-!/\\<>=|&，。：；、（）]+")
_OPERATORS = frozenset({"and", "or", "not", "andnot", "andmaybe"})
#: libyaml when PyYAML has it: the first search builds the table in ~75 ms instead of ~400 ms
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Concept:
    """One idea in several words: ``forms`` (any language) and the root causes it names."""

    forms: tuple[str, ...]
    causes: tuple[str, ...] = ()


def _norm(text: str) -> str:
    return _SPACE.sub(" ", text).strip().casefold()


def _title_concepts(data_dir: Path) -> list[Concept]:
    out = []
    for folder, key, is_cause in TITLE_SOURCES:
        for path in sorted((data_dir / folder).glob("*.yaml")):
            doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER) or {}
            for item in doc.get(key) or []:
                title = item.get("title") if isinstance(item, dict) else None
                if not isinstance(title, dict):
                    continue
                forms = tuple(t.strip() for t in (title.get("en"), title.get("zh")) if isinstance(t, str) and t.strip())
                if len(forms) == 2:
                    out.append(Concept(forms, (item["id"],) if is_cause and item.get("id") else ()))
    return out


def _glossary_concepts(path: Path) -> list[Concept]:
    doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER) or {}
    out = []
    for entry in doc.get("terms") or []:
        forms = tuple(str(f).strip() for lang in ("en", "zh") for f in entry.get(lang) or [] if str(f).strip())
        out.append(Concept(forms, tuple(entry.get("causes") or ())))
    return out


@dataclass(frozen=True)
class Expander:
    """Rewrites a query so that each known form also looks for its other forms."""

    concepts: tuple[Concept, ...]

    @functools.cached_property
    def _by_form(self) -> dict[str, list[Concept]]:
        table: dict[str, list[Concept]] = {}
        for concept in self.concepts:
            for form in concept.forms:
                if len(form) >= MIN_FORM_CHARS:
                    table.setdefault(_norm(form), []).append(concept)
        return table

    @functools.cached_property
    def _pattern(self) -> re.Pattern[str]:
        alternatives = []
        for form in sorted(self._by_form, key=len, reverse=True):  # the longest form first
            body = r"\s+".join(re.escape(word) for word in form.split(" "))
            # a Latin form must be a whole word, not part of an identifier (hang.py, hang-up); a
            # Chinese one may sit inside a longer run. A form with query syntax attached
            # (oom*, hang^2, OOM~) is left as typed: on a group, * would match everything.
            left = "" if _HAN.match(form[0]) else r"(?<![\w.\-/])"
            right = r"(?![*?~^])" if _HAN.match(form[-1]) else r"(?![\w*?~^])(?![\-./]\w)"
            alternatives.append(left + body + right)
        return re.compile("|".join(alternatives) or r"(?!)", re.IGNORECASE)

    def alternatives(self, form: str) -> tuple[list[str], list[str]]:
        """The other forms and the root causes a form stands for (empty when unknown)."""
        key = _norm(form)
        forms: dict[str, None] = {}
        causes: dict[str, None] = {}
        for concept in self._by_form.get(key, []):
            for other in concept.forms:
                if _norm(other) != key:
                    forms[other] = None
            causes.update(dict.fromkeys(concept.causes))
        return list(forms), list(causes)

    def expand(self, q: str) -> str:
        """``q`` with each known form in its free text replaced by an OR group (or ``q`` itself)."""
        protected = _protected_spans(q)
        pieces, last = [], 0
        for match in self._pattern.finditer(q):
            start, end = match.span()
            if any(a < end and start < b for a, b in protected):
                continue
            others, causes = self.alternatives(match.group())
            if not others and not causes:
                continue
            typed = match.group()
            group = [f"({typed})" if " " in typed else typed, *(_as_clause(o) for o in others), *(f"root_cause:{c}" for c in causes)]
            pieces += [q[last:start], "(" + " OR ".join(dict.fromkeys(group)) + ")"]
            last = end
        if not pieces:
            return q
        return "".join([*pieces, q[last:]])


def _protected_spans(q: str) -> list[tuple[int, int]]:
    """Quoted phrases, ``field:value`` tokens and operator words: the parts left as typed."""
    spans = [m.span() for m in re.finditer(r'"[^"]*"?', q)]
    spans += [m.span() for m in re.finditer(r"\S+:\S*", q)]
    spans += [m.span() for m in re.finditer(r"\b[A-Z]+\b", q) if m.group().lower() in _OPERATORS]
    return spans


def _as_clause(form: str) -> str:
    """One alternative in query syntax: a Latin phrase quoted, Chinese words as they are."""
    text = _SPACE.sub(" ", _SYNTAX.sub(" ", form)).strip()
    if not text:
        return form
    words = text.split(" ")
    if any(w.lower() in _OPERATORS for w in words):
        words = [w for w in words if w.lower() not in _OPERATORS]
    if len(words) > 1 and not _HAN.search(text):
        return '"' + " ".join(words) + '"'
    return "(" + " ".join(words) + ")" if len(words) > 1 else words[0]


@functools.cache
def default_expander() -> Expander:
    """The expander of the shipped knowledge base and glossary (built once per process)."""
    return Expander(tuple(_glossary_concepts(GLOSSARY_PATH) + _title_concepts(DATA_DIR)))


def expand(q: str) -> str:
    """``q`` expanded through the shipped bilingual titles and glossary."""
    return default_expander().expand(q)
