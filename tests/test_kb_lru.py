"""The bounded LRU behind the engine's memos and the search caches."""

from __future__ import annotations

import threading

from dsdoctor.kb.lru import BoundedCache, memo


def test_least_recently_used_entries_go_first_and_the_size_holds():
    cache: BoundedCache[int] = BoundedCache(2)
    calls: list[str] = []

    def compute(key: str) -> int:
        calls.append(key)
        return len(calls)

    assert cache.get_or_compute("a", lambda: compute("a")) == 1
    assert cache.get_or_compute("b", lambda: compute("b")) == 2
    assert cache.get_or_compute("a", lambda: compute("a")) == 1  # remembered, and now the most recent
    cache.get_or_compute("c", lambda: compute("c"))  # "b" is the least recently used: dropped
    assert len(cache) == 2
    assert cache.get_or_compute("a", lambda: compute("a")) == 1
    assert cache.get_or_compute("b", lambda: compute("b")) == 4  # computed again
    assert calls == ["a", "b", "c", "b"]


def test_memo_makes_one_cache_per_name_and_keeps_it():
    tables: dict = {}
    first = memo(tables, "ranking_memo", 8)
    assert memo(tables, "ranking_memo", 8) is first
    assert memo(tables, "proposal_memo", 8) is not first


def test_concurrent_callers_all_get_a_value():
    cache: BoundedCache[int] = BoundedCache(16)
    results: list[int] = []

    def worker(n: int) -> None:
        for i in range(200):
            results.append(cache.get_or_compute(i % 32, lambda i=i: (i % 32) * 10))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 800 and all(r % 10 == 0 and r < 320 for r in results)
    assert len(cache) <= 16
