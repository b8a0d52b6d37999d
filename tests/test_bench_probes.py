"""The probe set (bench/probes/probes.json) is well formed and independent of the corpus."""

from __future__ import annotations

from collections import Counter

from bench.corpus import evidence_texts
from bench.probes import load_probes, rank_of_label
from dsdoctor.kb.catalog import load_catalog
from dsdoctor.kb.loader import get_kb


def _has_cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def test_every_catalog_cause_has_three_probes_in_both_languages() -> None:
    probes = load_probes()
    assert len({p["id"] for p in probes}) == len(probes)
    counts = Counter(p["label"] for p in probes)
    assert set(counts) == set(load_catalog()) and set(counts.values()) == {3}
    for label in counts:
        assert {p["language"] for p in probes if p["label"] == label} == {"en", "zh"}
    for probe in probes:
        assert _has_cjk(probe["text"]) == (probe["language"] == "zh"), probe["id"]


def test_no_probe_is_a_corpus_sentence() -> None:
    texts = evidence_texts()
    assert len(texts) > 500
    for probe in load_probes():
        assert not any(probe["text"].lower() in text for text in texts), probe["id"]


def test_a_probe_is_ranked_by_the_whole_pipeline() -> None:
    kb = get_kb()
    probe = next(p for p in load_probes() if p["label"] == "comm.shm_insufficient" and p["language"] == "en")
    assert 1 <= rank_of_label(kb, probe) <= 3
    assert rank_of_label(kb, {**probe, "label": "not.a_cause"}) == 0
