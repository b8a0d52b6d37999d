"""Incident store: completed incidents in SQLite, searchable in Chinese and English.

SQLite (in ``DSDOCTOR_HOME``) is the source of truth; the Whoosh full-text index is derived
from it and can be rebuilt at any time. Start with :class:`IncidentStore`::

    from dsdoctor.kb.incidents import IncidentStore
    store = IncidentStore(home, valid_causes={"memory.fragmentation", ...})
    store.add({"title": "...", "phenomenon": "...", "root_cause": "memory.fragmentation"})
    store.search("显存碎片", domain="memory")

Errors subclass :class:`kb.errors.DsdoctorError`; ``http_status`` says how the REST layer
answers them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dsdoctor.kb.errors import DsdoctorError

if TYPE_CHECKING:
    from dsdoctor.kb.incidents.store import IncidentStore

__all__ = ["ConflictError", "IncidentError", "IncidentStore", "NotFoundError", "ReadOnlyError", "StaleVersionError",
           "ValidationError"]


class IncidentError(DsdoctorError):
    """Base class of incident-store errors."""

    http_status = 400


class ValidationError(IncidentError):
    """A record (or query) failed validation; ``messages`` maps field -> list of messages."""

    http_status = 422

    def __init__(self, messages: dict[str, list[str]], what: str = "invalid incident"):
        self.messages = {str(k): [str(m) for m in v] for k, v in messages.items()}
        details = "; ".join(f"{field}: {' '.join(m.rstrip('.') for m in msgs)}"
                            for field, msgs in self.messages.items())
        super().__init__(f"{what}: {details}")


class ConflictError(IncidentError):
    """An incident with this id already exists."""

    http_status = 409

    def __init__(self, incident_id: str):
        self.incident_id = incident_id
        super().__init__(f"incident {incident_id!r} already exists (use update, or import to replace it)")


class StaleVersionError(IncidentError):
    """The incident changed since the version the caller read (a lost update refused)."""

    http_status = 412

    def __init__(self, incident_id: str, expected: int, current: int):
        self.incident_id = incident_id
        self.expected = expected
        self.current = current
        super().__init__(f"incident {incident_id!r} is at version {current}, not {expected}: it changed since "
                         "it was read; read it again and re-apply the change")


class ReadOnlyError(IncidentError):
    """Public incidents (shipped with dsdoctor, ids ``PUB-...``) are read-only."""

    http_status = 403

    def __init__(self, incident_id: str):
        self.incident_id = incident_id
        super().__init__(f"incident {incident_id!r} is a public incident shipped with dsdoctor and is read-only; "
                         "record your own incident instead")


class NotFoundError(IncidentError):
    """No incident has this id."""

    http_status = 404

    def __init__(self, incident_id: str):
        self.incident_id = incident_id
        super().__init__(f"no incident with id {incident_id!r}")


def __getattr__(name: str) -> Any:
    """Import the store lazily so ``from dsdoctor.kb.incidents import ValidationError`` stays light."""
    if name == "IncidentStore":
        from dsdoctor.kb.incidents.store import IncidentStore

        return IncidentStore
    raise AttributeError(name)
