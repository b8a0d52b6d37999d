"""BM25 over raw Whoosh postings for plain queries: several times faster than Whoosh's matchers.

A *plain* query is what people usually type: terms of text fields combined with AND, OR and
NOT. For those, every match is scored anyway (the total and the facets need them all), and
Whoosh's per-document matcher machinery costs several microseconds per match. Here each term's
posting list is read block by block into arrays, the boolean part is done with set operations
in C, and only the surviving documents are scored, with Whoosh's BM25F formula and defaults
(token weights carry the title/phenomenon/body boosts).

Very large match sets (:func:`score_top`): the total and the facets only need *which*
documents match, which the set algebra gives exactly; scoring is then limited to a pool of
likely leaders - for each query term, the documents with its highest token weights (title and
repeated mentions), shortest field first among equal weights - so ``rank`` in every incident
costs a few set operations instead of 100,000 Python-level BM25 evaluations. The order of that
pool is exact BM25; a document outside it that BM25 would have placed among the leaders is the
approximation (rare: it needs a low weight for every term and a very short field).

A phrase whose words are everywhere (:func:`phrase_top`) takes the same road: the AND of its
words gives the candidates, the pool of their leaders is checked with Whoosh's phrase matcher,
and the share that passed estimates how many candidates are phrase matches.

Anything else (phrases, prefixes, wildcards, ranges, keyword fields, boosts) returns ``None``
and the caller falls back to Whoosh's own search. Reading the postings uses internals of the
pinned Whoosh-Reloaded 2.7.5 codec; if they ever differ, :func:`score_all` returns ``None`` too.
"""

from __future__ import annotations

import logging
import threading
from array import array
from collections import Counter, OrderedDict
from collections.abc import Iterable
from itertools import compress, repeat
from typing import Any, NamedTuple

from whoosh import query

from dsdoctor.kb.lru import BoundedCache

K1, B = 1.2, 0.75  # whoosh.scoring.BM25F defaults
#: look a term up document by document when it is this many times more frequent than the candidates
LOOKUP_RATIO = 8
_LENGTHS: BoundedCache[list[int]] = BoundedCache(64)  # (segment id, field) -> field length per doc
_LOCK = threading.Lock()
#: decoded postings of frequent terms, per segment (segments never change): decoding Whoosh's
#: pickled posting blocks is most of the cost of a query with a very common word
HOT_MIN_DOCS = 2_000
HOT_MAX_POSTINGS = 4_000_000  # about 8 bytes each: 32 MB at most
_HOT: OrderedDict[tuple, tuple[array, array]] = OrderedDict()
_hot_size = 0


def _hot_key(reader: Any, field: str, text: str) -> tuple:
    segment = reader.segment() if hasattr(reader, "segment") else None
    return (segment.segment_id() if segment is not None else id(reader), reader.doc_count(), field, text)


def forget_hot() -> None:
    """Drop every decoded posting list (benchmarks of a cold start)."""
    global _hot_size
    with _LOCK:
        _HOT.clear()
        _hot_size = 0


def _keep_hot(key: tuple, ids: array, weights: array) -> None:
    """Remember one segment's decoded postings of a frequent term (least recently used go first)."""
    global _hot_size
    with _LOCK:
        if key in _HOT or len(ids) > HOT_MAX_POSTINGS:
            return
        _HOT[key] = (ids, weights)
        _hot_size += len(ids)
        while _hot_size > HOT_MAX_POSTINGS:
            _old, (old_ids, _w) = _HOT.popitem(last=False)
            _hot_size -= len(old_ids)
log = logging.getLogger("dsdoctor.incidents")


def _plain(node: query.Query, fields: frozenset[str], top: bool = True) -> bool:
    """True when ``node`` is terms of ``fields`` joined by And / Or (boost 1), with NOT only in the
    chain of ANDs at the top (where Whoosh scores every match of a NOT as 1)."""
    if isinstance(node, query.Term):
        return node.fieldname in fields and node.boost == 1.0 and isinstance(node.text, str)
    if type(node) not in (query.And, query.Or) or node.boost != 1.0:
        return False
    if isinstance(node, query.Or) and (getattr(node, "scale", None) or getattr(node, "minmatch", 0)):
        return False
    is_and = isinstance(node, query.And)
    positive = [c for c in node.subqueries if not isinstance(c, query.Not)]
    negative = [c.query for c in node.subqueries if isinstance(c, query.Not)]
    if not positive or (negative and not (is_and and top)):
        return False
    return all(_plain(c, fields, top and is_and) for c in positive) and \
        all(_plain(c, fields, False) for c in negative)


