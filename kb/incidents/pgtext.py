"""The searchable text of an incident as PostgreSQL stores it: tsvector literals and identifiers.

The terms come from the same analyzer as the Whoosh index (:func:`kb.incidents.analyzer.terms`:
jieba-segmented Chinese, stemmed English, identifiers split into their parts), with the same
positions, so a phrase matches in PostgreSQL exactly when it matches in Whoosh. They are written as
a tsvector literal (the ``simple`` way: no dictionary of PostgreSQL's touches them); each position
carries the weight of its part of the record: A title, B phenomenon and root cause, D the rest.
"""

from __future__ import annotations

import re
from typing import Any

from dsdoctor.kb.incidents.analyzer import SECTION_GAP, _split_sections, terms
from dsdoctor.kb.incidents.indexer import document

#: Whoosh weight of a part of the record -> tsvector weight label (D is the unlabelled default)
LABELS = {3.0: "A", 2.0: "B", 1.0: ""}
#: ts_rank weights of the labels {D, C, B, A}: the same proportions as the Whoosh field weights
RANK_WEIGHTS = "{0.3333, 0.3333, 0.6667, 1.0}"
#: PostgreSQL keeps at most 256 positions of a lexeme and positions up to 16383
MAX_POSITIONS = 256
MAX_POSITION = 16383
#: an identifier: words joined by _ . or - (NCCL_SOCKET_IFNAME, torch.distributed, cudaErrorLaunchFailure-like
#: enums with a separator); what pg_trgm searches by substring
IDENTIFIER_RE = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[_.-][A-Za-z0-9]+)+")


def quote(lexeme: str) -> str:
    """A lexeme as a quoted tsvector/tsquery literal."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def tsvector(value: str) -> str:
    """The tsvector literal of an index value (plain text, or sections from :func:`analyzer.sections`)."""
    positions: dict[str, list[str]] = {}
    base = 0
    for boost, text, _offset in _split_sections(value):
        label = LABELS.get(boost, "")
        last = -1
        for term, pos, _start, _end in terms(text):
            held = positions.setdefault(term, [])
            if len(held) < MAX_POSITIONS:
                held.append(f"{min(base + pos + 1, MAX_POSITION)}{label}")
            last = pos
        base += last + 1 + SECTION_GAP
    return " ".join(f"{quote(term)}:{','.join(dict.fromkeys(held))}" for term, held in sorted(positions.items()))


def identifiers(value: str) -> str:
    """The identifiers of ``value``, lower-cased, unique, space-separated (for trigram search)."""
    return " ".join(dict.fromkeys(m.group().lower() for m in IDENTIFIER_RE.finditer(value)))


def search_columns(record: dict[str, Any]) -> dict[str, str]:
    """``text_tsv``, ``title_tsv`` and ``identifiers`` of a record (what the Whoosh document holds)."""
    doc = document(record)
    return {"text_tsv": tsvector(doc["text"]), "title_tsv": tsvector(doc["title"]),
            "identifiers": identifiers(doc["text"])}
