"""Move the incidents of an embedded store (``incidents.db``) into PostgreSQL without loss.

Records keep their ids, times and versions; the store's memory of having been seeded and of the
public file it loaded goes along, so the PostgreSQL store neither seeds again nor reloads. Copying
again adds nothing (an id already there is left alone). After the copy every source record is read
back and compared, and a sample is searched for by the words of its own title, so the counts
printed are checked, not hoped.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from dsdoctor.kb.incidents.embedded import EmbeddedIncidents
from dsdoctor.kb.incidents.pgsearch import translate
from dsdoctor.kb.incidents.pgstore import PostgresIncidents
from dsdoctor.kb.storage.backend import StorageError

META_KEYS = ("seeded", "public")
SEARCH_SAMPLE = 20
_OPERATORS = {"AND", "OR", "NOT", "ANDNOT", "ANDMAYBE", "TO"}


def _title_query(title: str) -> str:
    """The words of a title as a plain query (no operator, field or quote that could change it)."""
    return " ".join(w for w in re.findall(r"[^\W_]+", title) if w not in _OPERATORS)


def searchable(dest: PostgresIncidents, records: list[dict[str, Any]]) -> int:
    """How many of ``records`` a search for the words of their own title finds in PostgreSQL."""
    found = 0
    for record in records:
        q = _title_query(record["title"])
        if not q:
            found += 1  # nothing to search for; the row was verified already
            continue
        where = translate(q)
        hit = dest.backend.execute(f"SELECT count(*) FROM incidents WHERE ({where.where}) AND id = ?",
                                   [*where.params, record["id"]]).fetchone()[0]
        found += int(hit)
    return found


def copy_incidents(source_home: Path, dest_url: str) -> dict[str, int]:
    """Copy every incident of ``source_home`` into ``dest_url``; return source, copied, already_there,
    verified (identical once read back) and searchable (of the sample searched)."""
    if not EmbeddedIncidents.exists_in(source_home):
        return {"source": 0, "copied": 0, "already_there": 0, "verified": 0, "searchable": 0, "searched": 0}
    source = EmbeddedIncidents(source_home)
    try:
        with source.snapshot():
            records = list(source.iterate())
            meta = {key: source.meta(key) for key in META_KEYS}
    finally:
        source.close()
    dest = PostgresIncidents(dest_url)
    before = dest.count()
    for start in range(0, len(records), 500):
        chunk = records[start : start + 500]
        try:
            with dest.transaction():
                dest.insert_many(chunk, on_conflict=" ON CONFLICT (id) DO NOTHING")
        except dest.backend.data_errors as exc:  # e.g. a NUL character an old embedded store accepted
            raise StorageError(f"incidents: PostgreSQL refused one of {chunk[0]['id']} ... {chunk[-1]['id']}: "
                               f"{str(exc).strip()}; fix that incident in the embedded store and copy again") from None
    with dest.transaction():
        for key, value in meta.items():
            if value is not None and dest.meta(key) is None:
                dest.set_meta(key, value)
    copied = dest.count() - before
    verified = 0
    for start in range(0, len(records), 500):
        chunk = records[start : start + 500]
        got = dest.fetch([r["id"] for r in chunk])
        verified += sum(1 for r in chunk if got.get(r["id"]) == r)
    step = max(1, len(records) // SEARCH_SAMPLE)
    sample = records[::step][:SEARCH_SAMPLE]
    report = {"source": len(records), "copied": copied, "already_there": len(records) - copied, "verified": verified,
              "searchable": searchable(dest, sample), "searched": len(sample)}
    if verified != len(records):
        raise StorageError(f"incidents: {len(records) - verified} of {len(records)} differ in PostgreSQL (the same "
                           "id with other content was there before the copy)")
    if report["searchable"] != report["searched"]:
        raise StorageError(f"incidents: copied, but only {report['searchable']} of {report['searched']} sampled "
                           "incidents are found by the words of their own title; run `dsdoctor incidents reindex` "
                           "with DSDOCTOR_DATABASE_URL set")
    return report