def _term_counts(node: query.Query) -> dict[tuple[str, str], int]:
    """How often each (field, text) occurs in the query."""
    if isinstance(node, query.Term):
        return {(node.fieldname, node.text): 1}
    if isinstance(node, query.Not):
        return _term_counts(node.query)
    counts: dict[tuple[str, str], int] = {}
    for child in node.subqueries:
        for key, n in _term_counts(child).items():
            counts[key] = counts.get(key, 0) + n
    return counts


def _not_bonus(node: query.Query) -> float:
    """What Whoosh adds to every match for the NOT clauses of the top chain of ANDs (1 each)."""
    if not isinstance(node, query.And):
        return 0.0
    return sum(1.0 if isinstance(c, query.Not) else _not_bonus(c) for c in node.subqueries)


class TopScores(NamedTuple):
    """Every match of a query, and the scores of all of them or of a pool of likely leaders."""

    matches: set[int]
    scores: dict[int, float]
    pooled: bool  #: True: ``scores`` covers only the pool, not every match
    checked: int = 0  #: documents of the pool checked (a phrase pool: more than ``scores`` holds)


def score_top(searcher: Any, q: query.Query, allowed: set[int] | None, pool_above: int | None,
              pool: int) -> TopScores | None:
    """Matches of a plain query with BM25 scores; above ``pool_above`` matches (None: never) only
    a pool of about ``pool`` leaders per term is scored. None when ``q`` is not plain."""
    fields = frozenset(name for name, field in searcher.schema.items() if field.scorable)
    if not _plain(q, fields):
        return None
    try:
        return _Scorer(searcher, allowed).top(q, pool_above, pool)
    except (AttributeError, TypeError, KeyError, ValueError) as exc:  # codec internals changed
        log.warning("fast scoring unavailable (%s: %s); using Whoosh's matcher", type(exc).__name__, exc)
        return None


def phrase_top(searcher: Any, q: query.Query, allowed: set[int] | None, pool_above: int,
               pool: int) -> TopScores | None:
    """A phrase whose words all occur in more than ``pool_above`` documents: those documents
    (``matches``: a superset of the phrase's), and Whoosh's own phrase test and score on a pool
    of their BM25 leaders only (``scores``). None for anything else (Whoosh then does it all)."""
    fields = frozenset(name for name, field in searcher.schema.items() if field.scorable)
    if not isinstance(q, query.Phrase) or q.fieldname not in fields or q.boost != 1.0 or len(q.words) < 2:
        return None
    words = query.And([query.Term(q.fieldname, w) for w in dict.fromkeys(q.words)])
    top = score_top(searcher, words, allowed, pool_above, pool)
    if top is None or not top.pooled:
        return None
    return TopScores(top.matches, verify(searcher, q, top.scores), True, len(top.scores))


def verify(searcher: Any, q: query.Query, docnums: Iterable[int]) -> dict[int, float]:
    """Docnum -> Whoosh's score of ``q`` for those of ``docnums`` that match it (the matcher
    skips straight from one of them to the next)."""
    ordered = sorted(docnums)
    context = searcher.context()
    out: dict[int, float] = {}
    for sub, offset in searcher.leaf_searchers():
        end = offset + sub.doc_count_all()
        local = [d - offset for d in ordered if offset <= d < end]
        if not local:
            continue
        matcher = q.matcher(sub, context)
        for d in local:
            if not matcher.is_active():
                break
            if matcher.id() < d:
                matcher.skip_to(d)
            if matcher.is_active() and matcher.id() == d:
                out[d + offset] = matcher.score()
    return out


def score_all(searcher: Any, q: query.Query, allowed: set[int] | None) -> dict[int, float] | None:
    """Docnum -> BM25 score of every match of a plain query, or None when ``q`` is not plain."""
    fields = frozenset(name for name, field in searcher.schema.items() if field.scorable)
    if not _plain(q, fields):
        return None
    try:
        return _Scorer(searcher, allowed).node(q)
    except (AttributeError, TypeError, KeyError, ValueError) as exc:  # codec internals changed
        log.warning("fast scoring unavailable (%s: %s); using Whoosh's matcher", type(exc).__name__, exc)
        return None


