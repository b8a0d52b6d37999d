"""Highlights: the passages of a record that match a query, as HTML with ``<mark>``.

The index stores no text, so the page's records are read from SQLite and analysed again with
the index's analyzer; the text is HTML-escaped and each match wrapped in ``<mark>``. An
English-only query never segments Chinese (jieba stays unloaded).
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

from whoosh import highlight

from dsdoctor.kb.incidents.analyzer import BilingualAnalyzer, has_chinese, terms

HIGHLIGHT_FIELDS = ("title", "phenomenon", "scope", "root_cause_detail", "fix", "regression", "prevention",
                    "evidence_summary")
#: characters of a long field analysed for highlights, around the first match
HIGHLIGHT_WINDOW = 600


class MarkFormatter(highlight.Formatter):
    """``<mark>term</mark>`` in HTML-escaped text; ``…`` where a fragment cuts the text."""

    between = " "

    def _text(self, text: str) -> str:
        return html.escape(text, quote=False)

    def format_token(self, text: str, token: Any, replace: bool = False) -> str:
        return "<mark>" + html.escape(highlight.get_text(text, token, replace), quote=False) + "</mark>"

    def format_fragment(self, fragment: Any, replace: bool = False) -> str:
        text = fragment.text
        if not any(ch.isalnum() for ch in text[: fragment.startchar]):
            fragment.startchar = 0  # only punctuation before: show it rather than "…"
        if not any(ch.isalnum() for ch in text[fragment.endchar :]):
            fragment.endchar = len(text)
        body = super().format_fragment(fragment, replace)
        head = "…" if fragment.startchar > 0 else ""
        tail = "…" if fragment.endchar < len(fragment.text) else ""
        return head + body.strip() + tail


class _LatinOnly(BilingualAnalyzer):
    """The analyzer without Chinese segmentation: highlighting an English-only query never loads jieba."""

    def __call__(self, value: str, **kwargs: Any):  # type: ignore[override]
        masked = "".join(" " if has_chinese(ch) else ch for ch in value) if has_chinese(value) else value
        return super().__call__(masked, **kwargs)


_FORMATTER = MarkFormatter()
_ANALYZER = BilingualAnalyzer()
_LATIN = _LatinOnly()


def _probe(term: str) -> str:
    """A piece of text every word analysed to ``term`` contains (stems can change the ending)."""
    if has_chinese(term) or len(term) <= 2:
        return term
    return term[:4] if len(term) > 4 else term[:-1]


def highlights(record: dict[str, Any], wanted: frozenset[str]) -> dict[str, str]:
    """HTML fragments of the record's text fields that contain query terms."""
    if not wanted:
        return {}
    analyzer = _ANALYZER if any(has_chinese(t) for t in wanted) else _LATIN
    probes = {_probe(t) for t in wanted}
    out: dict[str, str] = {}
    for field in HIGHLIGHT_FIELDS:
        text = record.get(field) or ""
        lowered = text.lower()
        hits = [i for i in (lowered.find(p) for p in probes) if i >= 0]
        if not hits:  # cheap test before analysing the text
            continue
        head = tail = ""
        if field != "title" and len(text) > HIGHLIGHT_WINDOW:  # analyse only around the first hit
            start = max(0, min(hits) - HIGHLIGHT_WINDOW // 4)
            end = start + HIGHLIGHT_WINDOW
            head, tail = ("…" if start else ""), ("…" if end < len(text) else "")
            text = text[start:end]
        fragmenter = highlight.WholeFragmenter() if field == "title" else highlight.ContextFragmenter(200, 60)
        marked = highlight.highlight(text, wanted, analyzer, fragmenter, _FORMATTER, top=2, mode="index")
        if "<mark>" in marked:
            marked = marked.replace("</mark><mark>", "")  # 显存 + 碎片 -> one mark
            out[field] = (head if not marked.startswith("…") else "") + marked + \
                (tail if not marked.endswith("…") else "")
    return out


def prefix_terms(records: Iterable[dict[str, Any]], prefixes: Iterable[str]) -> frozenset[str]:
    """The terms of these records' text that start with one of ``prefixes`` (what a ``prefix*`` query
    matched in them; the Whoosh backend reads these from its index, PostgreSQL has no term list)."""
    wanted = tuple(p for p in prefixes if p)
    if not wanted:
        return frozenset()
    found = set()
    for record in records:
        for field in HIGHLIGHT_FIELDS:
            text = record.get(field) or ""
            if any(p in text.lower() for p in wanted) or has_chinese(text):
                found.update(t for t, _pos, _s, _e in terms(text) if t.startswith(wanted))
    return frozenset(found)
