"""Incident search on PostgreSQL: the Whoosh backend's query syntax, answered by SQL over the rows.

* The query is expanded across languages and parsed by the same Whoosh parser and analyzer as the
  embedded backend (so ``AND/OR/NOT``, ``"phrases"``, ``field:value``, ``prefix*`` and the Chinese
  segmentation mean the same), then translated to a WHERE clause: text terms and phrases become
  tsquery matches on ``text_tsv``/``title_tsv`` (GIN), record fields become comparisons, and an
  identifier in the query (``NCCL_SOCKET_IFNAME``, ``memory.fragmentation``) also matches by
  substring through the pg_trgm index on ``identifiers``.
* Ranking: each positive leaf of the query adds ``idf x ts_rank`` (weights A 3 : B 2 : D 1, as the
  Whoosh field weights; length-normalised), idf counted in the table; then id. Not BM25 to the
  digit, so the two backends agree on what comes first, not on the scores themselves.
* A cursor holds the last (score, id) and the idf weights of page one: later pages, on any replica,
  rank with the same weights and start strictly after that key.
"""

from __future__ import annotations

import base64
import json
import math
import re
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from typing import Any

from whoosh import query
from whoosh.qparser import FieldAliasPlugin, QueryParser

from dsdoctor.kb.incidents import ValidationError
from dsdoctor.kb.incidents.analyzer import terms
from dsdoctor.kb.incidents.expand import expand
from dsdoctor.kb.incidents.pgtext import IDENTIFIER_RE, RANK_WEIGHTS, quote
from dsdoctor.kb.incidents.search import FIELD_ALIASES, Filters, decode_cursor

TS_COLUMNS = {"text": "text_tsv", "title": "title_tsv"}
EQ_COLUMNS = {"id": "id", "root_cause": "root_cause", "domain": "domain", "severity": "severity", "status": "status",
              "occurred_at": "occurred_at"}
#: seconds a document frequency stays cached (writes through this process forget them at once)
DF_TTL_S = 60.0
#: seconds the table statistics (ANALYZE's most common lexemes) stay cached
STATS_TTL_S = 300.0
#: share of an identifier leaf's idf a substring match (pg_trgm) adds to the score
LIKE_SHARE = 0.1
#: share of a field leaf's idf (root_cause:x, tag:y) a match adds
FIELD_SHARE = 0.5
C_ID = 'id COLLATE "C"'


@lru_cache(maxsize=1)
def _parser() -> QueryParser:
    from dsdoctor.kb.incidents.indexer import build_schema

    parser = QueryParser("text", build_schema())
    parser.add_plugin(FieldAliasPlugin(FIELD_ALIASES))
    return parser


def parse(q: str) -> query.Query:
    """The Whoosh query tree of ``q`` (ValidationError on malformed syntax)."""
    try:
        return _parser().parse(q)
    except Exception as exc:  # whoosh raises assorted errors on malformed syntax
        raise ValidationError({"q": [f"cannot parse the query: {exc}"]}, "invalid search") from None


@dataclass(frozen=True)
class Leaf:
    """One scored part of a query: its SQL condition alone, and how a match adds to the score."""

    kind: str  # ts | eq | like | const (a prefix: every match scores 1, as Whoosh scores a prefix)
    cond: str
    params: tuple[Any, ...]
    column: str = ""
    #: the one lexeme a ts leaf looks for (its frequency may come from the table statistics)
    term: str = ""

    def score_sql(self) -> tuple[str, list[Any]]:
        if self.kind == "ts":
            return f"ts_rank(?::float4[], {self.column}, ?::tsquery, 1)", [RANK_WEIGHTS, *self.params]
        share = {"like": LIKE_SHARE, "const": 1.0}.get(self.kind, FIELD_SHARE)
        return f"(CASE WHEN {self.cond} THEN {share} ELSE 0 END)", list(self.params)


