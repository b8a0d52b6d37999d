"""What the views use, built once per process by ``create_app``: the knowledge base, the diagnose
function, the incident store and the per-request diagnoses store."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import current_app

from dsdoctor.api.auth import Authenticator
from dsdoctor.api.errors import ApiError
from dsdoctor.kb.errors import DsdoctorError, KnowledgeError
from dsdoctor.kb.model import KnowledgeBase
from dsdoctor.kb.storage.diagnoses import DiagnosisStore

log = logging.getLogger("dsdoctor.api")
SITE_COUNTS_TTL_S = 5.0


class Services:
    """Process-wide resources of one app; tests inject a knowledge base or a diagnose function."""

    def __init__(self, home: Path, auth: Authenticator, *, kb: KnowledgeBase | None = None,
                 diagnose: Callable[..., dict[str, Any]] | None = None, seed_incidents: bool = True):
        self.home = home
        self.auth = auth
        self._kb = kb
        self._diagnose = diagnose
        self._seed = seed_incidents
        self._incidents: Any = None
        self._incidents_error: str | None = None
        self._lock = threading.Lock()
        self._site_counts: tuple[float, dict[str, int]] | None = None
        self.warm = threading.Event()  #: set once the rules are compiled and the incident store is open
        self.warm.set()

    # -------------------------------------------------------------- knowledge

    def kb(self) -> KnowledgeBase:
        """The knowledge base (loaded once; a load error becomes a 503 problem)."""
        if self._kb is not None:
            return self._kb
        from dsdoctor.kb.loader import get_kb

        return get_kb()

    def kb_status(self) -> tuple[bool, str]:
        try:
            kb = self.kb()
        except KnowledgeError as exc:
            return False, str(exc)
        return True, f"{len(kb.causes)} causes, {len(kb.symptoms)} symptoms, {len(kb.experiments)} experiments"

    def diagnose(self, evidence: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Run the diagnosis pipeline with site priors and similar incidents."""
        if self._diagnose is not None:
            return self._diagnose(evidence, **kwargs)
        from dsdoctor.kb.diagnosis import diagnose

        return diagnose(evidence, **kwargs)

    # -------------------------------------------------------------- incidents

    def incidents(self) -> Any:
        """The incident store (opened once per process); 503 when it cannot be opened."""
        if self._incidents is None:
            with self._lock:
                if self._incidents is None:
                    try:
                        from dsdoctor.api.metrics import record_redactions
                        from dsdoctor.kb.incidents.store import IncidentStore

                        self._incidents = IncidentStore(self.home, valid_causes=self._valid_causes, seed=self._seed,
                                                        on_redacted=record_redactions)
                        self._incidents_error = None
                    except (ImportError, DsdoctorError, OSError) as exc:
                        self._incidents_error = f"{type(exc).__name__}: {exc}"
                        log.warning("incident store unavailable: %s", self._incidents_error)
                        raise ApiError(503, f"the incident store is unavailable: {self._incidents_error}",
                                       title="Incident store unavailable") from None
        return self._incidents

    def _valid_causes(self) -> list[str]:
        return list(self.kb().causes)

    def incidents_or_none(self) -> Any:
        try:
            return self.incidents()
        except ApiError:
            return None

    def site_counts(self) -> dict[str, int] | None:
        """Resolved incidents per cause (cached a few seconds per process)."""
        now = time.monotonic()
        cached = self._site_counts
        if cached is not None and now - cached[0] < SITE_COUNTS_TTL_S:
            return cached[1]
        store = self.incidents_or_none()
        if store is None:
            return None
        try:
            counts = store.site_cause_counts()
        except Exception:  # the ranking must not fail because the history is unreadable
            log.exception("site_cause_counts failed")
            return None
        self._site_counts = (now, counts)
        return counts

    def similar(self, symptoms: list[str], text: str) -> list[dict[str, Any]]:
        """Similar past incidents for a diagnosis (empty when the store is unavailable)."""
        if not symptoms and not (text or "").strip():
            return []
        store = self.incidents_or_none()
        if store is None:
            return []
        try:
            return store.similar(symptoms=symptoms, text=text or None, limit=10)
        except Exception:
            log.exception("similar incidents failed")
            return []

    def close(self) -> None:
        """Close the incident store and this thread's database connection."""
        if self._incidents is not None:
            self._incidents.close()
            self._incidents = None
        DiagnosisStore(self.home).close()

    def diagnoses(self) -> DiagnosisStore:
        """The diagnoses store (a per-thread connection that stays open between requests)."""
        return DiagnosisStore(self.home)


def services() -> Services:
    """The Services of the current app."""
    return current_app.extensions["dsdoctor"]["services"]
