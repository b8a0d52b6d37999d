"""First start: load the seed incidents (kb/data/incidents/seed.jsonl) into an empty store;
every start: bring the public incidents (kb/data/incidents/public.jsonl) up to date.

The store remembers that it was seeded (``store_meta.seeded``), so deleting every incident
later does not bring the seed back. Several workers starting at once seed exactly once: the
check and the load share one write transaction. A seed line the knowledge base rejects (for
example a cause it no longer has) is skipped with a warning instead of blocking the start.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from dsdoctor.kb.incidents.record import utc_now

if TYPE_CHECKING:
    from dsdoctor.kb.incidents.store import IncidentStore

SEED_PATH = Path(__file__).resolve().parent.parent / "data" / "incidents" / "seed.jsonl"
#: real public failures with their issue threads, exported from bench/corpus (read-only incidents)
PUBLIC_PATH = SEED_PATH.with_name("public.jsonl")
log = logging.getLogger("dsdoctor.incidents")


def load_seed_if_new(store: IncidentStore, path: Path = SEED_PATH) -> int:
    """Seed a store that was never seeded and holds no incidents; return how many were added."""
    data = store._data
    if data.meta("seeded") is not None:
        return 0
    if not path.exists():
        log.warning("seed file %s is missing; starting with an empty incident store", path)
        return 0
    lines = path.read_text(encoding="utf-8").splitlines()
    with store._lock, data.transaction():
        data.exclusive("incidents-seed")
        if data.meta("seeded") is not None:
            return 0  # another worker seeded meanwhile
        added = 0
        if not data.any_incident():
            counts, problems = store._import_locked(lines, skip_invalid=True)
            added = counts["added"]
            for where, messages in problems.items():
                log.warning("seed %s: %s: %s", path.name, where, " ".join(messages))
        data.set_meta("seeded", utc_now())
    if added:
        store._sync()
    return added


def load_public(store: IncidentStore, path: Path = PUBLIC_PATH) -> int:
    """Add or refresh the shipped public incidents (``PUB-`` ids, read-only) when the file changed
    since the store last loaded it; return how many were added or updated."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    rows = store._data
    if rows.meta("public") == digest:
        return 0
    with store._lock, rows.transaction():
        rows.exclusive("incidents-seed")
        if rows.meta("public") == digest:
            return 0  # another worker loaded it meanwhile
        counts, problems = store._import_locked(data.decode("utf-8").splitlines(), skip_invalid=True, public=True)
        for where, messages in problems.items():
            log.warning("public incidents %s: %s: %s", path.name, where, " ".join(messages))
        rows.set_meta("public", digest)
    changed = counts["added"] + counts["updated"]
    if changed:
        store._sync()
    return changed