@dataclass
class Translation:
    """A query as SQL: ``where`` (with ``params``), its positive leaves, terms and prefixes to highlight."""

    where: str = "TRUE"
    params: list[Any] = field(default_factory=list)
    leaves: list[Leaf] = field(default_factory=list)
    terms: set[str] = field(default_factory=set)
    prefixes: set[str] = field(default_factory=set)


def _identifiers(q: str) -> list[tuple[str, tuple[str, ...]]]:
    """Identifiers written in the query with the analyzer terms they split into."""
    out = []
    for match in IDENTIFIER_RE.finditer(q):
        parts = tuple(t for t, _p, _s, _e in terms(match.group()))
        if len(parts) > 1:
            out.append((match.group().lower(), parts))
    return out


def _like(ident: str) -> str:
    return "%" + ident.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


class _Translator:
    def __init__(self, q: str):
        self.out = Translation()
        self.idents = _identifiers(q)

    def run(self, node: query.Query) -> Translation:
        self.out.where, self.out.params = self.node(node, True)
        return self.out

    def _leaf(self, leaf: Leaf, positive: bool) -> tuple[str, list[Any]]:
        if positive:
            self.out.leaves.append(leaf)
        return leaf.cond, list(leaf.params)

    def _ts(self, fieldname: str, tsq: str, positive: bool) -> tuple[str, list[Any]]:
        column = TS_COLUMNS[fieldname]
        return self._leaf(Leaf("ts", f"{column} @@ ?::tsquery", (tsq,), column), positive)

    def node(self, node: query.Query, positive: bool) -> tuple[str, list[Any]]:
        name = getattr(node, "fieldname", None)
        if node is query.NullQuery or isinstance(node, type(query.NullQuery)):
            return "FALSE", []
        if isinstance(node, query.Every):
            return "TRUE", []
        if isinstance(node, query.Prefix | query.Wildcard):
            text = str(node.text).lower()
            if isinstance(node, query.Wildcard):
                text = re.split(r"[*?]", text, maxsplit=1)[0]
            if not text:
                raise ValidationError({"q": [f"{node.text!r}: a wildcard needs at least one letter before * or ?"]},
                                      "invalid search")
            if name in TS_COLUMNS:
                if positive:
                    self.out.prefixes.add(text)
                column = TS_COLUMNS[name]
                return self._leaf(Leaf("const", f"{column} @@ ?::tsquery", (quote(text) + ":*",), column), positive)
            if name == "tags":
                return "EXISTS (SELECT 1 FROM unnest(tags) t WHERE starts_with(t, ?))", [text]
            if name in EQ_COLUMNS:
                return f"starts_with({EQ_COLUMNS[name]}, ?)", [text]
            return "FALSE", []
        if isinstance(node, query.Phrase):
            words = [str(w) for w in node.words]
            if name not in TS_COLUMNS or not words:
                return "FALSE", []
            if positive:
                self.out.terms.update(words)
            joiner = " <-> " if node.slop <= 1 else " & "
            return self._ts(name, joiner.join(quote(w) for w in words), positive)
        if isinstance(node, query.TermRange):
            if name not in EQ_COLUMNS:
                raise ValidationError({"q": ["a range [a TO b] works on occurred_at, severity, status, root_cause "
                                             "and domain"]}, "invalid search")
            parts, params = [], []
            if node.start is not None:
                parts.append(f"{EQ_COLUMNS[name]} {'>' if node.startexcl else '>='} ?")
                params.append(str(node.start))
            if node.end is not None:
                parts.append(f"{EQ_COLUMNS[name]} {'<' if node.endexcl else '<='} ?")
                params.append(str(node.end))
            return " AND ".join(parts) or "TRUE", params
        if isinstance(node, query.Term):  # FuzzyTerm and Variations too: the exact term
            text = str(node.text)
            if name in TS_COLUMNS:
                if positive:
                    self.out.terms.add(text)
                column = TS_COLUMNS[name]
                return self._leaf(Leaf("ts", f"{column} @@ ?::tsquery", (quote(text),), column, text), positive)
            if name == "tags":
                return self._leaf(Leaf("eq", "tags @> ?::text[]", ([text.lower()],)), positive)
            if name in EQ_COLUMNS:
                return self._leaf(Leaf("eq", f"{EQ_COLUMNS[name]} = ?", (text,)), positive)
            return "FALSE", []
        if isinstance(node, query.Not):
            sql, params = self.node(node.query, not positive)
            return f"NOT ({sql})", params
        if isinstance(node, query.AndNot):
            a, pa = self.node(node.a, positive)
            b, pb = self.node(node.b, not positive)
            return f"({a}) AND NOT ({b})", pa + pb
        if isinstance(node, query.AndMaybe):
            a, pa = self.node(node.a, positive)
            self.node(node.b, positive)  # scores, never filters
            return a, pa
        if isinstance(node, query.Require):
            a, pa = self.node(node.a, positive)
            b, pb = self.node(node.b, False)
            return f"({a}) AND ({b})", pa + pb
        if isinstance(node, query.Or | query.DisjunctionMax | query.Otherwise):
            return self._join(list(node.children()), " OR ", positive)
        if isinstance(node, query.CompoundQuery | query.Ordered):
            return self._join(self._with_identifiers(list(node.children()), positive), " AND ", positive)
        raise ValidationError({"q": [f"{type(node).__name__} queries are not supported on PostgreSQL"]},
                              "invalid search")

    def _with_identifiers(self, children: list[Any], positive: bool) -> list[Any]:
        """Children of an AND where the parts of a written identifier follow each other become one
        condition: all the parts, or the whole identifier as a substring of one (pg_trgm)."""
        texts = [(c.fieldname, str(c.text)) if type(c) is query.Term else None for c in children]
        for ident, parts in self.idents:
            want = [("text", p) for p in parts]
            for i in range(len(texts) - len(want) + 1):
                if texts[i : i + len(want)] == want:
                    group = children[i : i + len(want)]
                    children = [*children[:i], ("ident", ident, group), *children[i + len(want) :]]
                    texts = [*texts[:i], None, *texts[i + len(want) :]]
                    break
        return children

    def _join(self, children: list[Any], op: str, positive: bool) -> tuple[str, list[Any]]:
        parts, params = [], []
        for child in children:
            if isinstance(child, tuple):  # an identifier group
                _tag, ident, group = child
                sql, p = self._join(group, " AND ", positive)
                like = self._leaf(Leaf("like", "identifiers LIKE ?", (_like(ident),)), positive)
                parts.append(f"(({sql}) OR {like[0]})")
                params += p + like[1]
                continue
            sql, p = self.node(child, positive)
            parts.append(f"({sql})")
            params += p
        if not parts:
            return "TRUE", []
        return op.join(parts), params


