"""Create and re-rank stored diagnoses: the one implementation behind the REST API, the web pages
and chat-ops (redact, diagnose with site priors and similar incidents, store, keep history)."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from dsdoctor.api import jsontext, metrics
from dsdoctor.api.errors import ApiError, field_error, validation_error
from dsdoctor.api.services import services
from dsdoctor.kb.redact import Redactions, redact_value
from dsdoctor.kb.storage.diagnoses import StoredDiagnosis

MAX_RETRIES = 5


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def redact(evidence: dict[str, Any]) -> tuple[dict[str, Any], Redactions]:
    """``evidence`` without secrets, and what was removed (counted in the metrics)."""
    found = Redactions()
    clean = redact_value(evidence, found)
    metrics.record_redactions(dict(found.counts))
    return clean, found


def _run(evidence: dict[str, Any], *, lang: str, top: int, diagnosis_id: str | None) -> dict[str, Any]:
    svc = services()
    started = time.perf_counter()
    result = svc.diagnose(evidence, kb=svc.kb(), site_counts=svc.site_counts(), similar=svc.similar,
                          lang=lang, top=top, diagnosis_id=diagnosis_id)
    metrics.record_diagnosis(result, time.perf_counter() - started)
    return result


def stored(diagnosis_id: str) -> StoredDiagnosis:
    stored = services().diagnoses().get(diagnosis_id)
    if stored is None:
        raise ApiError(404, f"no diagnosis with id {diagnosis_id!r}", title="Not Found")
    return stored


def diagnose_and_store(evidence: dict[str, Any], *, lang: str = "en", top: int = 5) -> tuple[dict[str, Any], bytes]:
    """Redact, diagnose and store validated evidence; return the diagnosis and its JSON (UTF-8 bytes).

    The one implementation behind POST /v1/diagnoses (the web pages and chat-ops can call it too;
    validate first with ``api.schemas.EvidenceSchema``)."""
    clean, found = redact(evidence)
    result = _run(clean, lang=lang, top=top, diagnosis_id=None)
    created = _now()
    result["created_at"] = created
    result["updated_at"] = created
    result["observation_history"] = []
    if found.total:
        result.setdefault("warnings", []).append(found.summary())
    text = jsontext.dumps_bytes(result)
    services().diagnoses().add(result, clean, lang=lang, top=top, created_at=created, diagnosis_json=text)
    return result, text


def observe_and_store(current: StoredDiagnosis, new: dict[str, Any], *, lang: str | None = None
                      ) -> tuple[dict[str, Any], bytes]:
    """Merge new observations / logs / description into a stored diagnosis' evidence, re-run it under
    the same id, keep the history; return the new diagnosis and its JSON (UTF-8 bytes).

    Concurrent updates are merged: the write is conditional on the version read, and on a
    collision the latest stored evidence is re-read and the new facts applied on top (409 after
    ``MAX_RETRIES``). Validate ``new`` first with ``api.schemas.ObservationsRequestSchema``."""
    new, found = redact(new)
    for _attempt in range(MAX_RETRIES):
        evidence = dict(current.evidence)
        if new.get("observations"):
            evidence["observations"] = {**(evidence.get("observations") or {}), **new["observations"]}
        if new.get("logs"):
            evidence["logs"] = [*(evidence.get("logs") or []), *new["logs"]]
        if (new.get("description") or "").strip():
            evidence["description"] = "\n".join(p for p in (evidence.get("description"), new["description"]) if p)
        result = _run(evidence, lang=lang or current.lang, top=current.top, diagnosis_id=current.id)
        before = (current.diagnosis.get("causes") or [{}])[0].get("id")
        after = (result.get("causes") or [{}])[0].get("id")
        history = [*current.history, {
            "at": _now(), "observations": new.get("observations") or {},
            "logs_added": [log["source"] for log in new.get("logs") or []],
            "description_added": bool((new.get("description") or "").strip()),
            "top_cause_before": before, "top_cause_after": after,
        }]
        result["created_at"] = current.created_at
        result["updated_at"] = _now()
        result["observation_history"] = history
        if found.total:
            result.setdefault("warnings", []).append(found.summary())
        text = jsontext.dumps_bytes(result)
        if services().diagnoses().replace(current, result, evidence, history, diagnosis_json=text):
            return result, text
        current = stored(current.id)  # someone else added observations meanwhile: merge onto theirs
    raise ApiError(409, f"diagnosis {current.id!r} kept changing while these observations were applied; retry",
                   title="Conflict")


def incident_from_diagnosis(diagnosis: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """An incident record pre-filled from a diagnosis (top cause, its first fix, symptoms, scope)."""
    causes = diagnosis.get("causes") or []
    if not causes and "root_cause" not in overrides:
        raise validation_error([field_error("root_cause", "the diagnosis ranks no cause; send the root_cause "
                                            "the incident had")])
    top = causes[0] if causes else {}
    first = diagnosis.get("first_error") or {}
    summary = (diagnosis.get("summary") or {}).get("text", "")
    where = []
    if first.get("rank") is not None:
        where.append(f"rank {first['rank']}")
    if first.get("node"):
        where.append(f"node {first['node']}")
    phenomenon = "\n".join(p for p in (
        (f"First error ({', '.join(where)}): " if where else "First error: ") + first["line"] if first.get("line") else "",
        summary,
    ) if p) or summary or "see the diagnosis"
    symptoms = [s["id"] for s in diagnosis.get("symptoms") or [] if s.get("id", "").startswith("s.")]
    fix = ""
    if top.get("fixes"):
        first_fix = top["fixes"][0]
        fix = first_fix.get("title", "") + (f"\n{first_fix['snippet']}" if first_fix.get("snippet") else "")
    title = top.get("title") or "Diagnosed failure"
    if first.get("line"):
        title = f"{title}: {first['line'][:120]}"
    record: dict[str, Any] = {
        "title": title[:300],
        "phenomenon": phenomenon[:20_000],
        "scope": f"{diagnosis.get('scope', 'unknown')}" + (f" ({', '.join(where)} first)" if where else ""),
        "root_cause": top.get("id", ""),
        "fix": fix[:20_000],
        "symptoms": symptoms,
        "diagnosis_id": diagnosis["id"],
        "evidence_summary": "; ".join(f"{s.get('title', s['id'])} [{s['id']}]"
                                      for s in (diagnosis.get("symptoms") or [])[:20])[:20_000],
    }
    record.update(overrides)
    return record




def create(evidence: dict[str, Any], *, lang: str = "en", top: int = 5) -> dict[str, Any]:
    """Diagnose and store validated evidence; the stored diagnosis."""
    return diagnose_and_store(evidence, lang=lang, top=top)[0]


def observe(diagnosis_id: str, new: dict[str, Any], *, lang: str | None = None) -> dict[str, Any]:
    """Add observations / logs / a description to a stored diagnosis and re-rank it (404 if unknown)."""
    return observe_and_store(stored(diagnosis_id), new, lang=lang)[0]
