"""Search over incidents: free text with field weights, filters, facets and cursors.

* A text query is first expanded across languages (:mod:`kb.incidents.expand`: 显存不足 also
  looks for "out of memory"), then goes to the Whoosh index (BM25 over one weighted field: title 3 > phenomenon,
  root cause 2 > the rest 1), ordered by score, then id. Facets count root causes and domains
  over every match. Plain queries are scored by :mod:`kb.incidents.fastscore`.
* An empty query lists the newest incidents first straight from SQLite, with the same filters
  and facets.
* ``next_cursor`` is opaque (base64 JSON of the last sort key, the count already returned and
  a fingerprint of the query): the next page starts strictly after that key, so pages never
  repeat or skip an item while the index is unchanged.
* Highlights: :mod:`kb.incidents.highlights`; similar incidents: :mod:`kb.incidents.similar`.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import heapq
import json
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlite_utils
from whoosh import query
from whoosh.qparser import FieldAliasPlugin, QueryParser

from dsdoctor.kb.incidents import ValidationError, fastscore
from dsdoctor.kb.incidents.expand import expand
from dsdoctor.kb.incidents.indexer import TEXT_FIELDS, Indexer
from dsdoctor.kb.incidents.record import SEVERITIES, parse_timestamp
from dsdoctor.kb.lru import BoundedCache

#: other names accepted before ':' in a query (English and Chinese); the parts of a record other
#: than the title share the weighted ``text`` field, so ``fix:`` searches all of the text
FIELD_ALIASES = {
    "title": ["标题"],
    "text": ["phenomenon", "现象", "cause", "原因", "根因", "root_cause_detail", "fix", "修复", "scope", "范围",
             "regression", "回归", "prevention", "预防", "evidence", "body"],
    "root_cause": ["cause_id"],
    "tags": ["tag", "标签"],
    "severity": ["严重度"],
}
MAX_QUERY_CHARS = 2000
CACHE_ENTRIES = 256
_CACHE_LOCK = threading.Lock()
SEGMENT_COLUMNS = 256
_SEGMENT_COLUMNS: BoundedCache[list[str]] = BoundedCache(SEGMENT_COLUMNS)  # (segment id, field) -> values
_BROWSE_CACHE: BoundedCache[tuple[int, dict[str, dict[str, int]]]] = BoundedCache(CACHE_ENTRIES)
#: ranked keys kept per query and index generation; deeper pages rank again
KEEP_KEYS = 2000
#: a plain query with more matches than this scores only a pool of likely leaders (KEEP_KEYS
#: per query term) instead of every match; total and facets stay exact
POOL_ABOVE = 5_000
#: a phrase whose words all occur in more documents than this is checked on a pool of their
#: PHRASE_POOL leaders per word only; its total and facets are then estimates
PHRASE_POOL_ABOVE = 3_000
PHRASE_POOL = 40
MAX_LIMIT = 200


@dataclass(frozen=True)
class Filters:
    """Search filters; several values of one kind mean "any of them"."""

    cause: tuple[str, ...] = ()
    domain: tuple[str, ...] = ()
    severity: tuple[str, ...] = ()
    tag: tuple[str, ...] = ()
    since: str | None = None
    until: str | None = None

    def fingerprint(self, q: str) -> str:
        basis = json.dumps([q, self.cause, self.domain, self.severity, self.tag, self.since, self.until])
        return hashlib.sha1(basis.encode("utf-8")).hexdigest()[:12]


def _values(value: str | Iterable[str] | None, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else list(value)
    out = []
    for item in items:
        if not isinstance(item, str):
            raise ValidationError({field: [f"must be text, got {item!r}"]}, "invalid search")
        out.extend(v.strip() for v in item.split(",") if v.strip())
    return tuple(dict.fromkeys(out))


def make_filters(cause=None, domain=None, severity=None, tag=None, since=None, until=None) -> Filters:
    """Check and normalise the filter arguments of ``search`` (ValidationError names the field)."""
    problems: dict[str, list[str]] = {}
    severities = _values(severity, "severity")
    bad = [s for s in severities if s not in SEVERITIES]
    if bad:
        problems["severity"] = [f"unknown severity {', '.join(bad)}; use one of {', '.join(SEVERITIES)}"]
    bounds: dict[str, str | None] = {}
    for name, value, end in (("since", since, False), ("until", until, True)):
        try:
            bounds[name] = parse_timestamp(value, end_of_day=end) if value not in (None, "") else None
        except ValueError as exc:
            problems[name] = [str(exc)]
    if not problems and bounds["since"] and bounds["until"] and bounds["since"] > bounds["until"]:
        problems["since"] = [f"since ({bounds['since']}) is after until ({bounds['until']})"]
    if problems:
        raise ValidationError(problems, "invalid search")
    return Filters(_values(cause, "cause"), _values(domain, "domain"), severities,
                   tuple(t.lower() for t in _values(tag, "tag")), bounds["since"], bounds["until"])


# ---------------------------------------------------------------- cursors


def encode_cursor(fingerprint: str, key: Sequence[Any], seen: int) -> str:
    raw = json.dumps({"v": 1, "f": fingerprint, "k": list(key), "n": seen}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(cursor: str, fingerprint: str) -> tuple[list[Any], int]:
    """The sort key and count of a cursor from the same query; ValidationError otherwise."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
        key, seen = data["k"], int(data["n"])
        if data.get("v") != 1 or not isinstance(key, list) or len(key) != 2:
            raise ValueError
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise ValidationError({"cursor": ["is not a cursor returned by this search"]}, "invalid search") from None
    if data.get("f") != fingerprint:
        raise ValidationError({"cursor": ["belongs to a different query or filters; start again without it"]},
                              "invalid search")
    return key, seen


