"""The last layer for words no rule understands: retrieval over the knowledge base's own texts.

Every cause gets one bilingual document: its title and description (weighted up), its fixes,
the titles and descriptions of its mechanisms and of the symptoms it reaches with some strength,
and for those symptoms the titles of the rules that assert them. A description is scored against
every document with BM25 (the analyzer of incident search: Porter-stemmed English, jieba-segmented Chinese, the
same terms for both), and the scores become a soft likelihood: a cause whose document shares
the report's rarer words gains up to ``text_weight`` in log-odds against the best-scoring one.
Phrase and log rules stay the main evidence; this only orders what they leave open, so a report
that no rule reads never falls back to the bare prior order.

The read-only public incidents (kb/data/incidents/public.jsonl: real failures with their confirmed
root cause and thread) vote for their root cause: the words of each (title and phenomenon, the way
a reporter put it, and what the thread found) join that cause's document, each term counting ``incident_weight`` times, so
a cause is also found by how real reports describe it. A benchmark must not let a case find itself:
:func:`excluding` hides incidents by id or by thread (same issue thread, however its URL is
spelled), and the hidden ones leave the term statistics too.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from dsdoctor.kb.lru import memo
from dsdoctor.kb.model import KnowledgeBase, Text

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
#: the public incidents that vote for their root cause (exported from bench/corpus)
INCIDENTS_PATH = Path(__file__).resolve().parent / "data" / "incidents" / "public.jsonl"
#: indexes kept per knowledge base, one per set of hidden incidents (a benchmark hides one case at a time)
INDEX_MEMO_SIZE = 256
#: incident ids and thread keys a benchmark hides from the incident documents (see :func:`excluding`)
_EXCLUDED: ContextVar[frozenset[str]] = ContextVar("retrieval_excluded", default=frozenset())
_GITHUB_THREAD = re.compile(r"github\.com/([^/\s]+)/([^/\s#?]+)/(?:issues|pull|discussions)/(\d+)", re.I)
_SHORT_THREAD = re.compile(r"^([\w.-]+/[\w.-]+)#(\d+)$")
_SCHEME = re.compile(r"^https?://(?:www\.)?", re.I)


@dataclass
class _Index:
    docs: dict[str, Counter]  # cause -> term frequencies (weighted)
    lengths: dict[str, float]
    average: float
    idf: dict[str, float]


def thread_key(reference: str) -> str:
    """One spelling of an issue thread: ``owner/repo#N`` (lower case) for a GitHub URL or a
    ``owner/repo#N`` reference, else the reference without scheme, fragment and trailing slash."""
    reference = reference.strip()
    found = _GITHUB_THREAD.search(reference)
    if found:
        return f"{found[1]}/{found[2]}#{found[3]}".lower()
    found = _SHORT_THREAD.match(reference)
    if found:
        return f"{found[1]}#{found[2]}".lower()
    # a public page (a blog post, a forum thread): its address without scheme, however it is spelled
    return _SCHEME.sub("", reference.split("#", 1)[0]).rstrip("/").lower()


@contextmanager
def excluding(keys: Iterable[str]) -> Iterator[None]:
    """Within this block, incident documents whose id (with or without ``PUB-``) or thread is in
    ``keys`` do not exist: neither as voters nor in the term statistics."""
    wanted = frozenset(thread_key(k) if ("/" in k) else k for k in keys if k)
    token = _EXCLUDED.set(_EXCLUDED.get() | wanted)
    try:
        yield
    finally:
        _EXCLUDED.reset(token)


def _terms(text: str) -> list[str]:
    from dsdoctor.kb.incidents.analyzer import terms

    return [t for t, *_ in terms(text)] if text else []


#: a clause that names another cause by its id, or sets this one against something ("unlike ...",
#: "与 X 不同"), is about that other thing: its words would lift the cause it rules out
_CONTRAST = re.compile(r"^\W*(?:unlike|not to be confused|as opposed to)\b|与[^，。；]{0,40}不同|区别于|不同于", re.I)
_CLAUSE_END = re.compile(r"(?<=[.;])\s+|(?<=[。；])")


def _own_words(text: str, cause_ids: tuple[str, ...]) -> str:
    """``text`` without its contrastive clauses (see ``_CONTRAST``) and clauses naming one of ``cause_ids``."""
    kept = [c for c in _CLAUSE_END.split(text) if not (_CONTRAST.search(c) or any(cid in c for cid in cause_ids))]
    return " ".join(kept)


def _both(text: Text | None, cause_ids: tuple[str, ...] = ()) -> str:
    return f"{_own_words(text.en, cause_ids)}\n{_own_words(text.zh, cause_ids)}" if text else ""


def _document(kb: KnowledgeBase, cause_id: str, rule_texts: dict[str, str]) -> Counter:
    cause = kb.causes[cause_id]
    ids = tuple(kb.causes)
    doc: Counter = Counter()
    for _ in range(TITLE_WEIGHT):
        doc.update(_terms(_both(cause.title, ids)))
    for _ in range(DESCRIPTION_WEIGHT):
        doc.update(_terms(_both(cause.description, ids)))
    for fix in cause.fixes:
        doc.update(_terms(_both(fix.title, ids)))
    for mid in cause.mechanisms:
        mechanism = kb.mechanisms.get(mid)
        if mechanism is not None:
            doc.update(_terms(_both(mechanism.title, ids) + "\n" + _both(mechanism.description, ids)))
    reached = kb.likelihoods.get(cause_id, {})
    for sid, p in reached.items():
        symptom = kb.symptoms.get(sid)
        if symptom is None or p < MIN_SYMPTOM_LIKELIHOOD or symptom.kind == "derived":
            continue
        doc.update(_terms(_both(symptom.title, ids) + "\n" + _both(symptom.description, ids)))
        doc.update(_terms(rule_texts.get(sid, "")))
    return doc