def translate(q: str) -> Translation:
    """``q`` (already expanded) as SQL over the incidents table."""
    return _Translator(q).run(parse(q))


def filter_sql(f: Filters) -> tuple[str, list[Any]]:
    """The WHERE clause of the search filters (the same meaning as the embedded backend's)."""
    clauses, params = [], []
    for column, values in (("root_cause", f.cause), ("domain", f.domain), ("severity", f.severity)):
        if values:
            clauses.append(f"{column} = ANY(?)")
            params.append(list(values))
    if f.tag:
        clauses.append("tags && ?::text[]")
        params.append(list(f.tag))
    if f.since:
        clauses.append("occurred_at >= ?")
        params.append(f.since)
    if f.until:
        clauses.append("occurred_at <= ?")
        params.append(f.until)
    return (" AND ".join(clauses) or "TRUE"), params


# ---------------------------------------------------------------- document frequencies


class Frequencies:
    """Document frequencies of query leaves, counted in the table and kept ``DF_TTL_S`` seconds."""

    def __init__(self, backend: Any):
        self.backend = backend
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, tuple], tuple[float, int]] = {}

    def forget(self) -> None:
        with self._lock:
            self._seen.clear()

    def _cached(self, key: tuple[str, tuple]) -> int | None:
        with self._lock:
            held = self._seen.get(key)
        return held[1] if held and time.monotonic() - held[0] < DF_TTL_S else None

    def _keep(self, key: tuple[str, tuple], value: int) -> None:
        with self._lock:
            if len(self._seen) > 50_000:
                self._seen.clear()
            self._seen[key] = (time.monotonic(), value)

    def total(self) -> int:
        key = ("count(*)", ())
        found = self._cached(key)
        if found is None:
            found = int(self.backend.execute("SELECT count(*) FROM incidents").fetchone()[0])
            self._keep(key, found)
        return found

    def _common(self) -> dict[str, float]:
        """Lexemes of ``text_tsv`` that ANALYZE found in many rows -> estimated number of rows; counting
        those exactly would read most of the table, while the rare rest are cheap to count."""
        key = ("most_common_elems", ())
        with self._lock:
            held = self._seen.get(key)
        if held and time.monotonic() - held[0] < STATS_TTL_S:
            return held[1]  # type: ignore[return-value]
        row = self.backend.execute(
            "SELECT s.most_common_elems::text::text[], s.most_common_elem_freqs, c.reltuples FROM pg_stats s "
            "JOIN pg_class c ON c.relname = s.tablename WHERE s.tablename = 'incidents' AND s.attname = 'text_tsv' "
            "AND c.relkind = 'r' AND s.schemaname = current_schema()").fetchone()
        common: dict[str, float] = {}
        if row and row[0] and row[1] and row[2] and row[2] > 0:
            common = {term: freq * row[2] for term, freq in zip(row[0], row[1], strict=False)}
        with self._lock:
            self._seen[key] = (time.monotonic(), common)  # type: ignore[assignment]
        return common

    def of(self, leaves: Iterable[Leaf]) -> list[int]:
        """How many incidents match each leaf (one round trip for those not cached)."""
        leaves = list(leaves)
        common = self._common() if any(leaf.term for leaf in leaves) else {}
        out: list[int | None] = [
            round(common[leaf.term]) if leaf.term in common and leaf.column == "text_tsv"
            else self._cached((leaf.cond, leaf.params)) for leaf in leaves]
        missing = [i for i, v in enumerate(out) if v is None]
        if missing:  # one pass over the rows that match any of them
            selects = ", ".join(f"count(*) FILTER (WHERE {leaves[i].cond})" for i in missing)
            anyof = " OR ".join(f"({leaves[i].cond})" for i in missing)
            params = [p for i in missing for p in leaves[i].params]
            row = self.backend.execute(f"SELECT {selects} FROM incidents WHERE {anyof}", params * 2).fetchone()
            for i, value in zip(missing, row, strict=True):
                out[i] = int(value)
                self._keep((leaves[i].cond, leaves[i].params), int(value))
        return [int(v or 0) for v in out]

    def idf(self, leaves: list[Leaf]) -> list[float]:
        """The weight of each leaf: its idf, or 1 for a constant-score leaf."""
        counted = [leaf for leaf in leaves if leaf.kind != "const"]
        n = self.total() if counted else 0
        dfs = iter(self.of(counted))
        return [1.0 if leaf.kind == "const" else round(max(0.01, math.log((n + 1) / (next(dfs) + 0.5))), 4)
                for leaf in leaves]


