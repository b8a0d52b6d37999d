"""The fast BM25 path finds exactly what Whoosh's matchers find, and ranks the same way."""

from __future__ import annotations

import pytest

from dsdoctor.kb.incidents import IncidentStore, fastscore
from dsdoctor.kb.incidents.search import parse_query

TEXTS = [
    ("A", "Watchdog timeout while rank 0 saves a checkpoint", "ALLREDUCE timed out; 看门狗超时"),
    ("B", "checkpoint save to NFS took 40 minutes", "other ranks hit the NCCL watchdog timeout"),
    ("C", "显存碎片导致 OOM", "reserved but unallocated memory; checkpoint fine"),
    ("D", "GPU fell off the bus", "Xid 79 on gpu-b07 during checkpoint save"),
    ("E", "NCCL picked docker0", "first collective timed out; NCCL_SOCKET_IFNAME fixed it"),
]
PLAIN = ["checkpoint", "watchdog timeout", "checkpoint NOT nfs", "Xid OR docker0", "显存碎片",
         "(checkpoint OR oom) NOT xid", "title:checkpoint", "NCCL_SOCKET_IFNAME", "missingword"]


@pytest.fixture
def store(dsdoctor_home):
    with IncidentStore(dsdoctor_home, seed=False) as s:
        for rid, title, phenomenon in TEXTS:  # one commit each: several segments
            s.add({"id": rid, "title": title, "phenomenon": phenomenon, "root_cause": "memory.fragmentation"})
        yield s


def whoosh_and_fast(store, q, allowed=None):
    searcher = store.indexer.searcher()
    parsed = parse_query(searcher, q)
    fast = fastscore.score_all(searcher, parsed, allowed)
    slow = {docnum: score for score, docnum in searcher.search(parsed, filter=allowed, limit=None).top_n}
    ids = {d: fields["id"] for d, fields in searcher.reader().iter_docs()}
    return fast, slow, ids


@pytest.mark.parametrize("q", PLAIN)
def test_fast_path_matches_the_same_documents_and_order(store, q):
    fast, slow, ids = whoosh_and_fast(store, q)
    assert fast is not None, f"{q!r} should take the fast path"
    assert set(fast) == set(slow)
    order = lambda scores: [ids[d] for d, _ in sorted(scores.items(), key=lambda kv: (-kv[1], ids[kv[0]]))]  # noqa: E731
    assert order(fast) == order(slow)
    for d in fast:
        assert fast[d] == pytest.approx(slow[d], rel=0.02)


def test_deleted_documents_are_left_out(store):
    store.delete("B")
    fast, slow, ids = whoosh_and_fast(store, "checkpoint")
    assert "B" not in {ids[d] for d in fast} and set(fast) == set(slow)


def test_filters_restrict_the_fast_path(store):
    searcher = store.indexer.searcher()
    keep = {d for d, fields in searcher.reader().iter_docs() if fields["id"] in ("A", "C")}
    fast, slow, ids = whoosh_and_fast(store, "checkpoint", keep)
    assert {ids[d] for d in fast} == {"A", "C"} and set(fast) == set(slow)


@pytest.mark.parametrize("q", ['"watchdog timeout"', "check*", "root_cause:memory.fragmentation", "timeout^2"])
def test_other_queries_fall_back_to_whoosh(store, q):
    searcher = store.indexer.searcher()
    assert fastscore.score_all(searcher, parse_query(searcher, q), None) is None
    assert store.search(q)["total"] >= 1


@pytest.mark.parametrize("q", ["checkpoint timeout", "watchdog checkpoint", "checkpoint NOT nfs", "显存碎片 checkpoint"])
def test_looking_up_a_common_term_for_few_candidates_gives_the_same_result(store, monkeypatch, q):
    store.delete("E")  # deletions in play too
    monkeypatch.setattr(fastscore, "LOOKUP_RATIO", 0.01)  # look every later term up document by document
    fast, slow, _ids = whoosh_and_fast(store, q)
    assert set(fast) == set(slow)
    for d in fast:
        assert fast[d] == pytest.approx(slow[d], rel=1e-6)
