"""The last layer for words no rule understands: retrieval over the knowledge base's own texts.

Every cause gets one bilingual document: its title and description (weighted up), its fixes,
the titles and descriptions of its mechanisms and of the symptoms it reaches with some strength,
and for those symptoms the titles of the rules that assert them. A description is scored against
every document with BM25 (the analyzer of incident search: Porter-stemmed English, jieba-segmented Chinese, the
same terms for both), and the scores become a soft likelihood: a cause whose document shares
the report's rarer words gains up to ``text_weight`` in log-odds against the best-scoring one.
Phrase and log rules stay the main evidence; this only orders what they leave open, so a report
that no rule reads never falls back to the bare prior order.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from kb.model import KnowledgeBase, Text

#: BM25 parameters (the usual ones: term saturation, length normalisation)
K1 = 1.2
B = 0.75
#: weights of a document's parts (the terms of the title count this many times)
TITLE_WEIGHT = 3
DESCRIPTION_WEIGHT = 2
#: a symptom is part of a cause's document when the cause reaches it with at least this P(s|c)
MIN_SYMPTOM_LIKELIHOOD = 0.2
#: a query needs this many distinct known terms before its scores count at all
MIN_QUERY_TERMS = 2


@dataclass
class _Index:
    docs: dict[str, Counter]  # cause -> term frequencies (weighted)
    lengths: dict[str, float]
    average: float
    idf: dict[str, float]


def _terms(text: str) -> list[str]:
    from kb.incidents.analyzer import terms

    return [t for t, *_ in terms(text)] if text else []


def _both(text: Text | None) -> str:
    return f"{text.en}\n{text.zh}" if text else ""


def _document(kb: KnowledgeBase, cause_id: str, rule_texts: dict[str, str]) -> Counter:
    cause = kb.causes[cause_id]
    doc: Counter = Counter()
    for _ in range(TITLE_WEIGHT):
        doc.update(_terms(_both(cause.title)))
    for _ in range(DESCRIPTION_WEIGHT):
        doc.update(_terms(_both(cause.description)))
    for fix in cause.fixes:
        doc.update(_terms(_both(fix.title)))
    for mid in cause.mechanisms:
        mechanism = kb.mechanisms.get(mid)
        if mechanism is not None:
            doc.update(_terms(_both(mechanism.title) + "\n" + _both(mechanism.description)))
    reached = kb.likelihoods.get(cause_id, {})
    for sid, p in reached.items():
        symptom = kb.symptoms.get(sid)
        if symptom is None or p < MIN_SYMPTOM_LIKELIHOOD or symptom.kind == "derived":
            continue
        doc.update(_terms(_both(symptom.title) + "\n" + _both(symptom.description)))
        doc.update(_terms(rule_texts.get(sid, "")))
    return doc


def _rule_texts() -> dict[str, str]:
    """Per symptom, how people and programs name it: the titles of the rules that assert it (both
    languages). Rule examples are left out: they are test sentences, not knowledge."""
    from rules.loader import default_rules

    out: dict[str, list[str]] = {}
    for rule in default_rules().rules:
        if rule.symptom:
            out.setdefault(rule.symptom, []).append(rule.title)
    return {sid: "\n".join(parts) for sid, parts in out.items()}


def _index(kb: KnowledgeBase) -> _Index:
    found = kb.cache.get("retrieval_index")
    if found is None:
        texts = _rule_texts()
        docs = {cid: _document(kb, cid, texts) for cid, c in kb.causes.items()
                if getattr(c, "status", "active") == "active"}
        lengths = {cid: float(sum(d.values())) for cid, d in docs.items()}
        average = sum(lengths.values()) / max(1, len(lengths))
        df: Counter = Counter()
        for d in docs.values():
            df.update(d.keys())
        n = len(docs)
        idf = {t: math.log(1.0 + (n - k + 0.5) / (k + 0.5)) for t, k in df.items()}
        found = kb.cache["retrieval_index"] = _Index(docs, lengths, average, idf)
    return found


def scores(kb: KnowledgeBase, text: str) -> dict[str, float]:
    """BM25 score of every cause's document for ``text`` (empty when the text says too little)."""
    index = _index(kb)
    query = Counter(t for t in _terms(text) if t in index.idf)
    if len(query) < MIN_QUERY_TERMS:
        return {}
    out: dict[str, float] = {}
    for cid, doc in index.docs.items():
        norm = K1 * (1.0 - B + B * index.lengths[cid] / (index.average or 1.0))
        total = 0.0
        for term in query:  # each distinct query term once: a repeated word is not more evidence
            tf = doc.get(term, 0)
            if tf:
                total += index.idf[term] * tf * (K1 + 1.0) / (tf + norm)
        out[cid] = total
    return out


def log_factors(kb: KnowledgeBase, text: str, weight: float) -> dict[str, float]:
    """Per cause, the text's soft log-likelihood ratio: ``weight`` x (score / best score - 1).

    The best-matching cause gets 0 and the others less, down to ``-weight`` for a document that
    shares no word; the unexplained hypothesis is compared with the mean of these (see
    kb/inference.py). Nothing when the text matches no document.
    """
    raw = scores(kb, text)
    best = max(raw.values(), default=0.0)
    if best <= 0.0 or weight <= 0.0:
        return {}
    return {cid: weight * (s / best - 1.0) for cid, s in raw.items()}
