"""IncidentStore: the Python API over incident records, on SQLite + Whoosh (embedded) or PostgreSQL.

What is the same on both (validation, redaction, versions, import rules, search results and their
highlights) lives here; a backend (:mod:`kb.incidents.embedded`, :mod:`kb.incidents.pgstore`) stores
rows and answers queries. ``DSDOCTOR_DATABASE_URL`` chooses PostgreSQL, as for every other store.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from dsdoctor.kb.incidents import (
    ConflictError,
    IncidentError,
    NotFoundError,
    ReadOnlyError,
    StaleVersionError,
    ValidationError,
    analyzer,
    search,
)
from dsdoctor.kb.incidents.embedded import DB_FILE, INDEX_DIR, LOCK_FILE, EmbeddedIncidents
from dsdoctor.kb.incidents.highlights import highlights, prefix_terms
from dsdoctor.kb.incidents.record import (
    PUBLIC_PREFIX,
    CauseSource,
    resolve_causes,
    same_content,
    utc_now,
    validate_new,
    validate_patch,
)
from dsdoctor.kb.lru import BoundedCache
from dsdoctor.kb.redact import Redactions, redact_value
from dsdoctor.kb.storage.settings import database_url
from dsdoctor.kb.textcheck import unencodable_path

__all__ = ["DB_FILE", "INDEX_DIR", "LOCK_FILE", "IncidentStore"]
#: weight of symptom overlap against text similarity in similar() when both are given
SYMPTOM_WEIGHT = 0.6


class IncidentStore:
    """Completed incidents: validated records in SQLite, searchable through a Whoosh index.

    ``valid_causes`` is the set of root-cause IDs a record may name (or a callable returning
    it, asked on every write); ``None`` accepts any well-formed ``<domain>.<name>`` ID.
    With ``seed`` the first start of an empty store loads ``kb/data/incidents/seed.jsonl``.
    Safe to share between threads; several processes may open the same ``home`` at once.

    Every write (add, update, import) removes secrets first (:mod:`kb.redact`): the store is the one
    place all incidents pass, whichever caller sent them. ``on_redacted`` hears what was removed
    (``{kind: count}``; the API counts it in its metrics). Every record carries a ``version``: 1 when
    added, +1 with each change, compared inside the UPDATE (``update(..., expected_version=)``).
    """

    def __init__(self, home: Path, valid_causes: CauseSource = None, *, seed: bool = True,
                 index_wait_s: float = 30.0, on_redacted: Callable[[dict[str, int]], None] | None = None):
        self.home = Path(home)
        try:
            self.home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise IncidentError(f"cannot create the data directory {self.home}: {exc.strerror}") from None
        analyzer.configure(self.home / "cache")
        self._valid_source = valid_causes
        self._index_wait_s = index_wait_s
        self._on_redacted = on_redacted
        # similar incidents of repeated failures (same symptoms, same words) until the store changes
        self._similar_memo: BoundedCache[list[dict[str, Any]]] = BoundedCache(256)
        self._data = _backend(self.home)
        # one SQLite connection serves every thread; PostgreSQL gives each thread its own
        self._lock: Any = threading.RLock() if self._data.shared_connection else contextlib.nullcontext()
        if seed:
            from dsdoctor.kb.incidents.seed import load_public, load_seed_if_new

            load_seed_if_new(self)
            load_public(self)

    @classmethod
    def open_existing(cls, home: Path, valid_causes: CauseSource = None) -> IncidentStore | None:
        """The store in ``home`` if one was ever created there, else None (nothing is created)."""
        if database_url() is None and not EmbeddedIncidents.exists_in(home):
            return None
        return cls(home, valid_causes, seed=False)

    def close(self) -> None:
        """Close the database connections and index files."""
        with self._lock:
            self._data.close()

    def __enter__(self) -> IncidentStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def warm_up(self) -> None:
        """Load jieba and open the index now (call once per server worker at start)."""
        self._data.warm_up()

    @property
    def backend(self) -> str:
        """``sqlite`` (embedded, Whoosh index) or ``postgresql``."""
        return self._data.dialect

    @property
    def _db(self) -> Any:
        """The embedded backend's SQLite database (tests and tools of the embedded store)."""
        return self._data.db

    @property
    def indexer(self) -> Any:
        """The embedded backend's Whoosh indexer (tests and tools of the embedded store)."""
        return self._data.indexer

    @property
    def valid_causes(self) -> frozenset[str] | None:
        """The root-cause IDs a record may name (None: any well-formed ID)."""
        return resolve_causes(self._valid_source)

    # ------------------------------------------------------------------ records

    def _redact(self, value: Any) -> Any:
        """``value`` without secrets (every write path comes through here); text that cannot be stored
        (a lone surrogate; a NUL character, which PostgreSQL text refuses, so both backends refuse it)
        is a ValidationError naming the field, never a crash in the database."""
        bad = unencodable_path(value)
        if bad is not None:
            raise ValidationError({bad or "record": ["is not valid Unicode text (it holds a lone surrogate, "
                                                     "U+D800-U+DFFF, which cannot be stored)"]})
        bad = _nul_path(value)
        if bad is not None:
            raise ValidationError({bad or "record": ["holds a NUL character (U+0000), which cannot be stored"]})
        found = Redactions()
        clean = redact_value(value, found)
        if found.total and self._on_redacted is not None:
            self._on_redacted(dict(found.counts))
        return clean

    def add(self, record: dict[str, Any]) -> dict[str, Any]:
        """Validate and store a new incident; return it as stored (with id and timestamps).

        Raises ValidationError (field -> messages) or ConflictError when the id exists.
        """
        new = validate_new(self._redact(record), self.valid_causes)
        _refuse_public_id(new["id"])
        with self._lock:
            try:
                with self._data.transaction():
                    if self._data.exists(new["id"]):
                        raise ConflictError(new["id"])
                    self._data.insert(new)
            except self._data.integrity_errors:
                raise ConflictError(new["id"]) from None
        self._sync()
        return new

    def get(self, incident_id: str) -> dict[str, Any]:
        """The incident with this id (NotFoundError when there is none)."""
        with self._lock:
            found = self._data.fetch([incident_id]).get(incident_id)
        if found is None:
            raise NotFoundError(incident_id)
        return found

    def update(self, incident_id: str, patch: dict[str, Any], *, expected_version: int | None = None
               ) -> dict[str, Any]:
        """Change some fields of an incident (``job`` merges key by key); return the new record.

        With ``expected_version`` the change applies only to that version of the record
        (StaleVersionError otherwise): a client that read version 3 cannot overwrite version 4.
        """
        if incident_id.startswith(PUBLIC_PREFIX):
            raise ReadOnlyError(incident_id)
        valid = self.valid_causes
        patch = self._redact(patch)
        with self._lock, self._data.transaction():
            existing = self._data.fetch_for_update(incident_id)
            if existing is None:
                raise NotFoundError(incident_id)
            if expected_version is not None and existing["version"] != expected_version:
                raise StaleVersionError(incident_id, expected_version, existing["version"])
            new = validate_patch(existing, patch, valid)
            if same_content(new, existing):
                return existing
            new["updated_at"] = utc_now()
            if not self._data.replace(new, existing["version"]):
                raise StaleVersionError(incident_id, existing["version"], existing["version"] + 1)
        self._sync()
        return new

    def delete(self, incident_id: str) -> None:
        """Delete an incident (NotFoundError when there is none; public incidents are read-only)."""
        if incident_id.startswith(PUBLIC_PREFIX):
            with self._lock:
                if self._data.exists(incident_id):
                    raise ReadOnlyError(incident_id)
        with self._lock, self._data.transaction():
            if not self._data.delete(incident_id):
                raise NotFoundError(incident_id)
        self._sync()

    def count(self) -> int:
        """Number of incidents stored."""
        with self._lock:
            return self._data.count()

    # ------------------------------------------------------------------ import / export

    def import_jsonl(self, source: str | Path | Iterable[str], *, sync_index: bool = True) -> dict[str, int]:
        """Import JSON lines (a path or an iterable of lines); idempotent by id.

        A known id with the same content is left alone, with other content it is replaced; a line
        without an id gets one derived from its content, so importing a file twice adds nothing.
        Every line is checked first: any invalid line rejects the whole file (ValidationError
        naming each ``line N``). Returns ``{"added", "updated", "unchanged"}``.
        With ``sync_index=False`` the changes stay queued for the index (bulk loads that call
        :meth:`reindex` next).
        """
        lines = _read_lines(source)
        for attempt in range(3):  # PostgreSQL: a replica's add of an id this file holds may commit first
            try:
                with self._lock, self._data.transaction():
                    self._data.exclusive("incidents-import")
                    counts, problems = self._import_locked(lines, skip_invalid=False)
                    if problems:
                        raise ValidationError(problems, "invalid import")
                break
            except self._data.integrity_errors:
                if attempt == 2:
                    raise IncidentError("the import collided three times with incidents added meanwhile; "
                                        "import again") from None
        if sync_index:
            self._sync()
        return counts

    def _import_locked(self, lines: Iterable[str], skip_invalid: bool, public: bool = False
                       ) -> tuple[dict[str, int], dict[str, list[str]]]:
        """Validate and write JSON lines inside the caller's write transaction (``public``: the shipped
        public incidents, the only lines that may carry ``PUB-`` ids)."""
        valid = self.valid_causes
        now = utc_now()
        problems: dict[str, list[str]] = {}
        parsed: list[tuple[int, dict[str, Any], dict[str, Any]]] = []
        first_line: dict[str, int] = {}
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                raw = self._redact(json.loads(line))
                record = validate_new(raw, valid, now=now, content_ids=True)
            except json.JSONDecodeError as exc:
                problems[f"line {number}"] = [f"not valid JSON: {exc.msg} (column {exc.colno})"]
                continue
            except ValidationError as exc:
                for field, msgs in exc.messages.items():
                    problems[f"line {number}: {field}"] = msgs
                continue
            if record["id"].startswith(PUBLIC_PREFIX) != public:
                problems[f"line {number}: id"] = [f"ids starting with {PUBLIC_PREFIX} are reserved for the public "
                                                  "incidents shipped with dsdoctor" if not public else
                                                  f"a public incident's id starts with {PUBLIC_PREFIX}"]
                continue
            if record["id"] in first_line:
                problems[f"line {number}: id"] = [f"{record['id']} already appears on line {first_line[record['id']]}"]
                continue
            first_line[record["id"]] = number
            parsed.append((number, raw, record))
        counts = {"added": 0, "updated": 0, "unchanged": 0}
        if problems and not skip_invalid:
            return counts, problems
        existing = self._data.fetch([r["id"] for _, _, r in parsed])
        fresh = []
        for _number, raw, record in parsed:
            old = existing.get(record["id"])
            if old is None:
                fresh.append(record)
                continue
            for key in ("occurred_at", "created_at"):  # a line without them keeps the stored ones
                if key not in raw:
                    record[key] = old[key]
            if same_content(old, record):
                counts["unchanged"] += 1
            else:
                if "updated_at" not in raw:
                    record["updated_at"] = now
                self._data.replace(record, old["version"])  # inside this write transaction
                counts["updated"] += 1
        self._data.insert_many(fresh)
        counts["added"] = len(fresh)
        return counts, problems

    def export_jsonl(self, fp: IO[str]) -> int:
        """Write every incident of this site as one JSON line (ordered by id); return how many. The public
        incidents are left out: they ship with dsdoctor and every start loads them."""
        written = 0
        with self._lock, self._data.snapshot():  # one consistent snapshot
            for record in self._data.iterate():
                if record["id"].startswith(PUBLIC_PREFIX):
                    continue
                fp.write(json.dumps(record, ensure_ascii=False) + "\n")
                written += 1
        return written

    # ------------------------------------------------------------------ search

    def search(self, q: str = "", cause: str | Iterable[str] | None = None, domain: str | Iterable[str] | None = None,
               severity: str | Iterable[str] | None = None, tag: str | Iterable[str] | None = None,
               since: str | None = None, until: str | None = None, limit: int = 20,
               cursor: str | None = None) -> dict[str, Any]:
        """Search incidents: ``{"items", "facets": {"root_cause", "domain"}, "next_cursor", "total"}``.

        A text query is ranked by relevance (then id); an empty one lists the newest first.
        Each item is a record plus ``score`` and ``highlights`` (field -> HTML with <mark>).
        Several values of one filter mean any of them; ``since``/``until`` bound occurred_at
        (dates are inclusive). Pass ``next_cursor`` back as ``cursor`` for the next page.
        """
        if not isinstance(q, str) or len(q) > search.MAX_QUERY_CHARS:
            raise ValidationError({"q": [f"must be text of at most {search.MAX_QUERY_CHARS} characters"]},
                                  "invalid search")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= search.MAX_LIMIT:
            raise ValidationError({"limit": [f"must be a whole number from 1 to {search.MAX_LIMIT}"]},
                                  "invalid search")
        filters = search.make_filters(cause, domain, severity, tag, since, until)
        q = "" if q.strip() == "*" else q.strip()
        self._data.before_read()
        with self._lock:
            found = (self._data.ranked(q, filters, limit, cursor) if q else
                     self._data.browse(filters, limit, cursor))
            records = self._data.fetch([incident_id for incident_id, _ in found["hits"]])
        wanted = found["terms"] | prefix_terms(records.values(), found.get("prefixes", ()))
        items = []
        for incident_id, score in found["hits"]:
            record = records.get(incident_id)
            if record is None:  # deleted after the index was read
                continue
            record["score"] = None if score is None else round(score, 4)
            record["highlights"] = highlights(record, wanted)
            items.append(record)
        return {"items": items, "facets": found["facets"], "next_cursor": found["next_cursor"],
                "total": found["total"], "total_is_estimate": bool(found.get("total_is_estimate", False))}

    def similar(self, id: str | None = None, *, text: str | None = None, symptoms: Iterable[str] | None = None,
                limit: int = 5) -> list[dict[str, Any]]:
        """Incidents like a stored one (``id``), a text, or a set of observed symptom IDs.

        Score in [0, 1]: the Jaccard index of the symptom sets and the share of the text's
        distinctive terms an incident contains; with both, 0.6 x symptoms + 0.4 x text
        (observed symptoms are the more precise evidence).
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 50:
            raise ValidationError({"limit": ["must be a whole number from 1 to 50"]}, "invalid request")
        symptom_list = list(symptoms) if symptoms is not None else None
        if id is not None:
            base = self.get(id)
            if text is None:
                text = "\n".join((base["title"], base["phenomenon"], base["root_cause_detail"]))
            if symptom_list is None:
                symptom_list = base["symptoms"]
        text = (text or "").strip()
        symptom_list = symptom_list or []
        if not text and not symptom_list:
            raise ValidationError({"similar": ["give an incident id, a text or symptom IDs"]}, "invalid request")
        self._data.before_read()
        with self._lock:
            version = self._data.data_version()
        if version is None:  # PostgreSQL: another replica may have changed anything since
            return self._similar(id, text, symptom_list, limit)
        key = (version, id, text[:20_000], tuple(sorted(set(symptom_list))), limit)
        found = self._similar_memo.get_or_compute(key, lambda: self._similar(id, text, symptom_list, limit))
        return [dict(item) for item in found]

    def _similar(self, id: str | None, text: str, symptom_list: list[str], limit: int) -> list[dict[str, Any]]:
        with self._lock:
            by_symptoms = self._data.symptom_matches(symptom_list, exclude=id)
            by_text = self._data.text_matches(text[:20_000], exclude=id) if text else {}
        w_symptoms = (SYMPTOM_WEIGHT if text else 1.0) if symptom_list else 0.0
        w_text = 1.0 - w_symptoms
        scores = {c: w_symptoms * by_symptoms.get(c, 0.0) + w_text * by_text.get(c, 0.0)
                  for c in set(by_symptoms) | set(by_text)}
        best = sorted(((s, i) for i, s in scores.items() if s > 0), key=lambda si: (-si[0], si[1]))[:limit]
        with self._lock:
            records = self._data.fetch([i for _, i in best])
        return [{"id": i, "title": records[i]["title"], "root_cause": records[i]["root_cause"],
                 "fix": records[i]["fix"], "status": records[i]["status"], "score": round(s, 4),
                 "symptoms": sorted(records[i]["symptoms"])}
                for s, i in best if i in records]

    # ------------------------------------------------------------------ index and statistics

    def reindex(self, procs: int | None = None) -> int:
        """Rebuild the search index (Whoosh; on PostgreSQL the rows' search columns); return how many
        incidents were indexed."""
        return self._data.reindex(procs=procs)

    def index_lag(self) -> int:
        """Changes written but not yet in the index (for /metrics; always 0 on PostgreSQL)."""
        return self._data.index_lag()

    def site_cause_counts(self) -> dict[str, int]:
        """Confirmed (resolved) incidents of this site per root cause, counted from the store every time
        (the shipped seed examples do not count)."""
        with self._lock:
            return self._data.site_cause_counts()

    def _sync(self) -> None:
        """Bring the index up to date before a write returns (it stays queued if the wait times out)."""
        self._data.sync(self._index_wait_s)


def _backend(home: Path) -> Any:
    """PostgreSQL when ``DSDOCTOR_DATABASE_URL`` names one, else the embedded files in ``home``."""
    url = database_url()
    if url is None:
        return EmbeddedIncidents(home)
    from dsdoctor.kb.incidents.pgstore import PostgresIncidents

    return PostgresIncidents(url)


def _nul_path(value: Any) -> str | None:
    """The dotted path of the first string (or key) holding U+0000, or None. Iterative: depth costs no stack."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return path
        elif isinstance(item, dict):
            for key, child in item.items():
                name = f"{path}.{key}" if path else str(key)
                if isinstance(key, str) and "\x00" in key:
                    return name
                stack.append((name, child))
        elif isinstance(item, list | tuple):
            stack.extend((f"{path}.{i}" if path else str(i), child) for i, child in enumerate(item))
    return None


def _read_lines(source: str | Path | Iterable[str]) -> list[str]:
    if isinstance(source, str | Path):
        path = Path(source)
        try:
            return path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise ValidationError({"file": [f"{path} does not exist"]}, "cannot import") from None
        except UnicodeDecodeError as exc:
            raise ValidationError({"file": [f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})"]},
                                  "cannot import") from None
    return [line.decode("utf-8") if isinstance(line, bytes) else line for line in source]


def _refuse_public_id(incident_id: str) -> None:
    if incident_id.startswith(PUBLIC_PREFIX):
        raise ValidationError({"id": [f"ids starting with {PUBLIC_PREFIX} are reserved for the public incidents "
                                      "shipped with dsdoctor"]})