class _Scorer:
    """Two passes: which documents match (set algebra on doc numbers), then BM25 for those only."""

    def __init__(self, searcher: Any, allowed: set[int] | None):
        self.searcher = searcher
        self.allowed = allowed
        self.leaves = [(sub.reader(), offset) for sub, offset in searcher.leaf_searchers()]
        self._lengths: dict[str, list[int]] = {}
        self._raw: dict[tuple[str, str], dict[int, float]] = {}
        self._once: dict[tuple[str, str], int] | None = None

    def node(self, q: query.Query) -> dict[int, float]:
        """Docnum -> score of every match of ``q``."""
        return self.top(q, None, 0).scores

    def top(self, q: query.Query, pool_above: int | None, pool: int) -> TopScores:
        """Every match of ``q``; scores of all of them, or of a pool when there are too many."""
        self._once = _term_counts(q) if self._once is None else self._once
        docs = self.match(q)
        if self.allowed is not None:
            docs &= self.allowed
        pooled = pool_above is not None and len(docs) > pool_above
        scored = self.pool(q, docs, pool) if pooled else docs
        scores = dict.fromkeys(scored, _not_bonus(q))
        for field, text in self.scoring_terms(q):
            self.add_scores(field, text, scores)
        return TopScores(docs, scores, pooled, len(scores))

    def pool(self, q: query.Query, docs: set[int], want: int) -> set[int]:
        """Likely leaders among ``docs``: for each scoring term, the ``want`` (or a few more, on
        ties) documents with its highest weight, shortest field first among equal weights.
        Everything runs in C (map, Counter, compress): no Python loop over the matches."""
        order = list(docs)
        picked: set[int] = set()
        for field, text in sorted(self.scoring_terms(q)):
            raw = self.raw(field, text)
            weights = list(map(raw.get, order, repeat(0.0)))
            counts = Counter(weights)
            counts.pop(0.0, None)
            level, above = None, 0
            for weight in sorted(counts, reverse=True):
                if above + counts[weight] >= want:
                    level = weight
                    break
                above += counts[weight]
            if level is None:  # fewer than ``want`` documents hold the term: take them all
                picked.update(compress(order, weights))
                continue
            picked.update(compress(order, map(level.__lt__, weights)))
            tied = list(compress(order, map(level.__eq__, weights)))
            lengths = self.lengths(field)
            tied_lengths = list(map(lengths.__getitem__, tied))
            need, longest = want - above, 0
            for length, n in sorted(Counter(tied_lengths).items()):
                longest, need = length, need - n
                if need <= 0:
                    break
            picked.update(compress(tied, map(longest.__ge__, tied_lengths)))
        return picked

    def match(self, q: query.Query) -> set[int]:
        if isinstance(q, query.Term):
            return set(self.raw(q.fieldname, q.text))
        positive = [c for c in q.subqueries if not isinstance(c, query.Not)]
        if isinstance(q, query.And):
            docs = self.match_all(positive)
        else:
            docs = set().union(*(self.match(c) for c in positive))
        for child in q.subqueries:
            if isinstance(child, query.Not):
                docs -= self.match(child.query)
        return docs

    def match_all(self, children: list[query.Query]) -> set[int]:
        """Documents matching every child: rarest term first; a common term is then only looked
        up for the few candidates left (skipping its posting blocks) instead of read whole."""
        terms = sorted((c for c in children if isinstance(c, query.Term)),
                       key=lambda t: self.searcher.doc_frequency(t.fieldname, t.text))
        docs: set[int] | None = None
        for child in children:
            if not isinstance(child, query.Term):
                found = self.match(child)
                docs = found if docs is None else docs & found
        for t in terms:
            key = (t.fieldname, t.text)
            if docs is None:
                docs = set(self.raw(*key))
            elif key not in self._raw and self._once.get(key) == 1 and \
                    len(docs) * LOOKUP_RATIO < (df := self.searcher.doc_frequency(*key)) and \
                    df < HOT_MIN_DOCS * len(self.leaves):  # frequent terms: read once, then kept hot
                self._raw[key] = found = self.lookup(*key, docs)  # only ever scored for these docs
                docs &= found.keys()
            else:
                docs &= self.raw(*key).keys()
        return docs if docs is not None else set()

    def scoring_terms(self, q: query.Query) -> set[tuple[str, str]]:
        """Terms that add to the score (Whoosh sums the scores of matching children; NOT adds nothing)."""
        if isinstance(q, query.Term):
            return {(q.fieldname, q.text)}
        if isinstance(q, query.Not):
            return set()
        return set().union(*(self.scoring_terms(c) for c in q.subqueries))

    def add_scores(self, field: str, text: str, scores: dict[int, float]) -> None:
        raw = self.raw(field, text)
        if not raw:
            return
        searcher = self.searcher
        idf = searcher.idf(field, text)
        avg = searcher.avg_field_length(field) or 1.0
        lengths = self.lengths(field)
        k1p1 = K1 + 1
        norm_base, norm_len = K1 * (1 - B), K1 * B / avg
        get = raw.get
        for d in scores:
            w = get(d)
            if w is not None:
                scores[d] += idf * w * k1p1 / (w + norm_base + norm_len * lengths[d])

    def raw(self, field: str, text: str) -> dict[int, float]:
        """Docnum -> weight of a term (read once per query)."""
        key = (field, text)
        if key not in self._raw:
            ids, weights = self.postings(field, text)
            self._raw[key] = dict(zip(ids, weights, strict=True))
        return self._raw[key]

    def lookup(self, field: str, text: str, docs: set[int]) -> dict[int, float]:
        """Weights of a term in ``docs`` only, skipping the posting blocks that hold none of them."""
        out: dict[int, float] = {}
        fieldobj = self.searcher.schema[field]
        tbytes = fieldobj.to_bytes(text)
        ordered = sorted(docs)
        for reader, offset in self.leaves:
            if (field, text) not in reader:
                continue
            end = offset + reader.doc_count_all()
            local = [d - offset for d in ordered if offset <= d < end]
            if not local:
                continue
            matcher = reader._terms.matcher(field, tbytes, fieldobj.format)
            for d in local:
                if not matcher.is_active():
                    break
                matcher.skip_to(d)
                if matcher.is_active() and matcher.id() == d:
                    out[d + offset] = matcher.weight()
        return out

    def postings(self, field: str, text: str) -> tuple[list[int], array]:
        """Global doc numbers and weights of a term, deleted documents left out."""
        ids: list[int] = []
        weights = array("f")
        fieldobj = self.searcher.schema[field]
        tbytes = fieldobj.to_bytes(text)
        for reader, offset in self.leaves:
            if (field, text) not in reader:
                continue
            key = _hot_key(reader, field, text)
            with _LOCK:
                hot = _HOT.get(key)
                if hot is not None:
                    _HOT.move_to_end(key)
            if hot is not None:
                local_ids, local_weights = hot
            else:
                local_ids, local_weights = self._read_postings(reader, field, tbytes, fieldobj)
                if len(local_ids) >= HOT_MIN_DOCS:
                    _keep_hot(key, array("i", local_ids), local_weights)
            ids.extend(local_ids if not offset else map(offset.__add__, local_ids))
            weights.extend(local_weights)
        return ids, weights

    def is_hot(self, field: str, text: str) -> bool:
        """True when every segment's postings of the term are decoded in memory already."""
        with _LOCK:
            return all(_hot_key(r, field, text) in _HOT for r, _ in self.leaves if (field, text) in r)

    @staticmethod
    def _read_postings(reader: Any, field: str, tbytes: bytes, fieldobj: Any) -> tuple[list[int], array]:
        """One segment's doc numbers and weights of a term, deleted documents left out."""
        matcher = reader._terms.matcher(field, tbytes, fieldobj.format)
        local_ids: list[int] = []
        local_weights = array("f")
        if hasattr(matcher, "_read_ids") and hasattr(matcher, "_next_block"):
            while matcher.is_active():
                matcher._read_ids()
                matcher._read_weights()
                local_ids.extend(matcher._ids)
                local_weights.extend(matcher._weights)
                matcher._next_block()
        else:  # postings inlined in the term info: a few documents
            while matcher.is_active():
                local_ids.append(matcher.id())
                local_weights.append(matcher.weight())
                matcher.next()
        if reader.has_deletions():
            is_deleted = reader.is_deleted  # SegmentReader has no deleted_docs() in Whoosh-Reloaded 2.7.5
            kept = [i for i, d in enumerate(local_ids) if not is_deleted(d)]
            local_ids = [local_ids[i] for i in kept]
            local_weights = array("f", (local_weights[i] for i in kept))
        return local_ids, local_weights

    def lengths(self, field: str) -> list[int]:
        """Field length of every global doc number (cached per segment, which never changes)."""
        if field in self._lengths:
            return self._lengths[field]
        out: list[int] = []
        self._lengths[field] = out
        for reader, _offset in self.leaves:
            cached = _LENGTHS.get_or_compute(
                (reader.segment().segment_id(), field),
                lambda reader=reader: [reader.doc_field_length(d, field, 1) or 1 for d in range(reader.doc_count_all())])
            out.extend(cached)
        return out