def _score(leaves: list[Leaf], weights: list[float]) -> tuple[str, list[Any]]:
    parts, params = [], []
    for leaf, weight in zip(leaves, weights, strict=True):
        sql, p = leaf.score_sql()
        parts.append(f"?::float8 * {sql}")  # a parameter: the weights of a later page come from its cursor
        params += [weight, *p]
    return (" + ".join(parts) or "0"), params


# ---------------------------------------------------------------- cursors with weights


def _encode(fingerprint: str, score: Decimal, last_id: str, seen: int, weights: list[float]) -> str:
    raw = json.dumps({"v": 1, "f": fingerprint, "k": [str(score), last_id], "n": seen, "w": weights},
                     separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii").rstrip("=")


def _weights_of(cursor: str) -> list[float] | None:
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        weights = data.get("w") if isinstance(data, dict) else None
        found = [float(w) for w in weights] if isinstance(weights, list) else None
    except (ValueError, TypeError):
        return None
    return found if found is not None and all(0.0 <= w <= 1000.0 for w in found) else None


# ---------------------------------------------------------------- search


def facets_and_total(backend: Any, where: str, params: list[Any]) -> tuple[int, dict[str, dict[str, int]]]:
    return _facets(backend.execute(f"SELECT root_cause, domain, count(*) FROM incidents WHERE {where} "
                                   "GROUP BY root_cause, domain", params).fetchall())


def _facets(rows: Iterable[tuple[Any, ...]]) -> tuple[int, dict[str, dict[str, int]]]:
    """Total and facets from (root_cause, domain, count) groups."""
    causes: Counter[str] = Counter()
    domains: Counter[str] = Counter()
    for cause, domain, n in rows:
        causes[cause] += int(n)
        domains[domain] += int(n)
    order = lambda c: dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))  # noqa: E731
    return sum(causes.values()), {"root_cause": order(causes), "domain": order(domains)}