# ---------------------------------------------------------------- empty query: SQLite


def _sql_where(f: Filters) -> tuple[str, list[Any]]:
    clauses, params = [], []
    for column, values in (("root_cause", f.cause), ("domain", f.domain), ("severity", f.severity)):
        if values:
            clauses.append(f"{column} IN ({','.join('?' * len(values))})")
            params.extend(values)
    if f.tag:
        clauses.append("EXISTS (SELECT 1 FROM incident_tags t WHERE t.incident_id = incidents.id "
                       f"AND t.tag IN ({','.join('?' * len(f.tag))}))")
        params.extend(f.tag)
    if f.since:
        clauses.append("occurred_at >= ?")
        params.append(f.since)
    if f.until:
        clauses.append("occurred_at <= ?")
        params.append(f.until)
    return (" AND ".join(clauses) or "1"), params


def browse(db: sqlite_utils.Database, f: Filters, limit: int, cursor: str | None) -> dict[str, Any]:
    """Newest first (occurred_at desc, then id) with filters and facets, from SQLite."""
    where, params = _sql_where(f)
    fingerprint = f.fingerprint("")
    page_where, page_params = where, list(params)
    seen = 0
    if cursor:
        (occurred, last_id), seen = decode_cursor(cursor, fingerprint)
        page_where += " AND (occurred_at < ? OR (occurred_at = ? AND id > ?))"
        page_params += [occurred, occurred, last_id]
    rows = db.execute(f"SELECT id, occurred_at FROM incidents WHERE {page_where} "
                      "ORDER BY occurred_at DESC, id ASC LIMIT ?", [*page_params, limit + 1]).fetchall()
    # total and facets change only when the database does: data_version moves when another
    # connection commits, total_changes when this one writes
    version = (db.execute("PRAGMA data_version").fetchone()[0], db.conn.total_changes)
    token = db.__dict__.setdefault("_dsdoctor_browse_token", object())  # this connection, not a reused id
    key = (token, version, f)

    def count() -> tuple[int, dict[str, dict[str, int]]]:
        total = int(db.execute(f"SELECT COUNT(*) FROM incidents WHERE {where}", params).fetchone()[0])
        facets = {
            name: dict(db.execute(f"SELECT {column}, COUNT(*) FROM incidents WHERE {where} GROUP BY {column} "
                                  f"ORDER BY COUNT(*) DESC, {column}", params).fetchall())
            for name, column in (("root_cause", "root_cause"), ("domain", "domain"))
        }
        return total, facets

    total, facets = _BROWSE_CACHE.get_or_compute(key, count)
    page = rows[:limit]
    next_cursor = (encode_cursor(fingerprint, [page[-1][1], page[-1][0]], seen + len(page))
                   if len(rows) > limit and page else None)
    return {"hits": [(r[0], None) for r in page], "facets": facets, "next_cursor": next_cursor, "total": total,
            "terms": frozenset()}


# ---------------------------------------------------------------- text query: Whoosh


def parse_query(searcher: Any, q: str) -> query.Query:
    """Parse the user's query (Whoosh syntax: AND/OR/NOT, "phrases", field:value, prefix*)."""
    parser = QueryParser("text", searcher.schema)
    parser.add_plugin(FieldAliasPlugin(FIELD_ALIASES))
    try:
        return parser.parse(q)
    except Exception as exc:  # whoosh raises assorted errors on malformed syntax
        raise ValidationError({"q": [f"cannot parse the query: {exc}"]}, "invalid search") from None


