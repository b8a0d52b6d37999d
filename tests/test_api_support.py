"""Shared fixtures and helpers of the API tests (no tests here).

``api_app`` is the real application with the small NaN knowledge base of tests/kbfactory.py and
a stand-in for the rules layer (``fake_diagnose``): the engine, ranking and planner are real,
only log reading is reduced to a few keywords, so the API layer is tested on its own.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from dsdoctor.kb.errors import DsdoctorError
from dsdoctor.rules.model import Extraction, FirstError, LineRef, ObservedSymptom
from tests.kbfactory import nan_kb

RANK = re.compile(r"\[rank(\d+)\]")
#: keyword -> symptom of nan_kb
KEYWORDS = {"loss is nan": "s.loss_nan", "all ranks": "s.nan_all_ranks", "overflow": "s.fp16_overflow_repeated",
            "only rank": "s.nan_subset_ranks"}


def fake_diagnose(evidence: dict[str, Any], *, kb, log_files=(), site_counts=None, similar=None, lang="en",
                  top=5, progress=None, diagnosis_id=None) -> dict[str, Any]:
    """kb.diagnosis.diagnose with a keyword matcher in place of rules.extract."""
    from dsdoctor.kb.diagnosis import diagnose_extraction, with_job

    if not (evidence.get("description") or evidence.get("logs") or log_files):
        raise DsdoctorError("evidence needs at least one of 'description' or 'logs'")
    extraction = Extraction()
    order = 0
    texts = [(log["source"], log["text"]) for log in evidence.get("logs") or []]
    texts.append(("description", evidence.get("description") or ""))
    for source, text in texts:
        extraction.bytes_processed += len(text.encode("utf-8"))
        for lineno, line in enumerate(text.splitlines(), 1):
            extraction.lines_processed += 1
            order += 1
            rank_match = RANK.search(line)
            rank = int(rank_match.group(1)) if rank_match else None
            for keyword, sid in KEYWORDS.items():
                if keyword in line.lower():
                    seen = extraction.symptoms.setdefault(sid, ObservedSymptom(sid, first_order=order))
                    seen.count += 1
                    if rank is not None:
                        seen.ranks.add(rank)
                    seen.lines.append(LineRef(source, lineno, line[:500], rank=rank, rule="test.keyword"))
                    if extraction.first_error is None:
                        extraction.first_error = FirstError(rank, None, None, line[:500], source, lineno, sid)
    result = diagnose_extraction(extraction, evidence.get("observations"), kb=kb, site_counts=site_counts,
                                 similar=similar, lang=lang, top=top, diagnosis_id=diagnosis_id,
                                 description=evidence.get("description") or "")
    return with_job(result, evidence)


NAN_LOG = "[rank3]: step 120 loss is nan\n[rank3]: only rank 3 diverged\n[rank0]: step 120 ok\n"
EVIDENCE = {"description": "training diverged", "logs": [{"source": "rank3", "text": NAN_LOG}]}


def make_app(home: Path, **config: Any):
    """The API app on the test knowledge base, with a data directory of its own."""
    from dsdoctor.api.app import create_app

    settings = {"TESTING": True, "DSDOCTOR_HOME": str(home), "DSDOCTOR_KB": nan_kb(),
                "DSDOCTOR_DIAGNOSE": fake_diagnose, "DSDOCTOR_SEED_INCIDENTS": False, "DSDOCTOR_PRELOAD": False}
    settings.update(config)
    return create_app(settings)


@pytest.fixture
def api_app(dsdoctor_home: Path):
    app = make_app(dsdoctor_home)
    yield app
    app.extensions["dsdoctor"]["services"].close()


@pytest.fixture
def client(api_app):
    return api_app.test_client()


def assert_problem(response, status: int, *, field: str | None = None) -> dict[str, Any]:
    """Assert an RFC 9457 problem document with ``status`` (and an error naming ``field``)."""
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "application/problem+json"
    body = response.get_json(force=True)
    assert set(body) >= {"type", "title", "status", "detail", "instance"}
    assert body["status"] == status
    assert isinstance(body["detail"], str) and body["detail"]
    assert "Traceback" not in response.get_data(as_text=True)
    if field is not None:
        assert any(e["field"] == field for e in body.get("errors", [])), body
        for error in body["errors"]:
            assert set(error) == {"field", "location", "message"}
    return body