def ranked(backend: Any, freqs: Frequencies, q: str, f: Filters, limit: int, cursor: str | None) -> dict[str, Any]:
    """Matches of a text query by score desc, then id; with facets and total (as ``search.ranked``)."""
    expanded = expand(q)
    found = translate(expanded)
    fwhere, fparams = filter_sql(f)
    where = f"({found.where}) AND {fwhere}"
    params = found.params + fparams
    fingerprint = f.fingerprint(q)
    seen, after = 0, None
    weights = None
    if cursor:
        key, seen = decode_cursor(cursor, fingerprint)
        try:
            after = (Decimal(str(key[0])), str(key[1]))
        except ArithmeticError:
            raise ValidationError({"cursor": ["is not a cursor returned by this search"]}, "invalid search") from None
        weights = _weights_of(cursor)
    if weights is None or len(weights) != len(found.leaves):
        weights = freqs.idf(found.leaves)
    score, sparams = _score(found.leaves, weights)
    page_where, page_params = "", []
    if after is not None:
        page_where = f' WHERE s < ? OR (s = ? AND {C_ID} > ?)'
        page_params = [after[0], after[0], after[1]]
    # one pass over the matches: the page, and the facet counts of all of them
    found_rows = backend.execute(
        f"WITH m AS MATERIALIZED (SELECT id, root_cause, domain, round(({score})::numeric, 6) AS s FROM incidents "
        f"WHERE {where}) "
        f"(SELECT 0, id, s, NULL::text, NULL::text, 0::bigint FROM m{page_where} ORDER BY s DESC, {C_ID} LIMIT ?) "
        "UNION ALL (SELECT 1, NULL::text, NULL::numeric, root_cause, domain, count(*) FROM m GROUP BY root_cause, domain)",
        [*sparams, *params, *page_params, limit + 1]).fetchall()
    rows = [(r[1], r[2]) for r in found_rows if r[0] == 0]
    total, facets = _facets([(r[3], r[4], r[5]) for r in found_rows if r[0] == 1])
    page = rows[:limit]
    next_cursor = (_encode(fingerprint, page[-1][1], page[-1][0], seen + len(page), weights)
                   if len(rows) > limit and page else None)
    return {"hits": [(r[0], float(r[1])) for r in page], "facets": facets, "next_cursor": next_cursor,
            "total": total, "terms": frozenset(found.terms), "prefixes": tuple(sorted(found.prefixes)),
            "ranked_in_pool": False, "total_is_estimate": False}


