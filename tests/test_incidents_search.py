"""Search: Chinese and English text, boosts, filters, facets, highlights and cursor pagination."""

from __future__ import annotations

import pytest

from dsdoctor.kb.incidents import IncidentStore, ValidationError
from dsdoctor.kb.incidents.search import decode_cursor, encode_cursor

RECORDS = [
    {"id": "ZH-1", "title": "只有 rank 3 OOM", "phenomenon": "训练中出现显存碎片化导致 OOM",
     "root_cause": "memory.fragmentation", "severity": "high", "tags": ["oom"], "occurred_at": "2024-03-01"},
    {"id": "EN-1", "title": "Watchdog timeout on all ranks", "phenomenon": "rank 0 was saving checkpoints to NFS",
     "root_cause": "comm.slow_rank_exceeds_timeout", "severity": "critical", "tags": ["checkpoint", "nfs"],
     "occurred_at": "2024-06-03", "fix": "save sharded checkpoints to local NVMe"},
    {"id": "MIX-1", "title": "两台机器就卡住", "phenomenon": "NCCL picked docker0; 首个 allreduce 超时",
     "root_cause": "comm.network_interface", "severity": "high", "tags": ["nccl"], "occurred_at": "2024-01-16",
     "fix": "export NCCL_SOCKET_IFNAME=bond0"},
    {"id": "EN-2", "title": "Loss NaN after a checkpoint resume", "phenomenon": "nan from step 1 after resume",
     "root_cause": "config.checkpoint_incompatible", "severity": "medium", "tags": ["checkpoint"],
     "occurred_at": "2025-01-28"},
    {"id": "EN-3", "title": "GPU fell off the bus", "phenomenon": "Xid 79 on gpu-b07; the checkpoint was fine",
     "root_cause": "hardware.gpu_lost", "severity": "critical", "occurred_at": "2024-10-30",
     "scope": "<one node> & its GPUs"},
]


@pytest.fixture
def store(dsdoctor_home, store_backend):
    with IncidentStore(dsdoctor_home, seed=False) as s:
        for r in RECORDS:
            s.add({"phenomenon": "", **r} if r.get("phenomenon") else r)
        yield s


def ids(result):
    return [item["id"] for item in result["items"]]


def test_chinese_words_find_longer_chinese_text(store):
    assert ids(store.search("显存碎片")) == ["ZH-1"]
    assert ids(store.search("机器 卡住")) == ["MIX-1"]


def test_english_stemming(store):
    assert set(ids(store.search("checkpoints"))) == {"EN-1", "EN-2", "EN-3"}
    assert ids(store.search("saved")) == ["EN-1"]  # "saving" and "saved" share the stem "save"


def test_mixed_language_fields_and_identifiers(store):
    assert ids(store.search("docker0 超时")) == ["MIX-1"]
    assert ids(store.search("NCCL_SOCKET_IFNAME")) == ["MIX-1"]
    assert ids(store.search("fix:bond0")) == ["MIX-1"]


def test_title_outranks_other_fields(store):
    found = ids(store.search("checkpoint"))
    assert found.index("EN-2") < found.index("EN-3")  # EN-2 has it in the title, EN-3 only in the phenomenon


def test_all_words_must_match_unless_or(store):
    assert ids(store.search("checkpoint Xid")) == ["EN-3"]
    assert set(ids(store.search("Xid OR docker0"))) == {"EN-3", "MIX-1"}
    assert "EN-3" not in ids(store.search("checkpoint NOT Xid"))


def test_filters(store):
    assert set(ids(store.search("checkpoint", domain="comm"))) == {"EN-1"}
    assert set(ids(store.search("", cause="hardware.gpu_lost"))) == {"EN-3"}
    assert set(ids(store.search("", severity=["critical"]))) == {"EN-1", "EN-3"}
    assert set(ids(store.search("checkpoint", tag="CHECKPOINT"))) == {"EN-1", "EN-2"}
    assert set(ids(store.search("", since="2024-06-03", until="2024-10-30"))) == {"EN-1", "EN-3"}
    assert set(ids(store.search("checkpoint", since="2024-06-03", until="2024-10-30"))) == {"EN-1", "EN-3"}
    assert set(ids(store.search("", domain=["comm", "memory"]))) == {"EN-1", "MIX-1", "ZH-1"}


def test_bad_filters_are_validation_errors(store):
    with pytest.raises(ValidationError) as info:
        store.search("x", severity="urgent", since="yesterday")
    assert set(info.value.messages) == {"severity", "since"}
    with pytest.raises(ValidationError, match="after until"):
        store.search("", since="2025-01-01", until="2024-01-01")
    for limit in (0, 201, "5", True):
        with pytest.raises(ValidationError):
            store.search("", limit=limit)


def test_facets_count_every_match(store):
    result = store.search("checkpoint")
    assert result["total"] == 3
    assert result["facets"]["domain"] == {"comm": 1, "config": 1, "hardware": 1}
    assert sum(result["facets"]["root_cause"].values()) == 3
    empty = store.search("")
    assert empty["facets"]["domain"] == {"comm": 2, "config": 1, "hardware": 1, "memory": 1}
    assert empty["total"] == len(RECORDS)


