"""The corpus ships as read-only public incidents: loaded on start, searchable, never site history."""

from __future__ import annotations

import json

import pytest

from bench import corpus
from dsdoctor.kb.incidents import IncidentStore, ReadOnlyError, ValidationError
from dsdoctor.kb.incidents.seed import PUBLIC_PATH, load_public


def _public_lines():
    return [json.loads(line) for line in PUBLIC_PATH.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_shipped_public_incidents_are_the_corpus_exported():
    assert PUBLIC_PATH.read_text(encoding="utf-8") == corpus.export_incidents(), (
        "kb/data/incidents/public.jsonl is out of step with bench/corpus: run python -m bench.corpus --export-incidents")
    records = _public_lines()
    assert len(records) == len(corpus.load_cases(corpus.CORPUS_DIR))
    assert all(r["id"].startswith("PUB-") and r["source_url"].startswith("https://") for r in records)
    # each is a valid incident: one that fails validation would be skipped on load, never searchable
    from dsdoctor.kb.incidents.record import validate_new

    for r in records:
        validate_new(dict(r), None)
    # most are GitHub threads; a few are public pages (a post-mortem, a forum thread)
    assert sum(r["source_url"].startswith("https://github.com/") for r in records) > 0.9 * len(records)


@pytest.fixture
def store(dsdoctor_home, store_backend):
    with IncidentStore(dsdoctor_home) as s:
        yield s


def test_public_incidents_are_loaded_once_and_searchable(store):
    records = _public_lines()
    first = records[0]
    got = store.get(first["id"])
    assert got["source_url"] == first["source_url"] and got["root_cause"] == first["root_cause"]
    assert load_public(store) == 0  # unchanged file: nothing to do
    hits = store.search(first["title"])["items"]
    assert first["id"] in [h["id"] for h in hits]


def test_public_incidents_are_read_only(store):
    incident_id = _public_lines()[0]["id"]
    with pytest.raises(ReadOnlyError):
        store.update(incident_id, {"title": "mine now"})
    with pytest.raises(ReadOnlyError):
        store.delete(incident_id)
    with pytest.raises(ValidationError, match="reserved"):
        store.add({"id": "PUB-mine", "title": "t", "phenomenon": "p", "root_cause": "memory.fragmentation"})
    with pytest.raises(ValidationError, match="reserved"):
        store.import_jsonl([json.dumps({"id": "PUB-x", "title": "t", "phenomenon": "p",
                                        "root_cause": "memory.fragmentation"})])


def test_public_incidents_are_not_this_sites_history(store):
    assert not any(cid for cid in store.site_cause_counts()), store.site_cause_counts()
    store.add({"title": "ours", "phenomenon": "p", "root_cause": "memory.fragmentation", "status": "resolved",
               "fix": "expandable segments"})
    assert store.site_cause_counts() == {"memory.fragmentation": 1}


def test_similar_incidents_include_public_failures_with_their_thread(store):
    case = next(r for r in _public_lines() if r["root_cause"] == "comm.shm_insufficient")
    found = store.similar(text=case["phenomenon"], limit=5)
    assert case["id"] in [f["id"] for f in found]