def browse(backend: Any, f: Filters, limit: int, cursor: str | None) -> dict[str, Any]:
    """Newest first (occurred_at desc, then id) with filters and facets."""
    from dsdoctor.kb.incidents.search import encode_cursor

    where, params = filter_sql(f)
    fingerprint = f.fingerprint("")
    page_where, page_params, seen = where, list(params), 0
    if cursor:
        (occurred, last_id), seen = decode_cursor(cursor, fingerprint)
        page_where += f" AND (occurred_at < ? OR (occurred_at = ? AND {C_ID} > ?))"
        page_params += [str(occurred), str(occurred), str(last_id)]
    rows = backend.execute(f"SELECT id, occurred_at FROM incidents WHERE {page_where} "
                           f"ORDER BY occurred_at DESC, {C_ID} LIMIT ?", [*page_params, limit + 1]).fetchall()
    total, facets = facets_and_total(backend, where, params)
    page = rows[:limit]
    next_cursor = (encode_cursor(fingerprint, [page[-1][1], page[-1][0]], seen + len(page))
                   if len(rows) > limit and page else None)
    return {"hits": [(r[0], None) for r in page], "facets": facets, "next_cursor": next_cursor, "total": total,
            "terms": frozenset()}


# ---------------------------------------------------------------- similar incidents


#: distinct words of a text considered for its key terms (the most frequent first)
KEY_CANDIDATES = 120


def text_matches(backend: Any, freqs: Frequencies, text: str, exclude: str | None, limit: int = 50,
                 count: int = 15) -> dict[str, float]:
    """Incidents sharing distinctive terms with ``text``: id -> share of the key terms' idf matched
    (the key terms and the share as :func:`kb.incidents.similar.text_matches` computes them)."""
    tf = Counter(t for t, _pos, _s, _e in terms(text) if len(t) > 1 and not t.isdigit())
    candidates = sorted(tf, key=lambda t: (-tf[t], t))[:KEY_CANDIDATES]
    if not candidates:
        return {}
    leaves = [Leaf("ts", "text_tsv @@ ?::tsquery", (quote(t),), "text_tsv") for t in candidates]
    n = max(1, freqs.total())
    scored = []
    for term, leaf, df in zip(candidates, leaves, freqs.of(leaves), strict=True):
        if df == 0:
            continue
        idf = math.log((n + 1) / (df + 0.5))
        if idf > 0:
            scored.append((min(tf[term], 3) * idf, term, idf, leaf))
    scored.sort(key=lambda s: (-s[0], s[1]))
    keys = scored[:count]
    if not keys:
        return {}
    total = sum(idf for _s, _t, idf, _l in keys)
    score, sparams = _score([leaf for *_r, leaf in keys], [round(idf, 4) for _s, _t, idf, _l in keys])
    flags = ", ".join("text_tsv @@ ?::tsquery" for _ in keys)
    tsq = " | ".join(quote(t) for _s, t, _i, _l in keys)
    rows = backend.execute(
        f"SELECT id, ARRAY[{flags}], {score} AS s FROM incidents WHERE text_tsv @@ ?::tsquery "
        f"ORDER BY s DESC, {C_ID} LIMIT ?",
        [*(leaf.params[0] for *_r, leaf in keys), *sparams, tsq, limit + 1]).fetchall()
    out: dict[str, float] = {}
    for incident_id, matched, _s in rows:
        if incident_id == exclude:
            continue
        out[incident_id] = sum(idf for (_s2, _t, idf, _l), hit in zip(keys, matched, strict=True) if hit) / total
    return out


def symptom_matches(backend: Any, symptoms: Iterable[str], exclude: str | None) -> dict[str, float]:
    """Incidents sharing observed symptoms: id -> Jaccard index of the two symptom sets."""
    wanted = sorted(set(symptoms))
    if not wanted:
        return {}
    rows = backend.execute(
        "SELECT id, cardinality(ARRAY(SELECT unnest(symptoms) INTERSECT SELECT unnest(?::text[]))), "
        "cardinality(symptoms) FROM incidents WHERE symptoms && ?::text[]", [wanted, wanted]).fetchall()
    return {rid: shared / (len(wanted) + own - shared) for rid, shared, own in rows if rid != exclude}