def test_empty_query_lists_newest_first(store):
    assert ids(store.search("")) == ["EN-2", "EN-3", "EN-1", "ZH-1", "MIX-1"]
    assert all(item["score"] is None and item["highlights"] == {} for item in store.search("")["items"])


def test_highlights_mark_matches_in_escaped_text(store):
    item = store.search("GPUs")["items"][0]
    assert item["id"] == "EN-3"
    assert item["highlights"]["scope"] == "&lt;one node&gt; &amp; its <mark>GPUs</mark>"
    zh = store.search("显存碎片")["items"][0]["highlights"]
    assert "<mark>显存碎片</mark>" in zh["phenomenon"]
    assert store.search("checkpoints")["items"][0]["highlights"]


def test_negated_terms_are_not_highlighted(store):
    item = store.search("checkpoint NOT resume")["items"]
    assert all("resume</mark>" not in " ".join(i["highlights"].values()) for i in item)


@pytest.fixture
def many(dsdoctor_home, store_backend):
    with IncidentStore(dsdoctor_home, seed=False) as s:
        lines = []
        for i in range(23):
            text = "checkpoint timeout" if i % 3 else "checkpoint timeout checkpoint"  # many equal scores
            lines.append({"id": f"P-{i:02d}", "title": f"case {i}", "phenomenon": text,
                          "root_cause": "comm.slow_rank_exceeds_timeout", "occurred_at": f"2024-01-{1 + i % 5:02d}"})
        import json
        s.import_jsonl([json.dumps(r) for r in lines])
        yield s


@pytest.mark.parametrize("query", ["checkpoint", ""])
def test_cursor_pagination_is_complete_and_stable(many, query):
    everything = ids(many.search(query, limit=200))
    assert len(everything) == 23
    seen, cursor, pages = [], None, 0
    while True:
        page = many.search(query, limit=4, cursor=cursor)
        assert page["total"] == 23
        seen.extend(ids(page))
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == everything and len(set(seen)) == 23 and pages == 6
    again = many.search(query, limit=4, cursor=many.search(query, limit=4)["next_cursor"])
    assert ids(again) == everything[4:8]


def test_order_is_score_then_id(many):
    items = many.search("checkpoint", limit=200)["items"]
    keys = [(-item["score"], item["id"]) for item in items]
    assert keys == sorted(keys)


def test_cursor_from_another_query_or_garbage_is_refused(many):
    cursor = many.search("checkpoint", limit=2)["next_cursor"]
    with pytest.raises(ValidationError, match="different query"):
        many.search("timeout", limit=2, cursor=cursor)
    with pytest.raises(ValidationError, match="not a cursor"):
        many.search("checkpoint", cursor="garbage!")


def test_cursor_roundtrip():
    cursor = encode_cursor("abc", [1.5, "X-1"], 4)
    assert decode_cursor(cursor, "abc") == ([1.5, "X-1"], 4)


def test_star_and_odd_syntax_do_not_fail(store):
    assert store.search("*")["total"] == len(RECORDS)
    for q in ["(", "a AND", '"unbalanced', "title:", "OR OR", "Xid 79: fallen"]:
        assert isinstance(store.search(q)["items"], list)


def test_deleted_incident_disappears_from_search(store):
    store.delete("EN-3")
    assert "EN-3" not in ids(store.search("checkpoint"))


LAZY = """
import sys
from pathlib import Path
from dsdoctor.kb.incidents import IncidentStore
store = IncidentStore(Path(sys.argv[1]), seed=False)
english = store.search("checkpoints")
print(english["total"], "jieba" in sys.modules)
chinese = store.search("显存碎片")
print(chinese["total"], "jieba" in sys.modules)
"""


def test_searching_english_in_a_fresh_process_does_not_import_jieba(store, dsdoctor_home):
    import subprocess
    import sys
    from pathlib import Path

    store.close()  # the index already holds Chinese documents
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", LAZY, str(dsdoctor_home)], cwd=root, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.split() == ["3", "False", "1", "True"], out.stderr


def test_empty_query_counts_follow_writes_from_other_workers(store, dsdoctor_home):
    assert store.search("")["total"] == len(RECORDS)
    with IncidentStore(dsdoctor_home, seed=False) as other:
        other.add({"title": "new", "phenomenon": "x", "root_cause": "hardware.gpu_lost"})
    after = store.search("")
    assert after["total"] == len(RECORDS) + 1 and after["facets"]["domain"]["hardware"] == 2


def test_long_fields_are_highlighted_around_the_match(store):
    long = "filler text " * 200 + "the Xid 79 line " + "more filler " * 100
    store.update("EN-3", {"phenomenon": long})
    marked = store.search("Xid")["items"][0]["highlights"]["phenomenon"]
    assert marked.startswith("…") and marked.endswith("…") and "<mark>Xid</mark>" in marked
    assert len(marked) < 700


def test_searching_an_empty_store(dsdoctor_home, store_backend):
    with IncidentStore(dsdoctor_home, seed=False) as empty:
        for q in ("checkpoint", "显存", "", '"out of memory"'):
            result = empty.search(q, domain="memory")
            assert result == {"items": [], "facets": {"root_cause": {}, "domain": {}}, "next_cursor": None,
                              "total": 0, "total_is_estimate": False}
        assert empty.similar(text="checkpoint timeout") == []
