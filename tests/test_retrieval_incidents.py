"""Public incidents as retrieval documents: they speak for their root cause, and a benchmark can hide
any of them (by id or by thread, however the thread's URL is spelled) from the votes and the term
statistics alike."""

from __future__ import annotations

import dataclasses
import json

import pytest

from dsdoctor.kb import retrieval


def _incident(ident: str, cause: str, text: str, url: str) -> dict:
    return {"id": ident, "title": "t", "phenomenon": text, "root_cause": cause, "root_cause_detail": "",
            "source_url": url, "author": "public thread o/r#0"}


@pytest.fixture
def kb_with_incidents(real_kb, tmp_path, monkeypatch):
    cause, other = sorted(real_kb.causes)[:2]
    rows = [_incident("PUB-c9-one", cause, "quuxbrick flarnish on every rank", "https://github.com/Own/Repo/issues/5"),
            _incident("PUB-c9-two", cause, "quuxbrick again after a restart", "https://github.com/own/repo/issues/5#x"),
            _incident("PUB-c9-three", other, "plain unrelated words about a different failure", "https://github.com/o/r/issues/6")]
    path = tmp_path / "public.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    monkeypatch.setattr(retrieval, "INCIDENTS_PATH", path)
    return dataclasses.replace(real_kb, cache={}), cause


QUERY = "quuxbrick flarnish keeps happening when training"


def test_thread_key_is_one_spelling_of_an_issue_thread():
    same = {retrieval.thread_key(u) for u in ("https://github.com/Own/Repo/issues/5", "https://github.com/own/repo/pull/5/",
                                               "own/repo#5", "http://www.github.com/own/repo/issues/5#issuecomment-1")}
    assert same == {"own/repo#5"}
    assert retrieval.thread_key("own/repo#6") != retrieval.thread_key("own/repo#5")


def test_an_incident_speaks_for_its_root_cause(kb_with_incidents):
    kb, cause = kb_with_incidents
    without = retrieval.log_factors(kb, QUERY, 3.0, incident_weight=0.0)
    assert without.get(cause, -3.0) < 0.0  # the cause's own texts do not hold these words
    with_incidents = retrieval.log_factors(kb, QUERY, 3.0, incident_weight=1.0)
    assert with_incidents[cause] == 0.0 and max(with_incidents.values()) == 0.0


def test_hiding_one_incident_by_id_leaves_its_thread_mate(kb_with_incidents):
    kb, cause = kb_with_incidents
    full = retrieval.scores(kb, QUERY, incident_weight=1.0)[cause]
    with retrieval.excluding({"c9-one"}):  # the case id, without the public prefix
        fewer = retrieval.scores(kb, QUERY, incident_weight=1.0)[cause]
    assert 0.0 < fewer < full
    assert retrieval.scores(kb, QUERY, incident_weight=1.0)[cause] == full  # outside the block: all back


def test_hiding_a_thread_hides_every_incident_from_it_and_their_words(kb_with_incidents):
    kb, cause = kb_with_incidents
    assert "flarnish" in str(retrieval._index(kb, 1.0).idf)
    with retrieval.excluding({"own/repo#5"}):
        index = retrieval._index(kb, 1.0)
        assert not any("flarnish" in t or "quuxbrick" in t for t in index.idf)  # gone from the statistics too
        assert retrieval.log_factors(kb, QUERY, 3.0, incident_weight=1.0).get(cause, -3.0) < 0.0
    with retrieval.excluding({"https://GitHub.com/own/repo/issues/5"}):
        assert retrieval.log_factors(kb, QUERY, 3.0, incident_weight=1.0).get(cause, -3.0) < 0.0
    assert retrieval.log_factors(kb, QUERY, 3.0, incident_weight=1.0)[cause] == 0.0


def test_the_shipped_incidents_all_vote_for_a_cause_the_knowledge_base_has(real_kb):
    incidents = retrieval._incidents(dataclasses.replace(real_kb, cache={}))
    assert incidents and all(i.cause in real_kb.causes and i.terms for i in incidents)
    # every one is tied to its thread: a GitHub owner/repo#N, or a public page's address
    assert all(any("#" in k or "/" in k for k in i.keys) for i in incidents)
    pages = [i for i in incidents if not any("#" in k for k in i.keys)]
    assert all(retrieval.thread_key("https://www." + k) == k for i in pages for k in i.keys if "/" in k)
