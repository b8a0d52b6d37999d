"""Similar incidents: shared observed symptoms (Jaccard) and shared distinctive words."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

import sqlite_utils

from dsdoctor.kb.incidents.analyzer import terms
from dsdoctor.kb.incidents.indexer import Indexer


def key_terms(searcher: Any, text: str, count: int = 15) -> list[tuple[str, float]]:
    """The most distinctive terms of ``text`` for this index: (term, idf), best first."""
    tf = Counter(t for t, _pos, _s, _e in terms(text) if len(t) > 1 and not t.isdigit())
    n = max(1, searcher.doc_count())
    scored = []
    for term, freq in tf.items():
        df = searcher.doc_frequency("text", term)
        if df == 0:
            continue
        idf = math.log((n + 1) / (df + 0.5))
        if idf <= 0:
            continue
        scored.append((min(freq, 3) * idf, term, idf))
    scored.sort(key=lambda s: (-s[0], s[1]))
    return [(term, idf) for _score, term, idf in scored[:count]]


def text_matches(indexer: Indexer, text: str, exclude: str | None, limit: int = 50) -> dict[str, float]:
    """Incidents sharing distinctive terms with ``text``: id -> share of the key terms' idf matched.

    The share is the score, so no ranking model is needed: the key terms' postings are read directly
    (a Whoosh OR query scored every posting with BM25 only for the result to be re-scored here; on a
    store of 400 incidents that was most of a small diagnosis' time)."""
    searcher = indexer.searcher()
    keys = key_terms(searcher, text)
    if not keys:
        return {}
    total = sum(idf for _term, idf in keys)
    shares: dict[int, float] = {}
    for term, idf in keys:
        for docnum in searcher.postings("text", term).all_ids():
            shares[docnum] = shares.get(docnum, 0.0) + idf
    best = sorted(shares.items(), key=lambda d: (-d[1], d[0]))[: limit + 1]
    out: dict[str, float] = {}
    for docnum, share in best:
        incident_id = searcher.stored_fields(docnum)["id"]
        if incident_id != exclude:
            out[incident_id] = share / total
    return out


def symptom_matches(db: sqlite_utils.Database, symptoms: Iterable[str], exclude: str | None) -> dict[str, float]:
    """Incidents sharing observed symptoms: id -> Jaccard index of the two symptom sets."""
    wanted = sorted(set(symptoms))
    if not wanted:
        return {}
    marks = ",".join("?" * len(wanted))
    rows = db.execute(
        f"""SELECT s.incident_id, COUNT(*) AS shared,
                   (SELECT COUNT(*) FROM incident_symptoms a WHERE a.incident_id = s.incident_id) AS own
            FROM incident_symptoms s WHERE s.symptom_id IN ({marks}) GROUP BY s.incident_id""", wanted).fetchall()
    return {rid: shared / (len(wanted) + own - shared) for rid, shared, own in rows if rid != exclude}


#: a diagnosis shows a past incident only from this similarity on: the seed incidents of the right
#: cause score 0.32-0.62 against the seed cases, unrelated ones 0.08-0.29 (a docker0 incident
#: beside a CUDA OOM is noise, not a lead)
DIAGNOSIS_FLOOR = 0.3
#: context symptoms every incident has some of (scope, phase): shared, they say nothing
_CONTEXT = ("s.scope_", "s.phase_")


def for_diagnosis(items: list[dict[str, Any]], observed: Iterable[str], mechanisms_of: dict[str, set[str]],
                  limit: int = 3, floor: float = DIAGNOSIS_FLOOR) -> list[dict[str, Any]]:
    """Past incidents worth showing beside a diagnosis: above ``floor`` and, when symptoms were observed,
    sharing at least one that is not scope or phase; ranked by shared symptoms and mechanisms, then score.

    Each item gets ``shared_symptoms`` and ``shared_mechanisms`` (why it is similar).
    """
    mine = {s for s in observed if not s.startswith(_CONTEXT)}
    my_mechanisms = set().union(*(mechanisms_of.get(s, set()) for s in mine)) if mine else set()
    kept = []
    for item in items:
        theirs = {s for s in item.get("symptoms", []) if not s.startswith(_CONTEXT)}
        shared = mine & theirs
        mechanisms = my_mechanisms & set().union(*(mechanisms_of.get(s, set()) for s in theirs)) if theirs else set()
        if item.get("score", 0.0) < floor or (mine and not shared):
            continue
        kept.append({**item, "shared_symptoms": sorted(shared), "shared_mechanisms": sorted(mechanisms)})
    kept.sort(key=lambda it: (-(len(it["shared_symptoms"]) + len(it["shared_mechanisms"])), -it["score"], it["id"]))
    return kept[:limit]