def positive_terms(q: query.Query, reader: Any) -> frozenset[str]:
    """Text-field terms the query looks for (prefixes expanded, negated parts left out)."""
    found: set[str] = set()

    def walk(node: query.Query) -> None:
        if isinstance(node, query.Not):
            return
        if isinstance(node, query.AndNot):
            walk(node.a)
        elif node.is_leaf():
            for field, text in node.existing_terms(reader, phrases=True, expand=True):
                if field in TEXT_FIELDS:
                    found.add(text.decode("utf-8", "replace") if isinstance(text, bytes) else text)
        else:
            for child in node.children():
                walk(child)

    walk(q)
    return frozenset(found)


def ranked(indexer: Indexer, q: str, f: Filters, limit: int, cursor: str | None) -> dict[str, Any]:
    """Matches of a text query ordered by score desc, then id; with facets and total.

    One pass finds every match (the total and the facets count them all) and scores them, or,
    for a plain query with more than ``POOL_ABOVE`` matches, a pool of likely leaders (see
    :func:`kb.incidents.fastscore.score_top`); ``ranked_in_pool`` says so. The ordered keys are
    kept per index generation, so later pages are cheap.
    """
    searcher = indexer.searcher()
    expanded = expand(q)  # also the other language's words for the same thing
    parsed = parse_query(searcher, expanded)
    fingerprint = f.fingerprint(q)
    seen, start = 0, 0
    ranking = _cached(searcher, ("rank", expanded, f), lambda: _rank(searcher, parsed, f, KEEP_KEYS))
    keys = ranking["keys"]
    after: tuple[float, str] | None = None
    if cursor:
        key, seen = decode_cursor(cursor, fingerprint)
        after = (-float(key[0]), str(key[1]))
        start = bisect.bisect_right(keys, after)
        if ranking["pooled"] and not (start and keys[start - 1] == after):
            start = len(keys)  # the cursor is past the pool
    if start + limit >= len(keys) and ranking["truncated"]:  # deep page: rank again without the cap
        full = _rank(searcher, parsed, f, None)["keys"]
        if ranking["pooled"]:  # the pool's pages came first: go on with every other match
            keys, start = _after_pool(keys, full, after)
        else:
            keys, start = full, bisect.bisect_right(full, after) if after else 0
    page = keys[start : start + limit]
    more = start + limit < len(keys)  # a truncated ranking was extended above when the page reached its end
    next_cursor = encode_cursor(fingerprint, [-page[-1][0], page[-1][1]], seen + len(page)) if more and page \
        else None
    return {"hits": [(k[1], -k[0]) for k in page], "facets": ranking["facets"], "next_cursor": next_cursor,
            "total": ranking["total"], "terms": positive_terms(parsed, searcher.reader()),
            "ranked_in_pool": ranking["pooled"], "total_is_estimate": ranking["estimated"]}


def _rank(searcher: Any, parsed: query.Query, f: Filters, keep: int | None) -> dict[str, Any]:
    """Sorted (-score, id) keys (the first ``keep``), total and facet counts of every match.

    With ``keep`` set, a plain query with more than ``POOL_ABOVE`` matches scores only a pool of
    likely leaders (``pooled``: its keys are the pool's, exact BM25 order within it); the total
    and the facets still count every match. ``keep=None`` scores every match.
    """
    allowed = _allowed(searcher, f)
    fast = fastscore.score_top(searcher, parsed, allowed, POOL_ABOVE if keep is not None else None, keep or 0)
    estimated = False
    if fast is None and keep is not None:
        fast = fastscore.phrase_top(searcher, parsed, allowed, PHRASE_POOL_ABOVE, PHRASE_POOL)
        estimated = fast is not None
    if fast is not None:
        scored: Iterable[tuple[float, int]] = [(score, docnum) for docnum, score in fast.scores.items()]
        docnums: Iterable[int] = fast.matches
        total, pooled = len(fast.matches), fast.pooled
    else:
        scored = searcher.search(parsed, filter=allowed, limit=None).top_n  # (score, docnum) of every match
        docnums = [docnum for _score, docnum in scored]
        total, pooled = len(scored), False
    if estimated:  # phrase: the share of the pool that holds it, applied to every candidate
        docnums = list(fast.scores)
        total = max(len(docnums), round(total * len(docnums) / max(fast.checked, 1)))
    ids = _cached(searcher, ("column", "id"), lambda: _column(searcher, "id"))
    keys = [(-score, ids[docnum]) for score, docnum in scored]
    if keep is not None and len(keys) > keep and not pooled:
        keys = heapq.nsmallest(keep, keys)
    else:
        keys.sort()
    facets = {}
    rest = None  # most documents match: count the others and subtract from the counts of all
    if isinstance(docnums, set) and len(docnums) * 2 > searcher.doc_count():
        rest = _live(searcher) - docnums
    for name in ("root_cause", "domain"):
        values = _cached(searcher, ("column", name), lambda name=name: _column(searcher, name))
        if rest is not None:
            everything = _cached(searcher, ("counts", name),
                                 lambda values=values: Counter(map(values.__getitem__, _live(searcher))))
            counts = everything - Counter(map(values.__getitem__, rest))
        else:
            counts = Counter(map(values.__getitem__, docnums))
        if estimated and docnums:  # the pool's matches, scaled to the estimated total
            counts = Counter({k: max(1, round(v * total / len(docnums))) for k, v in counts.items()})
        facets[name] = _sorted_counts(counts)
    return {"keys": keys, "total": total, "facets": facets, "truncated": pooled or len(keys) < total,
            "pooled": pooled, "estimated": estimated}


