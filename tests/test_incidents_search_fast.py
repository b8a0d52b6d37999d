"""Large match sets: a pool of likely leaders is ranked, while total, facets and paging stay whole."""

from __future__ import annotations

import json

import pytest

from dsdoctor.kb.incidents import IncidentStore, fastscore, search
from dsdoctor.kb.incidents.search import parse_query

CAUSES = ["comm.slow_rank_exceeds_timeout", "memory.fragmentation", "hardware.gpu_lost"]


@pytest.fixture
def big(dsdoctor_home):
    """60 incidents that all say "rank"; a few say it in the title or often (the leaders)."""
    with IncidentStore(dsdoctor_home, seed=False) as s:
        lines = []
        for i in range(60):
            title = f"rank {i} stalls" if i % 20 == 7 else f"case {i}"
            phenomenon = "rank rank rank timeout" if i % 15 == 4 else f"rank timeout step {i} " + "filler " * (i % 9)
            lines.append({"id": f"R-{i:02d}", "title": title, "phenomenon": phenomenon,
                          "root_cause": CAUSES[i % 3], "occurred_at": f"2024-02-{1 + i % 9:02d}"})
        s.import_jsonl([json.dumps(r) for r in lines])
        yield s


@pytest.fixture
def small_pool(monkeypatch):
    """Pool above 10 matches, 5 leaders per term (the defaults are 20,000 and 2,000)."""
    monkeypatch.setattr(search, "POOL_ABOVE", 10)
    monkeypatch.setattr(search, "KEEP_KEYS", 5)


def ids(result):
    return [item["id"] for item in result["items"]]


def test_small_match_sets_score_every_match(big):
    searcher = big.indexer.searcher()
    parsed = parse_query(searcher, "rank")
    top = fastscore.score_top(searcher, parsed, None, 1000, 5)
    assert top is not None and not top.pooled
    assert top.scores == fastscore.score_all(searcher, parsed, None)
    assert set(top.scores) == top.matches


def test_pool_holds_the_leaders_and_every_match_is_counted(big):
    searcher = big.indexer.searcher()
    parsed = parse_query(searcher, "rank")
    exact = fastscore.score_all(searcher, parsed, None)
    top = fastscore.score_top(searcher, parsed, None, 10, 5)
    assert top.pooled and top.matches == set(exact)
    assert 5 <= len(top.scores) < len(exact)
    assert all(top.scores[d] == exact[d] for d in top.scores)  # same BM25, only fewer documents
    leaders = sorted(exact, key=lambda d: -exact[d])[:3]
    assert set(leaders) <= set(top.scores)


def test_pooled_search_keeps_total_facets_and_leaders(big, small_pool, monkeypatch):
    pooled = big.search("rank", limit=3)
    big.indexer.searcher().__dict__.pop("_dsdoctor_cache", None)  # rankings are cached per query
    monkeypatch.setattr(search, "POOL_ABOVE", 10_000_000)
    whole = big.search("rank", limit=60)
    assert whole["total"] == pooled["total"] == 60
    assert pooled["facets"] == whole["facets"] == {
        "root_cause": {c: 20 for c in sorted(CAUSES)}, "domain": {"comm": 20, "hardware": 20, "memory": 20}}
    assert ids(pooled) == ids(whole)[:3]


def test_pooled_pages_are_complete_without_repeats(big, small_pool):
    seen, cursor = [], None
    for _ in range(100):
        page = big.search("rank", limit=4, cursor=cursor)
        assert page["total"] == 60
        seen.extend(ids(page))
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 60
    first = big.search("rank", limit=4)
    assert ids(big.search("rank", limit=4, cursor=first["next_cursor"])) == seen[4:8]


def test_and_query_pool_only_holds_matches(big, small_pool):
    result = big.search("rank timeout", limit=200)
    assert result["total"] == 60 and len(result["items"]) == 60
    assert len(set(ids(result))) == 60


@pytest.fixture
def phrases(dsdoctor_home):
    """40 incidents hold "out" and "memory"; only every fourth says "out of memory"."""
    with IncidentStore(dsdoctor_home, seed=False) as s:
        lines = [{"id": f"M-{i:02d}", "title": f"case {i}",
                  "phenomenon": "CUDA out of memory" if i % 4 == 0 else "memory ran out after step",
                  "root_cause": CAUSES[i % 3], "occurred_at": "2024-05-01"} for i in range(40)]
        s.import_jsonl([json.dumps(r) for r in lines])
        yield s


def test_common_phrase_is_checked_on_a_pool_and_its_total_is_marked_an_estimate(phrases, monkeypatch):
    monkeypatch.setattr(search, "PHRASE_POOL_ABOVE", 10)
    monkeypatch.setattr(search, "PHRASE_POOL", 8)
    found = search.ranked(phrases.indexer, '"out of memory"', search.make_filters(), 20, None)
    assert found["total_is_estimate"] is True
    assert {hit for hit, _ in found["hits"]} <= {f"M-{i:02d}" for i in range(0, 40, 4)}
    assert found["hits"] and 1 <= found["total"] <= 40
    seen, cursor = [], None
    while True:  # paging still reaches every real phrase match exactly once
        page = phrases.search('"out of memory"', limit=3, cursor=cursor)
        seen.extend(ids(page))
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == [f"M-{i:02d}" for i in range(0, 40, 4)]


def test_rare_phrase_is_still_exact(phrases):
    found = search.ranked(phrases.indexer, '"out of memory"', search.make_filters(), 20, None)
    assert found["total_is_estimate"] is False and found["total"] == 10
    assert sorted(hit for hit, _ in found["hits"]) == [f"M-{i:02d}" for i in range(0, 40, 4)]


def test_hot_postings_give_the_same_scores_and_follow_deletes(big, monkeypatch):
    monkeypatch.setattr(fastscore, "HOT_MIN_DOCS", 1)
    searcher = big.indexer.searcher()
    parsed = parse_query(searcher, "rank timeout")
    cold = fastscore.score_all(searcher, parsed, None)
    assert fastscore._Scorer(searcher, None).is_hot("text", "rank")
    assert fastscore.score_all(searcher, parsed, None) == cold  # now from the decoded postings
    big.delete("R-07")
    searcher = big.indexer.searcher()
    ids = {d: fields["id"] for d, fields in searcher.reader().iter_docs()}
    after = fastscore.score_all(searcher, parse_query(searcher, "rank timeout"), None)
    assert "R-07" not in {ids[d] for d in after} and len(after) == len(cold) - 1
