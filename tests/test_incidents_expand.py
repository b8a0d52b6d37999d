"""Cross-language search: a query also looks for the other language's words for the same thing."""

from __future__ import annotations

import pytest
import yaml

from dsdoctor.kb.incidents import IncidentStore
from dsdoctor.kb.incidents.expand import GLOSSARY_PATH, Concept, Expander, expand
from dsdoctor.kb.loader import load_kb


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    with IncidentStore(tmp_path_factory.mktemp("home"), seed=True) as store:
        yield store


def ids(store, q):
    return {item["id"] for item in store.search(q, limit=200)["items"]}


def test_chinese_out_of_memory_finds_english_oom_incidents(seeded):
    found = ids(seeded, "显存不足")
    # English-only public incidents and Chinese seed incidents that say "OOM" but never 显存不足
    assert {"PUB-c1-mistral-sft-oom-after-trl-upgrade", "PUB-c3-verl-fsdp2-actor-oom",
            "INC-SEED-03", "INC-SEED-05", "INC-SEED-06"} <= found
    assert found >= ids(seeded, '"out of memory"')


def test_english_hang_finds_chinese_only_incident(seeded):
    assert "INC-SEED-08" in ids(seeded, "hang")  # says only 卡住
    assert ids(seeded, "hang") == ids(seeded, "卡住")


def test_fragmentation_both_directions_and_by_root_cause(seeded):
    zh, en = ids(seeded, "显存碎片"), ids(seeded, "fragmentation")
    assert zh == en
    assert "PUB-c3-verl-fsdp2-actor-oom" in zh  # English text only
    assert {i["id"] for i in seeded.search("", cause="memory.fragmentation", limit=200)["items"]} <= zh


def test_kb_titles_are_concepts(seeded):
    assert expand("激活值超出显存") == \
        '(激活值超出显存 OR "Activations exceed GPU memory" OR root_cause:memory.activation_memory)'
    activation = {i["id"] for i in seeded.search("", cause="memory.activation_memory", limit=200)["items"]}
    assert activation and activation <= ids(seeded, "激活值超出显存")


def test_own_text_search_gets_other_language(dsdoctor_home):
    with IncidentStore(dsdoctor_home, seed=False) as store:
        store.add({"id": "ZH-OOM", "title": "第 0 步显存不足", "phenomenon": "rank 3 报错后退出",
                   "root_cause": "memory.activation_memory", "severity": "high"})
        store.add({"id": "EN-OOM", "title": "CUDA out of memory at step 0", "phenomenon": "rank 3 exits",
                   "root_cause": "memory.activation_memory", "severity": "high"})
        store.add({"id": "OTHER", "title": "NCCL timeout", "phenomenon": "rank 3 waits on an allreduce",
                   "root_cause": "comm.slow_rank_exceeds_timeout", "severity": "high"})
        assert ids(store, "out of memory") == {"ZH-OOM", "EN-OOM"}
        assert ids(store, "显存不足") == {"ZH-OOM", "EN-OOM"}
        assert ids(store, "OOM rank") == {"ZH-OOM", "EN-OOM"}  # the other words still must match
        found = store.search("显存不足")["items"]
        assert any("<mark>" in "".join(i["highlights"].values()) for i in found if i["id"] == "EN-OOM")


@pytest.mark.parametrize("q", ['"显存不足"', "title:显存不足", "root_cause:memory.fragmentation", "checkpoints",
                               "NCCL_SOCKET_IFNAME", "", "oom*", "显存不足*", "hang^2", "OOM~", "hang.py", "hang-up",
                               "train/hang"])
def test_quoted_fields_and_unknown_words_stay_as_typed(q):
    assert expand(q) == q


def test_a_prefix_query_still_finds_only_its_prefix(seeded):
    assert seeded.search("oom*")["total"] < seeded.search("")["total"] / 2


def test_longest_form_wins_and_words_are_whole():
    ex = Expander((Concept(("out of memory", "显存不足")), Concept(("memory", "内存"))))
    assert ex.expand("out of memory") == "((out of memory) OR 显存不足)"
    assert ex.expand("memoryless") == "memoryless"
    assert ex.expand("rank 3 显存不足了") == "rank 3 (显存不足 OR \"out of memory\")了"
    assert ex.expand("a AND memory") == "a AND (memory OR 内存)"


def test_glossary_is_bilingual_and_names_real_causes():
    causes = set(load_kb().causes)
    for entry in yaml.safe_load(GLOSSARY_PATH.read_text(encoding="utf-8"))["terms"]:
        assert entry["en"] and entry["zh"], entry
        assert set(entry.get("causes") or ()) <= causes, entry