def _live(searcher: Any) -> frozenset[int]:
    """Doc numbers of the documents not deleted (once per index generation)."""
    return _cached(searcher, ("live",), lambda: frozenset(searcher.reader().all_doc_ids()))


def _after_pool(pool: list[tuple[float, str]], full: list[tuple[float, str]],
                after: tuple[float, str] | None) -> tuple[list[tuple[float, str]], int]:
    """Keys in page order for a pooled ranking (the pool, then every other match by score) and
    the position just after the cursor key ``after`` (None: the start)."""
    in_pool = {k[1] for k in pool}
    rest = [k for k in full if k[1] not in in_pool]
    if after is None:
        return pool + rest, 0
    i = bisect.bisect_left(pool, after)
    if i < len(pool) and pool[i] == after:
        return pool + rest, i + 1
    return pool + rest, len(pool) + bisect.bisect_right(rest, after)


def _allowed(searcher: Any, f: Filters) -> set[int] | None:
    """Doc numbers the filters let through (None: no filter), from per-document columns."""
    if not (f.cause or f.domain or f.severity or f.tag or f.since or f.until):
        return None
    return _cached(searcher, ("allowed", f), lambda: _compute_allowed(searcher, f))


def _compute_allowed(searcher: Any, f: Filters) -> set[int]:
    parts: list[set[int]] = []
    for field, values in (("root_cause", f.cause), ("domain", f.domain), ("severity", f.severity)):
        if values:
            table = _cached(searcher, ("inverted", field), lambda field=field: _inverted(searcher, field))
            parts.append(set().union(*(table.get(v, ()) for v in values)))
    if f.tag:
        parts.append(set(searcher.docs_for_query(query.Or([query.Term("tags", t) for t in f.tag]))))
    if f.since or f.until:
        dates, docnums = _cached(searcher, ("dates",), lambda: _by_date(searcher))
        lo = bisect.bisect_left(dates, f.since) if f.since else 0
        hi = bisect.bisect_right(dates, f.until) if f.until else len(dates)
        parts.append(set(docnums[lo:hi]))
    parts.sort(key=len)
    allowed = parts[0]
    for other in parts[1:]:
        allowed = allowed & other
    return set(allowed)


def _inverted(searcher: Any, field: str) -> dict[str, list[int]]:
    table: dict[str, list[int]] = {}
    for docnum, value in enumerate(_cached(searcher, ("column", field), lambda: _column(searcher, field))):
        table.setdefault(value, []).append(docnum)
    return table


def _by_date(searcher: Any) -> tuple[list[str], list[int]]:
    column = _cached(searcher, ("column", "occurred_at"), lambda: _column(searcher, "occurred_at"))
    order = sorted(range(len(column)), key=column.__getitem__)
    return [column[d] for d in order], order


def _cached(searcher: Any, key: tuple, compute: Any) -> Any:
    """A value computed once per searcher, i.e. per index generation (an LRU of 256 entries)."""
    with _CACHE_LOCK:
        cache = searcher.__dict__.setdefault("_dsdoctor_cache", OrderedDict())
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
    value = compute()  # outside the lock: two threads may both compute it once, never block
    with _CACHE_LOCK:
        cache[key] = value
        while len(cache) > CACHE_ENTRIES:
            cache.popitem(last=False)
    return value


def _column(searcher: Any, field: str) -> list[str]:
    """The value of a sortable field for every doc number of this searcher.

    Kept per segment (segments never change; a write adds a small one), so a new index
    generation only reads the columns of its new segments.
    """
    out: list[str] = []
    for sub, _offset in searcher.leaf_searchers():
        reader = sub.reader()
        segment = reader.segment() if hasattr(reader, "segment") else None
        if segment is None:  # an empty index
            out.extend(reader.column_reader(field) if reader.doc_count_all() else [])
            continue
        values = _SEGMENT_COLUMNS.get_or_compute((segment.segment_id(), field),
                                                 lambda reader=reader: list(reader.column_reader(field)))
        out.extend(values)
    return out


def _sorted_counts(groups: dict[Any, int]) -> dict[str, int]:
    items = [(str(k), int(v)) for k, v in groups.items() if k is not None]
    return dict(sorted(items, key=lambda kv: (-kv[1], kv[0])))