def _rule_texts() -> dict[str, str]:
    """Per symptom, how people and programs name it: the titles of the rules that assert it (both
    languages). Rule examples are left out: they are test sentences, not knowledge."""
    from dsdoctor.rules.loader import default_rules

    out: dict[str, list[str]] = {}
    for rule in default_rules().rules:
        if rule.symptom:
            out.setdefault(rule.symptom, []).append(rule.title)
    return {sid: "\n".join(parts) for sid, parts in out.items()}


def _own_documents(kb: KnowledgeBase) -> dict[str, Counter]:
    found = kb.cache.get("retrieval_documents")
    if found is None:
        texts = _rule_texts()
        found = kb.cache["retrieval_documents"] = {cid: _document(kb, cid, texts) for cid, c in kb.causes.items()
                                                   if getattr(c, "status", "active") == "active"}
    return found


def _index(kb: KnowledgeBase, incident_weight: float = 0.0) -> _Index:
    """The BM25 index of the causes' documents, with the visible incidents' words added at ``incident_weight``."""
    excluded = _EXCLUDED.get()
    weight = incident_weight if incident_weight > 0.0 else 0.0
    key = (weight, excluded if weight else frozenset())

    def build() -> _Index:
        docs = {cid: Counter(doc) for cid, doc in _own_documents(kb).items()}
        if weight:
            for incident in _incidents(kb):
                if incident.cause in docs and not (incident.keys & excluded):
                    for term, n in incident.terms.items():
                        docs[incident.cause][term] += weight * n
        lengths = {cid: float(sum(d.values())) for cid, d in docs.items()}
        average = sum(lengths.values()) / max(1, len(lengths))
        df: Counter = Counter()
        for d in docs.values():
            df.update(d.keys())
        n = len(docs)
        idf = {t: math.log(1.0 + (n - k + 0.5) / (k + 0.5)) for t, k in df.items()}
        return _Index(docs, lengths, average, idf)

    return memo(kb.cache, "retrieval_index", INDEX_MEMO_SIZE).get_or_compute(key, build)


@dataclass
class _Incident:
    keys: frozenset[str]  # id, id without the public prefix, thread
    cause: str
    terms: Counter


def _incidents(kb: KnowledgeBase) -> list[_Incident]:
    found = kb.cache.get("retrieval_incidents")
    if found is None:
        found = []
        lines = INCIDENTS_PATH.read_text(encoding="utf-8").splitlines() if INCIDENTS_PATH.exists() else []
        for line in lines:
            if not line.strip():
                continue
            raw = json.loads(line)
            cause = raw.get("root_cause", "")
            if cause not in kb.causes:
                continue  # a cause the knowledge base no longer has votes for nothing
            ident = str(raw.get("id", ""))
            keys = {ident, ident.removeprefix("PUB-")}
            for ref in (raw.get("source_url") or "", str(raw.get("author", "")).removeprefix("public thread ")):
                if ref:
                    keys.add(thread_key(ref))
            text = "\n".join(str(raw.get(k) or "") for k in ("title", "phenomenon", "root_cause_detail"))
            terms = Counter(_terms(text))
            found.append(_Incident(frozenset(keys - {""}), cause, terms))
        kb.cache["retrieval_incidents"] = found
    return found


def _bm25(index: _Index, text: str) -> dict[str, float]:
    query = Counter(t for t in _terms(text) if t in index.idf)
    if len(query) < MIN_QUERY_TERMS:
        return {}
    out: dict[str, float] = {}
    for key, doc in index.docs.items():
        norm = K1 * (1.0 - B + B * index.lengths[key] / (index.average or 1.0))
        total = 0.0
        for term in query:  # each distinct query term once: a repeated word is not more evidence
            tf = doc.get(term, 0)
            if tf:
                total += index.idf[term] * tf * (K1 + 1.0) / (tf + norm)
        out[key] = total
    return out


def scores(kb: KnowledgeBase, text: str, incident_weight: float = 0.0) -> dict[str, float]:
    """BM25 score of every cause's document for ``text`` (empty when the text says too little); the
    documents hold the visible public incidents' words at ``incident_weight`` (0: none)."""
    return _bm25(_index(kb, incident_weight), text)


def log_factors(kb: KnowledgeBase, text: str, weight: float, incident_weight: float | None = None) -> dict[str, float]:
    """Per cause, the text's soft log-likelihood ratio: ``weight`` x (score / best score - 1).

    The best-matching cause gets 0 and the others less, down to ``-weight`` for a document that
    shares no word; the unexplained hypothesis is compared with the mean of these (see
    kb/inference.py). Nothing when the text matches no document. ``incident_weight`` (the public
    incidents' share of the documents) defaults to the engine's setting (kb/engine.yaml).
    """
    if incident_weight is None:
        from dsdoctor.kb.inference import engine_settings

        incident_weight = engine_settings().get("incident_weight", 0.0)
    raw = scores(kb, text, incident_weight)
    best = max(raw.values(), default=0.0)
    if best <= 0.0 or weight <= 0.0:
        return {}
    return {cid: weight * (s / best - 1.0) for cid, s in raw.items()}
